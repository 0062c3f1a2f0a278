#include "job.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "cohort/comm/launch_env.h"
#include "cohort/core/env.h"
#include "cohort/core/error.h"
#include "elastic_nodes.h"
#include "elastic_slots.h"
#include "local_attempt.h"
#include "node_rendezvous.h"
#include "rank_environment.h"
#include "stop_signals.h"

namespace cohort::run {

namespace {

using Outcome = AttemptResult::Outcome;

// How long node 0 waits, beyond --stop-timeout, for the other nodes to see a final failure.
constexpr Milliseconds kLeaveMargin{5000};

void say(const std::string& line) {
  std::fprintf(stderr, "cohortrun: %s\n", line.c_str());
}

// Every node of a job must present the same secret to the store and to each other's ranks, so
// several nodes cannot each make one up: the user gives it.
std::string job_token(const LaunchOptions& options) {
  if (auto token = env_string("COHORT_JOB_TOKEN")) return *token;
  if (!options.multi_node()) return random_job_token();
  throw ConfigError("--nnodes " + std::to_string(options.nnodes) +
                    " needs the same secret on every node: set COHORT_JOB_TOKEN on each, e.g. "
                    "export COHORT_JOB_TOKEN=$(openssl rand -hex 16) where you start the job");
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

std::string headline(const RankFailure& f) {
  return name_of(f) + " " + f.what;
}

void print_failure(const LaunchOptions& options, const RankFailure& f) {
  const std::string restart =
      f.slot_restart ? ", restart " + std::to_string(*f.slot_restart) : std::string();
  say(headline(f) + " (local rank " + std::to_string(f.local_rank) + " on node " +
      std::to_string(options.node_rank) + ", pid " + std::to_string(f.pid) + restart + ")");
  if (f.last_lines.empty()) return;
  say("last lines of " + name_of(f) + ":");
  for (const std::string& line : f.last_lines) std::fprintf(stderr, "    %s\n", line.c_str());
}

// What went wrong, in a line for the other nodes and for the end of the summary.
std::string cause_of(const LaunchOptions& options, const AttemptResult& r) {
  switch (r.outcome) {
    case Outcome::kRanksFailed: return headline(r.failures.front());
    case Outcome::kOtherNodeFailed: return r.cause;
    case Outcome::kStoreLost: return "lost " + options.store_name() + ": " + r.cause;
    case Outcome::kInterrupted: return "cohortrun was interrupted by " + signal_name(r.stop_signal);
    case Outcome::kSucceeded: break;
  }
  return "succeeded";
}

int exit_code_of(const AttemptResult& r) {
  if (r.outcome == Outcome::kInterrupted) return 128 + r.stop_signal;
  if (r.outcome != Outcome::kRanksFailed) return kExitLaunchFailed;
  // A culprit that still ran when it was found has no exit code of its own (local_attempt.h).
  for (const RankFailure& f : r.failures) {
    if (f.exit_code != 0) return f.exit_code;
  }
  return kExitLaunchFailed;
}

void print_summary(const LaunchOptions& options, const AttemptResult& r) {
  for (const RankFailure& f : r.failures) print_failure(options, f);
  if (r.outcome == Outcome::kOtherNodeFailed) say("another node failed: " + r.cause);
  if (r.outcome == Outcome::kStoreLost) say(cause_of(options, r));
  if (!r.stopped.empty()) say("stopped rank(s) " + rank_list(r.stopped));
}

int slots_succeeded(const ElasticResult& r) {
  return static_cast<int>(std::count_if(r.slots.begin(), r.slots.end(),
                                        [](const SlotOutcome& s) { return s.succeeded; }));
}

// Elastic mode: the job succeeds when at least --min-ranks slots did and every other was given
// up (which every slot not succeeded is, once all have ended). On several nodes `job_succeeded`
// counts the ranks of every node that succeeded (nothing: unknown, node 0's store was lost).
int elastic_exit_code(const LaunchOptions& options, const ElasticResult& r,
                      std::optional<int> job_succeeded) {
  if (r.stop_signal != 0) return 128 + r.stop_signal;
  if (!r.store_lost.empty()) return kExitLaunchFailed;
  if (!r.first_failure) return kExitOk;
  if (job_succeeded && *job_succeeded >= options.min_ranks) return kExitOk;
  return r.first_failure->exit_code != 0 ? r.first_failure->exit_code : kExitLaunchFailed;
}

// Why an elastic job that ran to its end failed: it was left with fewer than --min-ranks
// members. On one node, the moment it was: the slot whose giving up left too few (whatever
// failed first, the job could go on until then). On several nodes this node sees only its own
// slots, and says how many ranks of the job succeeded.
std::string too_few_members(const LaunchOptions& options, const ElasticResult& r,
                            std::optional<int> job_succeeded) {
  const std::string min_ranks = "fewer than --min-ranks " + std::to_string(options.min_ranks);
  if (options.multi_node()) {
    return "too few members left: " +
           (job_succeeded ? std::to_string(*job_succeeded) : std::string("an unknown number of")) +
           " ranks of the job succeeded, " + min_ranks;
  }
  const int slots = static_cast<int>(r.slots.size());
  const size_t fell_short = static_cast<size_t>(slots - options.min_ranks);
  if (fell_short >= r.given_up.size()) return "too few members left, " + min_ranks;  // not seen
  const RankFailure& last = r.given_up[fell_short];
  const std::string how = last.what.rfind("was ", 0) == 0 ? last.what.substr(4) : last.what;
  return "too few members left: " + name_of(last) + " was given up (" + how + "), which left " +
         std::to_string(options.min_ranks - 1) + " of " + std::to_string(slots) + " slots, " +
         min_ranks;
}

// Each slot's failures, then how the job ended: the counts, and the cause on the last line.
void print_elastic_summary(const LaunchOptions& options, const ElasticResult& r, int code,
                           std::optional<int> job_succeeded) {
  for (const SlotOutcome& slot : r.slots) {
    for (const RankFailure& f : slot.failures) print_failure(options, f);
  }
  if (r.stop_signal != 0 || !r.store_lost.empty()) {
    if (!r.stopped.empty()) say("stopped slot(s) " + rank_list(r.stopped));
    say("job failed: " + (r.stop_signal != 0
                              ? "cohortrun was interrupted by " + signal_name(r.stop_signal)
                              : "lost " + options.store_name() + ": " + r.store_lost));
    return;
  }
  std::vector<int> given_up;
  for (const SlotOutcome& slot : r.slots) {
    if (!slot.succeeded) given_up.push_back(slot.rank);
  }
  if (given_up.empty()) return;
  std::string counts;
  if (!options.multi_node()) {
    counts = std::to_string(slots_succeeded(r)) + " of " + std::to_string(r.slots.size()) +
             " ranks succeeded (--min-ranks " + std::to_string(options.min_ranks) +
             "); given up: slot(s) " + rank_list(given_up);
  } else {
    counts =
        (job_succeeded ? std::to_string(*job_succeeded) : std::string("an unknown number of")) +
        " ranks of the job succeeded (--min-ranks " + std::to_string(options.min_ranks) + "), " +
        std::to_string(slots_succeeded(r)) + " of this node's " + std::to_string(r.slots.size()) +
        "; given up on this node: slot(s) " + rank_list(given_up);
  }
  if (code == kExitOk) {
    say("job succeeded: " + counts);
    return;
  }
  say(counts + "; the first failure: " + headline(*r.first_failure));
  say("job failed: " + too_few_members(options, r, job_succeeded));
}

// The job's identity, kept through restarts (docs/checkpoints.md, "Restarts"): the user's
// COHORT_JOB_ID (a scheduler's job id, so that a requeued job resumes its checkpoints), else
// a fresh one. Node 0's is every node's.
std::string job_id(NodeRendezvous& rendezvous) {
  return rendezvous.agree_on_job_id(env_string("COHORT_JOB_ID"), random_job_token());
}

// On etcd the job's id names its keys, so the nodes need it before they meet: each is given
// it (COHORT_JOB_ID), or a job of one node makes one up. Empty on the TCP store.
std::string etcd_job_id(const LaunchOptions& options) {
  if (!options.on_etcd()) return {};
  if (auto id = env_string("COHORT_JOB_ID")) return *id;
  if (!options.multi_node()) return random_job_token();
  throw ConfigError(
      "--rdzv-backend etcd with several nodes needs the job's id on every node, "
      "since the job's keys in etcd are under /cohort/<job id>/: set "
      "COHORT_JOB_ID to the same value on each (a scheduler's job id, e.g. "
      "export COHORT_JOB_ID=$SLURM_JOB_ID)");
}

class Job {
 public:
  explicit Job(const LaunchOptions& options)
      : options_(options),
        token_(job_token(options)),
        rendezvous_(connect(options, token_, etcd_job_id(options))),
        job_id_(job_id(*rendezvous_)) {}

  int run() {
    if (options_.elastic()) return run_elastic();
    for (int attempt = 0;; ++attempt) {
      rendezvous_->join(attempt);
      AttemptResult result = run_local_attempt(options_, placement(attempt), *rendezvous_);
      if (result.outcome == Outcome::kSucceeded) result = wait_for_other_nodes(attempt);
      if (result.outcome == Outcome::kSucceeded) return kExitOk;
      report(attempt, result);
      if (!may_restart(attempt, result)) {
        if (attempt < options_.max_restarts && repeats_itself(result)) {
          say("not restarting: " + name_of(result.failures.front()) + " exited with code " +
              std::to_string(result.failures.front().exit_code) +
              ", a usage or configuration error, which a restart would repeat "
              "(--no-restart-exit-codes)");
        }
        say("job failed: " + cause_of(options_, result));
        leave_failed(attempt);
        return exit_code_of(result);
      }
      say("restarting every rank (restart " + std::to_string(attempt + 1) + " of " +
          std::to_string(options_.max_restarts) +
          ", COHORT_RESTART_COUNT=" + std::to_string(attempt + 1) + ")");
    }
  }

 private:
  // The ranks meet in the store node 0's cohortrun hosts, which outlives every one of them, or
  // in etcd, which outlives every node. On several nodes, each cohortrun runs its slots the same
  // way and watches the other nodes (Note [Elastic nodes] in elastic_nodes.h); no node's failure
  // stops another.
  int run_elastic() {
    if (!options_.multi_node()) {
      const ElasticResult result = run_elastic_slots(options_, placement(0));
      const int code = elastic_exit_code(options_, result, slots_succeeded(result));
      print_elastic_summary(options_, result, code, slots_succeeded(result));
      return code;
    }
    ElasticNodes nodes(options_, rendezvous_->store());
    if (options_.joins_running_job()) {
      rendezvous_->join_running_job();
      nodes.join_running_job();
    } else {
      rendezvous_->join(0);
    }
    ElasticResult result = run_elastic_slots(options_, placement(0), &nodes);
    const int succeeded = slots_succeeded(result);
    std::optional<int> job_succeeded;
    if (result.stop_signal == 0 && result.store_lost.empty()) {
      // A node with slots given up succeeds only when enough ranks of the job did.
      const bool all_here = succeeded == static_cast<int>(result.slots.size());
      job_succeeded = nodes.report_done(succeeded, !all_here);
    }
    // Lost after this node's slots had ended (they may have failed for it): the job's end is
    // unknown, and the job failed with node 0.
    if (result.stop_signal == 0 && result.store_lost.empty() && !nodes.store_lost().empty()) {
      result.store_lost = nodes.store_lost();
    }
    const int code = elastic_exit_code(options_, result, job_succeeded);
    print_elastic_summary(options_, result, code, job_succeeded);
    // Interrupted: the others find this node lost (node 0's store, on TCP, with it).
    if (result.stop_signal == 0 && result.store_lost.empty()) nodes.leave();
    return code;
  }

  // Connecting to node 0 may take up to --rdzv-timeout and cannot watch for signals itself.
  static std::unique_ptr<NodeRendezvous> connect(const LaunchOptions& options,
                                                 const std::string& token,
                                                 const std::string& etcd_job_id) {
    exit_on_stop_signal(true);
    auto rendezvous = std::make_unique<NodeRendezvous>(options, token, etcd_job_id);
    exit_on_stop_signal(false);
    return rendezvous;
  }

  RankPlacement placement(int attempt) const {
    RankPlacement p;
    p.attempt = attempt;
    p.store_port = rendezvous_->port();
    p.token = token_;
    p.job_id = job_id_;
    return p;
  }

  // Node 0 hosts the store, and a node whose ranks are done may still be needed for a
  // restart, so each waits until every node is done (or one failed) before exiting.
  AttemptResult wait_for_other_nodes(int attempt) {
    AttemptResult result;
    if (!options_.multi_node()) return result;
    rendezvous_->report_done(attempt);
    const NodeRendezvous::Others others = rendezvous_->wait_for_others(attempt);
    if (others.failure) {
      result.outcome = Outcome::kOtherNodeFailed;
      result.cause = *others.failure;
    } else if (!others.all_done) {
      say("warning: not every node reported its end within --rdzv-timeout; exiting anyway");
    }
    return result;
  }

  void report(int attempt, const AttemptResult& result) {
    print_summary(options_, result);
    if (!options_.multi_node() || result.outcome == Outcome::kOtherNodeFailed ||
        result.outcome == Outcome::kStoreLost) {
      return;
    }
    try {
      rendezvous_->report_failure(attempt, cause_of(options_, result));
    } catch (const Error& e) {
      say(std::string("could not tell the other nodes: ") + e.what());
    }
  }

  // So that node 0's store stays up until every node has seen the failure.
  void leave_failed(int attempt) {
    if (!options_.multi_node()) return;
    try {
      rendezvous_->leave(attempt, Deadline::after(options_.stop_timeout() + kLeaveMargin));
    } catch (const Error&) {
      // Node 0 is gone already: nothing left to wait for.
    }
  }

  bool may_restart(int attempt, const AttemptResult& result) const {
    return attempt < options_.max_restarts && result.outcome != Outcome::kInterrupted &&
           result.outcome != Outcome::kStoreLost && !repeats_itself(result);
  }

  // The first rank to fail exited (not killed) with a code of --no-restart-exit-codes.
  bool repeats_itself(const AttemptResult& result) const {
    if (result.outcome != Outcome::kRanksFailed || result.failures.empty()) return false;
    const RankFailure& first = result.failures.front();
    return first.exited && options_.never_restarts(first.exit_code);
  }

  const LaunchOptions& options_;
  std::string token_;
  std::unique_ptr<NodeRendezvous> rendezvous_;
  std::string job_id_;
};

}  // namespace

int run_job(const LaunchOptions& options) {
  return Job(options).run();
}

}  // namespace cohort::run
