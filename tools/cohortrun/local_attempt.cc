#include "local_attempt.h"

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>

#include "blame.h"
#include "cohort/core/error.h"
#include "output_relay.h"
#include "rank_process.h"
#include "shm_leftovers.h"
#include "stop_signals.h"

namespace cohort::run {

namespace {

constexpr Milliseconds kPumpInterval{100};
constexpr Milliseconds kRemoteCheckInterval{250};
constexpr Milliseconds kDrainTimeout{2000};
constexpr Milliseconds kSettle{300};  // Note [Who failed first]
constexpr size_t kBlameLines = 20;    // of a failed rank's output, read for the ranks it blames

using Outcome = AttemptResult::Outcome;

class LocalAttempt {
 public:
  LocalAttempt(const LaunchOptions& options, RankPlacement placement, NodeRendezvous& rendezvous)
      : options_(options),
        placement_(std::move(placement)),
        rendezvous_(rendezvous),
        relay_(options.prefix_output,
               std::max(static_cast<size_t>(options.tail_lines), kBlameLines)) {}

  AttemptResult run() {
    start_ranks();
    while (any_running()) {
      relay_.pump(kPumpInterval);
      collect_failures();
      watch_stop_signal();
      watch_other_nodes();
      end_ranks_left_stopped();
      if (kill_at_ && kill_at_->expired()) signal_all(SIGKILL);
    }
    relay_.drain(Deadline::after(kDrainTimeout));
    for (RankFailure& f : result_.failures) {
      f.last_lines = relay_.tail(f.rank, static_cast<size_t>(options_.tail_lines));
    }
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
      const std::string label = std::to_string(rank->rank());
      relay_.add(rank->rank(), label, rank->take_stdout(), stdout);
      relay_.add(rank->rank(), label, rank->take_stderr(), stderr);
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
  // orders what it found, likely cause first:
  //  1. a rank stopped by a signal (SIGSTOP, SIGTSTP): it still runs, so it never fails by
  //     itself, but the others time out waiting for it;
  //  2. a rank killed by a signal from outside (SIGKILL, SIGSEGV, ...);
  //  3. a rank that the failed ranks' errors name (blame.h): the one a PeerError says died, the
  //     ones a TimeoutError says never joined; also when it still runs (hung elsewhere);
  //  4. a rank that aborted (SIGABRT: an uncaught exception);
  //  5. ranks that exited non-zero.
  void collect_failures() {
    std::vector<RankProcess*> failed = reap_failed();
    let_expendable_go(failed);
    if (failed.empty()) return;
    if (!stopping()) {
      const Deadline settle = Deadline::after(kSettle);
      while (!settle.expired() && any_running()) {
        relay_.pump(Milliseconds(10));
        const std::vector<RankProcess*> more = reap_failed();
        failed.insert(failed.end(), more.begin(), more.end());
      }
      add_culprits_still_running(failed);
    }
    const std::vector<int> blamed = blamed_by(failed);
    std::stable_sort(failed.begin(), failed.end(), [&](RankProcess* a, RankProcess* b) {
      return likely_cause(*a, blamed) < likely_cause(*b, blamed);
    });
    for (RankProcess* rank : failed) result_.failures.push_back(failure_of(*rank, blamed));
    stop(Outcome::kRanksFailed, SIGTERM);
  }

  // --expendable: a failed rank the job can do without is reported and left out; the others
  // go on.
  void let_expendable_go(std::vector<RankProcess*>& failed) {
    if (stopping()) return;
    for (auto it = failed.begin(); it != failed.end();) {
      RankProcess& rank = **it;
      if (!options_.is_expendable(rank.rank())) {
        ++it;
        continue;
      }
      reported_.push_back(rank.rank());
      std::fprintf(stderr,
                   "cohortrun: rank %d %s (local rank %d, pid %d); it is --expendable: the "
                   "others go on without it\n",
                   rank.rank(), rank.describe().c_str(), rank.rank() - global_rank(options_, 0),
                   rank.pid());
      it = failed.erase(it);
    }
  }

  // A rank stopped by a signal never fails by itself, and once every other rank has ended
  // nothing in the job waits for it, so nothing would end the attempt (issue 35: a stopped
  // --expendable worker kept cohortrun waiting after the servers and the other workers were
  // done). After --stopped-timeout such ranks are killed: an --expendable one is reported and
  // the job goes on to succeed; any other is the attempt's failure.
  void end_ranks_left_stopped() {
    if (stopping()) return;
    std::vector<RankProcess*> left;
    bool any_ended = false;
    for (auto& rank : ranks_) {
      if (!rank->running() || was_reported(rank->rank())) {  // ended, or being killed
        any_ended = true;
      } else if (rank->stop_signal() != 0) {
        left.push_back(rank.get());
      } else {
        left_stopped_until_.reset();
        return;  // a rank still works: it may yet need them (or continue them)
      }
    }
    if (!any_ended || left.empty()) return;
    if (!left_stopped_until_) left_stopped_until_ = Deadline::after(options_.stopped_timeout());
    if (!left_stopped_until_->expired()) return;
    bool failed = false;
    for (RankProcess* rank : left) {
      char what[160];
      std::snprintf(what, sizeof what,
                    "stayed stopped by signal %d (%s) for %g s after every other rank ended "
                    "(--stopped-timeout)",
                    rank->stop_signal(), strsignal(rank->stop_signal()),
                    options_.stopped_timeout_s);
      if (options_.is_expendable(rank->rank())) {
        std::fprintf(stderr, "cohortrun: rank %d %s; it is --expendable: killed it\n", rank->rank(),
                     what);
        reported_.push_back(rank->rank());
        rank->signal(SIGKILL);
        continue;
      }
      RankFailure failure = failure_of(*rank, {});
      failure.what = what;
      result_.failures.push_back(std::move(failure));
      failed = true;
    }
    if (failed) stop(Outcome::kRanksFailed, SIGKILL);
  }

  std::vector<RankProcess*> reap_failed() {
    std::vector<RankProcess*> failed;
    for (auto& rank : ranks_) {
      if (rank->running() && rank->reap() && rank->failed() && !was_stopped(rank->rank()) &&
          !was_reported(rank->rank())) {
        failed.push_back(rank.get());
      }
    }
    return failed;
  }

  // Ranks that still run but caused the failure (1 and 3 of Note [Who failed first]): they
  // are reported with the failed ones rather than as merely stopped.
  void add_culprits_still_running(std::vector<RankProcess*>& failed) {
    const std::vector<int> blamed = blamed_by(failed);
    for (auto& rank : ranks_) {
      if (!rank->running()) continue;
      const bool named = std::find(blamed.begin(), blamed.end(), rank->rank()) != blamed.end();
      if (rank->stop_signal() != 0 || named) failed.push_back(rank.get());
    }
  }

  // The ranks that the errors of the failed ones name, from their last lines of output.
  std::vector<int> blamed_by(const std::vector<RankProcess*>& failed) {
    std::vector<int> blamed;
    const Deadline drained = Deadline::after(kDrainTimeout);
    for (RankProcess* rank : failed) {
      if (rank->running()) continue;
      relay_.finish(rank->rank(), drained);  // its last words
      const std::vector<std::string> lines = relay_.tail(rank->rank(), kBlameLines);
      for (int r : ranks_blamed_by(lines, rank->rank(), options_.world_size())) {
        if (std::find(blamed.begin(), blamed.end(), r) == blamed.end()) blamed.push_back(r);
      }
    }
    return blamed;
  }

  // Smaller is more likely the cause (Note [Who failed first]).
  static int likely_cause(const RankProcess& rank, const std::vector<int>& blamed) {
    if (rank.stop_signal() != 0) return 0;
    if (!rank.running() && rank.killed_by_signal() && rank.exit_code() != 128 + SIGABRT) return 1;
    if (std::find(blamed.begin(), blamed.end(), rank.rank()) != blamed.end()) return 2;
    if (!rank.running() && rank.killed_by_signal()) return 3;
    return 4;
  }

  RankFailure failure_of(const RankProcess& rank, const std::vector<int>& blamed) {
    reported_.push_back(rank.rank());
    RankFailure f;
    f.rank = rank.rank();
    f.local_rank = rank.rank() - global_rank(options_, 0);
    f.pid = rank.pid();
    const bool named = std::find(blamed.begin(), blamed.end(), rank.rank()) != blamed.end();
    if (rank.stop_signal() != 0) {
      f.exit_code = 128 + rank.stop_signal();
      f.what = "was stopped by signal " + std::to_string(rank.stop_signal()) + " (" +
               strsignal(rank.stop_signal()) + ") while the others waited for it";
    } else if (rank.running()) {
      f.exit_code = 0;  // none of its own: cohortrun exits with the next failure's code
      f.what = "did not take part: the errors of the other ranks name it (it was still running)";
    } else {
      f.exit_code = rank.exit_code();
      f.exited = !rank.killed_by_signal();
      f.what = rank.describe();
      if (named) f.what += " (the errors of the other ranks name it)";
    }
    return f;
  }

  bool was_reported(int rank) const {
    return std::find(reported_.begin(), reported_.end(), rank) != reported_.end();
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
      if (rank->running() && !was_stopped(rank->rank()) && !was_reported(rank->rank())) {
        result_.stopped.push_back(rank->rank());
      }
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
  std::vector<int> reported_;  // ranks in result_.failures
  std::optional<Deadline> kill_at_;
  std::optional<Deadline> left_stopped_until_;  // end_ranks_left_stopped
  Deadline remote_check_ = Deadline::after(Milliseconds(0));
};

}  // namespace

std::string name_of(const RankFailure& failure) {
  return (failure.slot_restart ? "slot " : "rank ") + std::to_string(failure.rank);
}

AttemptResult run_local_attempt(const LaunchOptions& options, const RankPlacement& placement,
                                NodeRendezvous& rendezvous) {
  // Runs after the attempt's ranks are reaped, however it ended (also when a rank could not be
  // started and the others were killed).
  struct Cleanup {
    const std::string& token;
    ~Cleanup() { remove_shm_leftovers_and_say(token); }
  } cleanup{placement.token};
  return LocalAttempt(options, placement, rendezvous).run();
}

}  // namespace cohort::run
