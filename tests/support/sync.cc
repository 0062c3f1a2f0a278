#include "support/sync.h"

#include <dirent.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace cohort::testing {

void EventCount::add(int n) {
  std::lock_guard<std::mutex> lock(mutex_);
  count_ += n;
  changed_.notify_all();
}

bool EventCount::wait_for(int target, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] { return count_ >= target; });
}

int EventCount::value() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return count_;
}

pid_t current_thread_id() {
  return static_cast<pid_t>(::syscall(SYS_gettid));
}

int thread_count() {
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) return -1;
  int count = 0;
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  ::closedir(dir);
  return count;
}

namespace {

// The state letter of /proc/self/task/<tid>/stat ('R', 'S', 'D', ...), or 0 when the thread has
// ended. The name in parentheses may hold spaces and parentheses: the state follows the last ')'.
char thread_state(pid_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return 0;
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return 0;
  return stat[close + 2];
}

}  // namespace

bool wait_until_blocked(pid_t tid, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const char state = thread_state(tid);
    if (state == 'S' || state == 0) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::yield();  // let the watched thread run on a busy machine
  }
}

}  // namespace cohort::testing
