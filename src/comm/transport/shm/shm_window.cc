#include "transport/shm/shm_window.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <random>
#include <sstream>

#include "cohort/comm/store.h"
#include "cohort/comm/transport.h"
#include "cohort/core/check.h"
#include "cohort/core/error.h"
#include "cohort/core/logging.h"
#include "transport/call_stamp.h"
#include "transport/shm/shm_name_guard.h"
#include "transport/shm/shm_names.h"
#include "transport/shm/shm_registry.h"
#include "transport/wire_error.h"

namespace cohort {

constexpr size_t kLine = 64;
// "cohorts" and a layout version: ranks built with another layout of the rank lines never
// take each other's segments.
constexpr uint64_t kMagic = 0x636f686f72747302ull;

struct ShmHeader {
  uint64_t magic;
  uint64_t nonce;
  int32_t size;
  uint64_t slot_bytes;
  alignas(kLine) std::atomic<int32_t> attached;
  // kRunning, then kAborting while the aborting rank writes the error below, then kAborted.
  alignas(kLine) std::atomic<int32_t> aborted;
  int32_t error_kind;
  int32_t error_failed_rank;
  int32_t error_reporter;
  char error_message[2048];
};

constexpr int32_t kRunning = 0;
constexpr int32_t kAborting = 1;
constexpr int32_t kAborted = 2;

// The first line is what every wait reads; the second what only registered collectives,
// registrations and the liveness checks do.
struct alignas(kLine) ShmRankLine {
  std::atomic<uint64_t> posted;
  // The call of round g is in calls[g % 2] and its region in regions[g % 2], written before
  // `posted` says g is done (as the slots are, and reused on the same terms: Note [Slot reuse]).
  ShmRoundCall calls[2];
  uint32_t regions[2];
  alignas(kLine) std::atomic<int32_t> pid;
  // 1 once the rank closed its window (its group destroyed, the process ending normally): a
  // peer that waits for it then says so instead of that it died (issue 35).
  std::atomic<int32_t> closed;
  uint64_t offsets[2];  // of round g's buffer in its region, as regions[g % 2]
  ShmOffer offers[2];   // of round g, as regions[g % 2]
};
static_assert(sizeof(ShmRankLine) % kLine == 0, "a rank's control lines are whole cache lines");

namespace {

size_t round_up(size_t bytes) {
  return (bytes + kLine - 1) / kLine * kLine;
}

constexpr size_t kHeaderBytes = 4096;
constexpr size_t kLinesBytes = sizeof(ShmRankLine) * ShmWindow::kMaxRanks;

// The header page, the rank lines and two slots per rank.
size_t segment_bytes(int size, size_t slot_bytes) {
  return kHeaderBytes + kLinesBytes + 2 * static_cast<size_t>(size) * slot_bytes;
}

uint64_t fresh_nonce() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

Milliseconds left(Deadline deadline) {
  return std::chrono::duration_cast<Milliseconds>(deadline.remaining());
}

bool process_is_gone(pid_t pid);  // below, with the waits

// Note [Shared-memory waits]: spin only where every rank of the node can have a CPU.
int spins_before_yield(int ranks) {
  constexpr int kSpins = 4000;
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (::sched_getaffinity(0, sizeof cpus, &cpus) != 0) return kSpins;
  return ranks > CPU_COUNT(&cpus) ? 0 : kSpins;
}

std::atomic<ShmWindow::CreationHook> g_creation_hook{nullptr};

void reached(const char* step, int rank) {
  if (const ShmWindow::CreationHook hook = g_creation_hook.load()) hook(step, rank);
}

// Rank 0's segment name: from the job token, this process and a fresh nonce, so that neither
// another job nor an earlier group of this one can hold it (shm_names.h: launchers find a
// reaped rank's names by pid).
std::string fresh_name(const std::string& job_token, uint64_t nonce) {
  return shm_segment_name(job_token, ::getpid(), nonce);
}

// Rank 0, after publishing `name` (so that any rank can remove it): the segment, initialized
// with this rank's pid (peers watch it from now on), then the nonce that says it is ready.
// When it cannot be made, publishes an empty nonce so that every rank stays on TCP.
std::optional<ShmSegment> create_and_publish(Store& store, const std::string& name, uint64_t nonce,
                                             int size, size_t slot_bytes, size_t bytes) {
  std::optional<ShmSegment> created;
  try {
    created = ShmSegment::create(name, bytes);
  } catch (const ConfigError& e) {
    COHORT_LOG(kWarn, "shared memory unavailable, ranks on this host use TCP: ", e.what());
    store.set("shm/nonce", std::string());
    return std::nullopt;
  }
  reached("created", 0);
  auto* header = new (created->data()) ShmHeader{};
  header->magic = kMagic;
  header->nonce = nonce;
  header->size = size;
  header->slot_bytes = slot_bytes;
  auto* lines =
      reinterpret_cast<ShmRankLine*>(static_cast<uint8_t*>(created->data()) + kHeaderBytes);
  lines[0].pid.store(static_cast<int32_t>(::getpid()), std::memory_order_relaxed);
  store.set("shm/nonce", std::to_string(nonce));
  reached("published", 0);
  return created;
}

// Other ranks: a key rank 0 publishes, such as the nonce it publishes once its segment is ready
// ("" when it has none). Rank 0 may die before: its pid is watched meanwhile, so that this is a
// PeerError at once.
std::string wait_for_creator(Store& store, const std::string& key, pid_t creator, int creator_rank,
                             Deadline deadline) {
  constexpr Milliseconds kPoll{20};
  for (;;) {
    try {
      return store.get_string(key, std::min(kPoll, left(deadline)));
    } catch (const TimeoutError&) {
      if (deadline.expired()) {
        throw TimeoutError(detail::concat("creating shared memory: rank ", creator_rank, " (pid ",
                                          creator, ") did not publish its segment in time"));
      }
    }
    if (process_is_gone(creator)) {
      throw PeerError(creator_rank,
                      detail::concat("creating shared memory: rank ", creator_rank, " (pid ",
                                     creator, ") died before its segment was ready"));
    }
  }
}

// The segment rank 0 published was removed before this rank opened it: rank 0 gave the window
// up, because a rank it waited for died (named when its process is gone and the host exchange
// gave its pid; rank 0 last, whose own end may follow the loss it gave up for) or because it
// failed itself.
[[noreturn]] void throw_segment_gone(const std::string& name, const std::vector<int>& group_ranks,
                                     const std::vector<pid_t>& pids) {
  // The others first: rank 0 may have ended already, after giving up for one of them.
  for (size_t i = 1; i <= pids.size(); ++i) {
    const size_t r = i % pids.size();
    if (pids[r] <= 0 || pids[r] == ::getpid() || !process_is_gone(pids[r])) continue;
    throw PeerError(group_ranks[r],
                    detail::concat("attaching shared memory: rank ", group_ranks[r], " (pid ",
                                   pids[r], ") never attached here and its process is gone; rank ",
                                   group_ranks[0], " gave up the window (removed ", name,
                                   "), and its shared memory peers cannot go on"));
  }
  throw PeerError(group_ranks[0],
                  detail::concat("attaching shared memory: rank ", group_ranks[0], " removed ",
                                 name, " before this rank opened it: it gave up the window"));
}

// Other ranks: the segment rank 0 published, checked to be this job's; nullopt if none. The
// guard watches its name from the moment it is known. `pids` (may be empty) holds rank 0's pid
// when the caller knows it (else it is read from what rank 0 publishes).
std::optional<ShmSegment> open_published(Store& store, size_t bytes,
                                         const std::vector<int>& group_ranks,
                                         const std::vector<pid_t>& pids, ShmNameGuard& guard,
                                         Deadline deadline) {
  const int creator_rank = group_ranks[0];
  const pid_t known_creator = pids.empty() ? 0 : pids[0];
  const pid_t creator =
      known_creator > 0
          ? known_creator
          : static_cast<pid_t>(std::stol(store.get_string("shm/pid", left(deadline))));
  const std::string name = wait_for_creator(store, "shm/name", creator, creator_rank, deadline);
  guard.watch(name);
  const std::string nonce = wait_for_creator(store, "shm/nonce", creator, creator_rank, deadline);
  if (nonce.empty()) {
    guard.release();  // rank 0 made nothing under this name
    return std::nullopt;
  }
  std::optional<ShmSegment> present = ShmSegment::open_if_present(name, bytes);
  if (!present) throw_segment_gone(name, group_ranks, pids);
  ShmSegment opened = std::move(*present);
  const auto* header = static_cast<const ShmHeader*>(opened.data());
  if (header->magic != kMagic || std::to_string(header->nonce) != nonce) {
    guard.release();  // not ours to remove
    throw ConfigError("shared memory segment " + name + " belongs to another job");
  }
  return opened;
}

}  // namespace

ShmWindow::ShmWindow(ShmSegment segment, int rank, int size, std::vector<int> group_ranks,
                     std::vector<pid_t> pids, size_t slot_bytes)
    : segment_(std::move(segment)),
      rank_(rank),
      size_(size),
      group_ranks_(std::move(group_ranks)),
      known_pids_(std::move(pids)),
      slot_bytes_(slot_bytes),
      spins_(spins_before_yield(size)),
      registry_(std::make_shared<ShmRegistry>()) {
  auto* base = static_cast<uint8_t*>(segment_.data());
  header_ = reinterpret_cast<ShmHeader*>(base);
  lines_ = reinterpret_cast<ShmRankLine*>(base + kHeaderBytes);
  slots_ = base + kHeaderBytes + kLinesBytes;
}

ShmWindow::~ShmWindow() {
  lines_[rank_].closed.store(1, std::memory_order_release);
}

void ShmWindow::set_creation_hook(CreationHook hook) {
  g_creation_hook.store(hook);
}

// Note [Shared-memory lifetime].
std::unique_ptr<ShmWindow> ShmWindow::create(Store& store, int rank, int size,
                                             std::vector<int> group_ranks, std::vector<pid_t> pids,
                                             const std::string& job_token, size_t slot_bytes,
                                             Deadline deadline) {
  COHORT_CHECK(size >= 1 && size <= kMaxRanks, "shared memory supports up to ", kMaxRanks,
               " ranks on a host, got ", size);
  COHORT_INTERNAL_ASSERT(group_ranks.size() == static_cast<size_t>(size),
                         "a shared memory window needs the group rank of each of its ranks");
  COHORT_INTERNAL_ASSERT(pids.empty() || pids.size() == static_cast<size_t>(size),
                         "a shared memory window watches the pid of each of its ranks, or none");
  reached("joining", rank);
  slot_bytes = round_up(slot_bytes);
  const size_t bytes = segment_bytes(size, slot_bytes);
  ShmNameGuard guard;  // removes the name when this function ends, however it ends
  std::optional<ShmSegment> segment;
  if (rank == 0) {
    const uint64_t nonce = fresh_nonce();
    const std::string name = fresh_name(job_token, nonce);
    guard.watch(name);
    store.set("shm/pid", std::to_string(::getpid()));
    store.set("shm/name", name);
    reached("named", 0);
    segment = create_and_publish(store, name, nonce, size, slot_bytes, bytes);
  } else {
    segment = open_published(store, bytes, group_ranks, pids, guard, deadline);
  }
  if (!segment) {
    guard.release();  // no segment was made under this name: it may not be ours
    return nullptr;
  }
  std::unique_ptr<ShmWindow> window(new ShmWindow(
      std::move(*segment), rank, size, std::move(group_ranks), std::move(pids), slot_bytes));
  window->lines_[rank].pid.store(static_cast<int32_t>(::getpid()), std::memory_order_relaxed);
  reached("opened", rank);
  // The last rank to attach removes the name; then every rank does (in the guard), and a rank
  // that fails removes it at once, so that no other can be left holding it.
  const bool last = window->header_->attached.fetch_add(1, std::memory_order_acq_rel) + 1 == size;
  reached("attached", rank);
  if (last) window->segment_.unlink();
  window->post_and_wait(window->next_round(), deadline, "attaching shared memory");
  return window;
}

uint8_t* ShmWindow::slot(int rank, uint64_t round) const {
  return slots_ + (2 * static_cast<size_t>(rank) + (round & 1)) * slot_bytes_;
}

void ShmWindow::abort(std::exception_ptr error) noexcept {
  int32_t expected = kRunning;
  if (!header_->aborted.compare_exchange_strong(expected, kAborting)) return;  // first one wins
  const WireError wire = WireError::from(error);
  header_->error_kind = wire.kind;
  header_->error_failed_rank = wire.failed_rank;
  header_->error_reporter = rank_;
  const size_t length = std::min(wire.message.size(), sizeof(header_->error_message) - 1);
  std::memcpy(header_->error_message, wire.message.data(), length);
  header_->error_message[length] = '\0';
  header_->aborted.store(kAborted, std::memory_order_release);
}

namespace {

// kill(pid, 0) succeeds for a zombie (dead but not yet reaped by its parent): read its state.
// With open/read, not std::ifstream: when the parent reaps the zombie between kill() and the
// read, read() fails with ESRCH, which libstdc++'s filebuf throws as std::ios_failure straight
// through istreambuf_iterator; that escaped the collective and aborted a rank whose peer had
// just died, where it should have raised PeerError (seen under cohortrun --min-ranks, which
// reaps a dead rank at once while the others recover).
bool process_is_gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT || errno == ESRCH;
  char buffer[512];  // "pid (name) S ...": the name is at most 16 bytes
  const ssize_t n = ::read(fd, buffer, sizeof buffer);
  const int read_errno = errno;
  ::close(fd);
  if (n < 0) return read_errno == ESRCH;
  const std::string text(buffer, static_cast<size_t>(n));
  const size_t end_of_name = text.rfind(')');
  if (end_of_name == std::string::npos || end_of_name + 2 >= text.size()) return false;
  const char state = text[end_of_name + 2];
  return state == 'Z' || state == 'X';
}

}  // namespace

void ShmWindow::post_and_wait(uint64_t round, Deadline deadline, const char* what) {
  post_and_wait(round, ShmRoundCall{}, deadline, what);
}

ShmPlace ShmWindow::place(int rank, uint64_t round) const {
  const ShmRankLine& line = lines_[rank];
  return ShmPlace{line.regions[round & 1], line.offsets[round & 1]};
}

void ShmWindow::set_offer(uint64_t round, const ShmOffer& offer) {
  lines_[rank_].offers[round & 1] = offer;
}

ShmOffer ShmWindow::offer(int rank, uint64_t round) const {
  return lines_[rank].offers[round & 1];
}

int ShmWindow::pid(int rank) const {
  return lines_[rank].pid.load(std::memory_order_relaxed);
}

// Note [Shared-memory waits].
void ShmWindow::post_and_wait(uint64_t round, const ShmRoundCall& call, Deadline deadline,
                              const char* what, ShmPlace place) {
  // A rank that failed may have posted a round it never finished: after an abort nothing that
  // is in the slots may be used, even when every counter says the round is complete.
  rethrow_if_aborted();
  ShmRankLine& mine = lines_[rank_];
  mine.calls[round & 1] = call;
  mine.regions[round & 1] = place.region;
  // Written only when it changes: the line then stays in the peers' caches across rounds.
  if (place.region != 0 && mine.offsets[round & 1] != place.offset) {
    mine.offsets[round & 1] = place.offset;
  }
  mine.posted.store(round + 1, std::memory_order_release);
  constexpr int kPollsBetweenChecks = 256;
  int polls = 0;
  for (int r = 0; r < size_; ++r) {
    const auto& value = lines_[r].posted;
    while (value.load(std::memory_order_acquire) <= round) {
      if (++polls < spins_) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
        continue;
      }
      ::sched_yield();
      if (polls % kPollsBetweenChecks == 0) check_alive(round, deadline, what);
    }
  }
  if (call.stamp.stamped()) check_same_call(round, call);
  check_same_region(round, call, what);
}

// Note [Registered buffers]: a round in which ranks disagree on where the buffers are would
// read private memory as if it were shared, so it is an error whether or not calls are checked.
void ShmWindow::check_same_region(uint64_t round, const ShmRoundCall& call,
                                  const char* what) const {
  const uint32_t mine = lines_[rank_].regions[round & 1];
  for (int r = 0; r < size_; ++r) {
    const uint32_t theirs = lines_[r].regions[round & 1];
    if (theirs == mine) continue;
    const auto describe = [](uint32_t region) {
      return region == 0 ? std::string("private memory")
                         : "registered memory #" + std::to_string(region);
    };
    throw MismatchError(detail::concat(
        what, " (collective #", call.sequence, "): rank ", group_ranks_[static_cast<size_t>(rank_)],
        " passed ", describe(mine), " but rank ", group_ranks_[static_cast<size_t>(r)], " passed ",
        describe(theirs),
        "; the ranks of a node must all pass buffers of the same "
        "Group::allocate_registered call, or all pass private memory"));
  }
}

// Note [Call stamps]: every local rank compares every other's call of the round, so each one
// throws (naming the lowest rank that differs) without waiting for an abort to reach it.
void ShmWindow::check_same_call(uint64_t round, const ShmRoundCall& mine) const {
  for (int r = 0; r < size_; ++r) {
    const ShmRoundCall& theirs = lines_[r].calls[round & 1];
    if (r == rank_ || !theirs.stamp.stamped()) continue;
    if (theirs.sequence == mine.sequence && theirs.stamp.same_call(mine.stamp)) continue;
    throw call_mismatch(mine.sequence, group_ranks_[static_cast<size_t>(rank_)], mine.stamp,
                        theirs.sequence, group_ranks_[static_cast<size_t>(r)], theirs.stamp);
  }
}

void ShmWindow::rethrow_if_aborted() const {
  if (header_->aborted.load(std::memory_order_acquire) != kAborted) return;
  WireError wire;
  wire.kind = static_cast<WireError::Kind>(header_->error_kind);
  wire.failed_rank = header_->error_failed_rank;
  wire.message = header_->error_message;
  wire.rethrow(header_->error_reporter);
}

pid_t ShmWindow::watched_pid(int rank) const {
  const pid_t opened = lines_[rank].pid.load(std::memory_order_relaxed);
  if (opened > 0 || known_pids_.empty()) return opened;
  return known_pids_[static_cast<size_t>(rank)];
}

// A rank that has not opened the window yet has no pid in its line: the one the host exchange
// gave create() stands for it, so a rank that dies before it attaches is named too.
//
// A peer may post the round, leave it and end between this rank's look at its `posted` and the
// look at its process: `posted` is read again once the peer is seen closed or gone (it cannot
// post after that), so that a peer that took part is never reported lost.
void ShmWindow::check_alive(uint64_t round, Deadline deadline, const char* what) const {
  rethrow_if_aborted();
  const auto has_posted = [&](int r) {
    return lines_[r].posted.load(std::memory_order_acquire) > round;
  };
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || has_posted(r)) continue;
    const int peer = group_ranks_[static_cast<size_t>(r)];
    if (lines_[r].closed.load(std::memory_order_acquire) != 0) {
      if (has_posted(r)) continue;
      throw PeerError(peer, detail::concat(what, ": rank ", peer, " (pid ", watched_pid(r),
                                           ") closed its group (it destroyed it, or its process "
                                           "ended) without taking part; its shared memory peers "
                                           "cannot go on"));
    }
    const pid_t pid = watched_pid(r);
    if (pid <= 0 || pid == ::getpid() || !process_is_gone(pid) || has_posted(r)) continue;
    const bool attached = lines_[r].pid.load(std::memory_order_relaxed) > 0;
    throw PeerError(peer,
                    detail::concat(what, ": rank ", peer, " (pid ", pid, ") ",
                                   attached ? "died" : "never attached and its process is gone",
                                   "; its shared memory peers cannot go on"));
  }
  if (deadline.expired()) {
    throw TimeoutError(detail::concat(what, ": waited past the deadline for shared memory peers ",
                                      describe_late(round)));
  }
}

std::string ShmWindow::describe_late(uint64_t round) const {
  std::string late;
  for (int r = 0; r < size_; ++r) {
    if (lines_[r].posted.load(std::memory_order_acquire) > round) continue;
    const bool attached = lines_[r].pid.load(std::memory_order_relaxed) > 0;
    late += detail::concat(late.empty() ? "" : ", ", "rank ", group_ranks_[static_cast<size_t>(r)],
                           " (pid ", watched_pid(r), attached ? "" : ", never attached", ")");
  }
  return late;
}

}  // namespace cohort
