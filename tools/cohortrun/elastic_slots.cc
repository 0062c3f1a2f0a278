#include "elastic_slots.h"

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>

#include "output_relay.h"
#include "rank_process.h"
#include "shm_leftovers.h"
#include "stop_signals.h"

namespace cohort::run {

namespace {

constexpr Milliseconds kPumpInterval{100};
constexpr Milliseconds kDrainTimeout{2000};

void say(const std::string& line) {
  std::fprintf(stderr, "cohortrun: %s\n", line.c_str());
}

// "killed by signal 9 (Killed)", "exited with code 1": how a process left, for "slot 3 left
// (...)".
std::string how_it_left(const RankProcess& process) {
  const std::string what = process.describe();
  return what.rfind("was ", 0) == 0 ? what.substr(4) : what;
}

class ElasticSlots {
 public:
  ElasticSlots(const LaunchOptions& options, RankPlacement placement, JobWatch* watch)
      : options_(options),
        placement_(std::move(placement)),
        watch_(watch),
        relay_(options.prefix_output, static_cast<size_t>(options.tail_lines)),
        processes_(static_cast<size_t>(options.nproc_per_node)),
        sources_(processes_.size(), 0),
        left_stopped_(static_cast<size_t>(options.nproc_per_node), false) {
    result_.slots.resize(processes_.size());
  }

  ElasticResult run() {
    for (size_t local = 0; local < processes_.size(); ++local) start(local);
    while (any_running()) {
      relay_.pump(kPumpInterval);
      watch_slots();
      watch_stop_signal();
      watch_job();
      end_slots_left_stopped();
      if (kill_at_ && kill_at_->expired()) signal_all(SIGKILL);
    }
    relay_.drain(Deadline::after(kDrainTimeout));
    return std::move(result_);
  }

 private:
  void start(size_t local) {
    std::fflush(stdout);  // nothing of ours may be pending when the rank starts writing
    std::fflush(stderr);
    RankPlacement placement = placement_;
    placement.local_rank = static_cast<int>(local);
    placement.elastic_restart = result_.slots[local].restarts;
    const int rank = global_rank(options_, placement.local_rank);
    result_.slots[local].rank = rank;
    processes_[local] = std::make_unique<RankProcess>(rank, options_.command,
                                                      rank_environment(options_, placement));
    // A source of its own: its predecessors' lines are not its last words.
    sources_[local] = next_source_++;
    const std::string label = "slot " + std::to_string(rank);
    relay_.add(sources_[local], label, processes_[local]->take_stdout(), stdout);
    relay_.add(sources_[local], label, processes_[local]->take_stderr(), stderr);
  }

  bool any_running() const {
    return std::any_of(processes_.begin(), processes_.end(),
                       [](const auto& p) { return p->running(); });
  }

  // Reaps the slots whose process ended: a success marks the job finishing, a failure
  // restarts the slot or gives it up.
  void watch_slots() {
    for (size_t local = 0; local < processes_.size(); ++local) {
      RankProcess& process = *processes_[local];
      if (!process.running() || !process.reap()) continue;
      if (!process.failed()) {
        result_.slots[local].succeeded = true;
        finishing_ = true;
      } else if (!stopping() && !left_stopped_[local]) {
        on_failure(local);
      }
    }
  }

  void on_failure(size_t local) {
    RankProcess& process = *processes_[local];
    SlotOutcome& slot = result_.slots[local];
    record(local, failure_of(local, process.describe()));
    const std::string left =
        "slot " + std::to_string(slot.rank) + " left (" + how_it_left(process) + ")";
    if (watch_ != nullptr) watch_->watch_now();
    if (watch_ != nullptr && !watch_->store_lost().empty()) {
      give_up(local, left + "; " + options_.store_name() + " is lost, so it is not restarted");
    } else if (finishing_) {
      give_up(local, left + "; the job is finishing (a rank has exited 0), so it is not restarted");
    } else if (watch_ != nullptr && watch_->job_finished()) {
      give_up(local,
              left + "; the job has finished (its members marked it done), so it is not restarted");
    } else if (!process.killed_by_signal() && options_.never_restarts(process.exit_code())) {
      give_up(local, left + "; exit code " + std::to_string(process.exit_code()) +
                         " is a usage or configuration error, which a restart would repeat, so "
                         "it is not restarted (--no-restart-exit-codes)");
    } else if (slot.restarts >= options_.max_restarts) {
      give_up(local, left + "; no restarts left, the job goes on without it");
    } else {
      ++slot.restarts;
      say(left + "; restarting it (restart " + std::to_string(slot.restarts) + " of " +
          std::to_string(options_.max_restarts) + ")");
      start(local);
    }
  }

  // The failure of slot `local`'s latest process, with its own last lines.
  RankFailure failure_of(size_t local, std::string what) {
    const RankProcess& process = *processes_[local];
    RankFailure f;
    f.rank = process.rank();
    f.local_rank = process.rank() - global_rank(options_, 0);
    f.pid = process.pid();
    f.exit_code = process.running() ? 128 + process.stop_signal() : process.exit_code();
    f.exited = !process.running() && !process.killed_by_signal();
    f.what = std::move(what);
    f.slot_restart = result_.slots[local].restarts;
    if (!process.running()) relay_.finish(sources_[local], Deadline::after(kDrainTimeout));
    f.last_lines = relay_.tail(sources_[local], static_cast<size_t>(options_.tail_lines));
    return f;
  }

  void record(size_t local, RankFailure failure) {
    if (!result_.first_failure) result_.first_failure = failure;
    result_.slots[local].failures.push_back(std::move(failure));
  }

  // After record(): the slot's latest failure is its last.
  void give_up(size_t local, const std::string& line) {
    say(line);
    result_.given_up.push_back(result_.slots[local].failures.back());
  }

  // As in the other mode (local_attempt.cc): a rank stopped by a signal never ends by itself,
  // so once every other slot's process has ended, nothing would end the job. After
  // --stopped-timeout such ranks are killed and their slots given up.
  void end_slots_left_stopped() {
    if (stopping()) return;
    std::vector<size_t> stopped;
    bool any_ended = false;
    for (size_t local = 0; local < processes_.size(); ++local) {
      const RankProcess& process = *processes_[local];
      if (!process.running() || left_stopped_[local]) {
        any_ended = true;
      } else if (process.stop_signal() != 0) {
        stopped.push_back(local);
      } else {
        left_stopped_until_.reset();
        return;  // a rank still works: it may yet continue them
      }
    }
    if (!any_ended || stopped.empty()) return;
    if (!left_stopped_until_) left_stopped_until_ = Deadline::after(options_.stopped_timeout());
    if (!left_stopped_until_->expired()) return;
    for (size_t local : stopped) give_up_stopped(local);
  }

  void give_up_stopped(size_t local) {
    RankProcess& process = *processes_[local];
    char what[160];
    std::snprintf(what, sizeof what,
                  "stayed stopped by signal %d (%s) for %g s after every other rank ended "
                  "(--stopped-timeout)",
                  process.stop_signal(), strsignal(process.stop_signal()),
                  options_.stopped_timeout_s);
    record(local, failure_of(local, what));
    give_up(local, "slot " + std::to_string(process.rank()) + " " + what + "; killed it");
    left_stopped_[local] = true;
    process.signal(SIGKILL);
  }

  void watch_stop_signal() {
    const int signal = received_stop_signal();
    if (signal == 0 || result_.stop_signal != 0) return;
    result_.stop_signal = signal;
    for (const auto& process : processes_) {
      if (process->running()) result_.stopped.push_back(process->rank());
    }
    signal_all(signal);  // forwards the user's signal itself
    kill_at_ = Deadline::after(options_.stop_timeout());
  }

  // Several nodes: the other nodes' news, and the job's store lost (node 0's, or etcd's quorum:
  // the ranks cannot go on without it; they are stopped as on a stop signal, and cohortrun
  // fails).
  void watch_job() {
    if (watch_ == nullptr || stopping()) return;
    watch_->watch();
    const std::string lost = watch_->store_lost();
    if (lost.empty()) return;
    result_.store_lost = lost;
    say("lost " + options_.store_name() + ": " + lost +
        "; stopping this node's ranks (it holds the job's store: nothing of the job goes on "
        "without it)");
    for (const auto& process : processes_) {
      if (process->running()) result_.stopped.push_back(process->rank());
    }
    signal_all(SIGTERM);
    kill_at_ = Deadline::after(options_.stop_timeout());
  }

  bool stopping() const { return kill_at_.has_value(); }

  void signal_all(int signal) {
    for (auto& process : processes_) process->signal(signal);
  }

  const LaunchOptions& options_;
  RankPlacement placement_;
  JobWatch* watch_;  // null on one node
  OutputRelay relay_;
  std::vector<std::unique_ptr<RankProcess>> processes_;  // each slot's latest, by local rank
  std::vector<int> sources_;  // the relay's name for each slot's latest process
  int next_source_ = 0;
  std::vector<bool> left_stopped_;  // killed by end_slots_left_stopped: reported already
  ElasticResult result_;
  bool finishing_ = false;  // a rank has exited 0: failed slots are no longer restarted
  std::optional<Deadline> kill_at_;
  std::optional<Deadline> left_stopped_until_;
};

}  // namespace

ElasticResult run_elastic_slots(const LaunchOptions& options, const RankPlacement& placement,
                                JobWatch* watch) {
  // Runs after the ranks are reaped, however it ended (also when a rank could not be started).
  struct Cleanup {
    const std::string& token;
    ~Cleanup() { remove_shm_leftovers_and_say(token); }
  } cleanup{placement.token};
  return ElasticSlots(options, placement, watch).run();
}

}  // namespace cohort::run
