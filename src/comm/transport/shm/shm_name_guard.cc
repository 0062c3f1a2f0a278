#include "transport/shm/shm_name_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

namespace cohort {
namespace {

// The signal handler may only read memory that never moves and call async-signal-safe
// functions: a fixed table of paths under /dev/shm (where glibc's shm_open puts names), each
// published by its state, and unlink().
constexpr int kSlots = 32;
constexpr size_t kPathBytes = 256;
constexpr int kFree = 0;
constexpr int kFilling = 1;
constexpr int kWatched = 2;

struct Slot {
  std::atomic<int> state{kFree};
  char path[kPathBytes];
};
Slot g_slots[kSlots];

constexpr int kSignals[] = {SIGTERM, SIGINT, SIGHUP};
constexpr int kSignalCount = sizeof kSignals / sizeof kSignals[0];

std::mutex g_mutex;  // guards the counts and handler installation below (never the handler)
int g_watching = 0;
bool g_installed[kSignalCount] = {};

void on_fatal_signal(int signal) {
  const int saved_errno = errno;
  for (Slot& slot : g_slots) {
    if (slot.state.load(std::memory_order_acquire) == kWatched) ::unlink(slot.path);
  }
  // End the process as the signal would have: the default action, delivered when this handler
  // returns (the signal is blocked while it runs).
  struct sigaction original {};
  original.sa_handler = SIG_DFL;
  sigemptyset(&original.sa_mask);
  ::sigaction(signal, &original, nullptr);
  ::raise(signal);
  errno = saved_errno;
}

// Only where the signal would end the process: a program with its own handler, or one that
// ignores the signal, keeps it (and, ending normally, runs the guards' destructors).
void install_handlers() {
  for (int i = 0; i < kSignalCount; ++i) {
    struct sigaction current {};
    if (::sigaction(kSignals[i], nullptr, &current) != 0 || current.sa_handler != SIG_DFL ||
        (current.sa_flags & SA_SIGINFO) != 0) {
      continue;
    }
    struct sigaction ours {};
    ours.sa_handler = on_fatal_signal;
    sigemptyset(&ours.sa_mask);
    for (int s : kSignals) sigaddset(&ours.sa_mask, s);  // one cleanup at a time
    g_installed[i] = ::sigaction(kSignals[i], &ours, nullptr) == 0;
  }
}

// Puts back the default handler, unless the program replaced ours meanwhile.
void remove_handlers() {
  for (int i = 0; i < kSignalCount; ++i) {
    if (!g_installed[i]) continue;
    g_installed[i] = false;
    struct sigaction current {};
    if (::sigaction(kSignals[i], nullptr, &current) != 0 || current.sa_handler != on_fatal_signal) {
      continue;
    }
    struct sigaction original {};
    original.sa_handler = SIG_DFL;
    sigemptyset(&original.sa_mask);
    ::sigaction(kSignals[i], &original, nullptr);
  }
}

int claim_slot(const std::string& path) {
  for (int i = 0; i < kSlots; ++i) {
    int expected = kFree;
    if (g_slots[i].state.compare_exchange_strong(expected, kFilling)) {
      std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
      g_slots[i].state.store(kWatched, std::memory_order_release);
      return i;
    }
  }
  return -1;
}

}  // namespace

void ShmNameGuard::watch(const std::string& name) noexcept {
  release();
  name_ = name;
  const std::string path = "/dev/shm" + name;
  if (name.empty() || name[0] != '/' || path.size() >= kPathBytes) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  slot_ = claim_slot(path);
  if (slot_ >= 0 && g_watching++ == 0) install_handlers();
}

void ShmNameGuard::release() noexcept {
  name_.clear();
  if (slot_ < 0) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  g_slots[slot_].state.store(kFree, std::memory_order_release);
  slot_ = -1;
  if (--g_watching == 0) remove_handlers();
}

ShmNameGuard::~ShmNameGuard() {
  // Removed before the handler stops watching, so that no signal can come in between.
  if (!name_.empty()) ::shm_unlink(name_.c_str());  // ENOENT: already removed, by us or a peer
  release();
}

}  // namespace cohort
