#include "local_attempt.h"

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>

#include "cohort/core/error.h"
#include "output_relay.h"
#include "rank_process.h"
#include "stop_signals.h"

namespace cohort::run {

namespace {

constexpr Milliseconds kPumpInterval{100};
constexpr Milliseconds kRemoteCheckInterval{250};
constexpr Milliseconds kDrainTimeout{2000};
constexpr Milliseconds kSettle{300};  // Note [Who failed first]

using Outcome = AttemptResult::Outcome;

class LocalAttempt {
 public:
  LocalAttempt(const LaunchOptions& options, RankPlacement placement, NodeRendezvous& rendezvous)
      : options_(options),
        placement_(std::move(placement)),
        rendezvous_(rendezvous),
        relay_(options.prefix_output, static_cast<size_t>(options.tail_lines)) {}

  AttemptResult run() {
    start_ranks();
    while (any_running()) {
      relay_.pump(kPumpInterval);
      collect_failures();
      watch_stop_signal();
      watch_other_nodes();
      if (kill_at_ && kill_at_->expired()) signal_all(SIGKILL);
    }
    relay_.drain(Deadline::after(kDrainTimeout));
    for (RankFailure& f : result_.failures) f.last_lines = relay_.tail(f.rank);
    return std::move(result_);
  }

 private:
  void start_ranks() {
    std::fflush(stdout);  // nothing of ours may be pending when the ranks start writing
    std::fflush(stderr);
    for (int local = 0; local < options_.nproc_per_node; ++local) {
      RankPlacement placement = placement_;
      placement.local_rank = local;
      auto rank = std::make_unique<RankProcess>(global_rank(options_, local), options_.command,
                                                rank_environment(options_, placement));
      relay_.add(rank->rank(), rank->take_stdout(), stdout);
      relay_.add(rank->rank(), rank->take_stderr(), stderr);
      ranks_.push_back(std::move(rank));
    }
  }

  bool any_running() const {
    return std::any_of(ranks_.begin(), ranks_.end(), [](const auto& r) { return r->running(); });
  }

  // Note [Who failed first]: when one rank dies, the others soon fail too (they see a
  // PeerError and exit, or abort when it is not caught), often before cohortrun looks, and the
  // summary should lead with the cause. A rank's death can also show to its peers before its
  // parent can reap it (the kernel holds the zombie until all its threads are gone). So after
  // the first failure cohortrun keeps reaping for kSettle before it stops the others, and
  // orders what it found: killed by a signal from outside (SIGKILL, SIGSEGV, ...) first, then
  // aborted (SIGABRT: an uncaught exception), then non-zero exits.
  void collect_failures() {
    std::vector<RankProcess*> failed = reap_failed();
    if (failed.empty()) return;
    if (!stopping()) {
      const Deadline settle = Deadline::after(kSettle);
      while (!settle.expired() && any_running()) {
        relay_.pump(Milliseconds(10));
        const std::vector<RankProcess*> more = reap_failed();
        failed.insert(failed.end(), more.begin(), more.end());
      }
    }
    std::stable_sort(failed.begin(), failed.end(), [](RankProcess* a, RankProcess* b) {
      return likely_cause(*a) < likely_cause(*b);
    });
    for (RankProcess* rank : failed) result_.failures.push_back(failure_of(*rank));
    stop(Outcome::kRanksFailed, SIGTERM);
  }

  std::vector<RankProcess*> reap_failed() {
    std::vector<RankProcess*> failed;
    for (auto& rank : ranks_) {
      if (rank->running() && rank->reap() && rank->failed() && !was_stopped(rank->rank())) {
        failed.push_back(rank.get());
      }
    }
    return failed;
  }

  // Smaller is more likely the cause (Note [Who failed first]).
  static int likely_cause(const RankProcess& rank) {
    if (!rank.killed_by_signal()) return 2;
    return rank.exit_code() == 128 + SIGABRT ? 1 : 0;
  }

  RankFailure failure_of(const RankProcess& rank) const {
    RankFailure f;
    f.rank = rank.rank();
    f.local_rank = rank.rank() - global_rank(options_, 0);
    f.pid = rank.pid();
    f.exit_code = rank.exit_code();
    f.what = rank.describe();
    return f;
  }

  void watch_stop_signal() {
    const int signal = received_stop_signal();
    if (signal == 0 || result_.stop_signal != 0) return;
    result_.stop_signal = signal;
    stop(Outcome::kInterrupted, signal);  // forwards the user's signal itself
  }

  void watch_other_nodes() {
    if (!options_.multi_node() || stopping() || !remote_check_.expired()) return;
    remote_check_ = Deadline::after(kRemoteCheckInterval);
    try {
      if (auto report = rendezvous_.failure(placement_.attempt)) {
        result_.cause = *report;
        stop(Outcome::kOtherNodeFailed, SIGTERM);
      }
    } catch (const Error& e) {
      result_.cause = e.what();
      stop(Outcome::kStoreLost, SIGTERM);
    }
  }

  // Asks every running rank to stop (once), and schedules the SIGKILL.
  void stop(Outcome outcome, int signal) {
    if (outcome == Outcome::kInterrupted || !stopping()) result_.outcome = outcome;
    if (stopping() && outcome != Outcome::kInterrupted) return;
    for (auto& rank : ranks_) {
      if (rank->running() && !was_stopped(rank->rank())) result_.stopped.push_back(rank->rank());
    }
    signal_all(signal);
    if (!kill_at_) kill_at_ = Deadline::after(options_.stop_timeout());
  }

  bool stopping() const { return kill_at_.has_value(); }

  bool was_stopped(int rank) const {
    return std::find(result_.stopped.begin(), result_.stopped.end(), rank) != result_.stopped.end();
  }

  void signal_all(int signal) {
    for (auto& rank : ranks_) rank->signal(signal);
  }

  const LaunchOptions& options_;
  RankPlacement placement_;
  NodeRendezvous& rendezvous_;
  OutputRelay relay_;
  std::vector<std::unique_ptr<RankProcess>> ranks_;
  AttemptResult result_;
  std::optional<Deadline> kill_at_;
  Deadline remote_check_ = Deadline::after(Milliseconds(0));
};

}  // namespace

AttemptResult run_local_attempt(const LaunchOptions& options, const RankPlacement& placement,
                                NodeRendezvous& rendezvous) {
  return LocalAttempt(options, placement, rendezvous).run();
}

}  // namespace cohort::run
