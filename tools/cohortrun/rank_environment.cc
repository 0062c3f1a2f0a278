#include "rank_environment.h"

#include <algorithm>

extern char** environ;

namespace cohort::run {

namespace {

// Inherited variables that would contradict ours: torchrun's agent-store switch would move
// the store port, and a stale prefix or restart count would mislead the program.
const char* const kDropped[] = {"TORCHELASTIC_USE_AGENT_STORE"};

std::string name_of(const std::string& entry) {
  return entry.substr(0, entry.find('='));
}

std::string var(const char* name, const std::string& value) {
  return std::string(name) + "=" + value;
}

// What cohort::init_elastic() reads (cohort/comm/elastic.h). RANK and WORLD_SIZE stay the
// launch slot's: the first generation's size and ordering hint; a restarted process (a
// COHORT_ELASTIC_RESTART above 0) joins the running job as a new member.
void add_elastic_variables(const LaunchOptions& o, const RankPlacement& p,
                           std::vector<std::string>& vars) {
  vars.push_back(var("COHORT_ELASTIC", "1"));
  vars.push_back(var("COHORT_ELASTIC_MIN_RANKS", std::to_string(o.min_ranks)));
  if (o.max_ranks > 0) vars.push_back(var("COHORT_ELASTIC_MAX_RANKS", std::to_string(o.max_ranks)));
  vars.push_back(var("COHORT_ELASTIC_RESTART", std::to_string(p.elastic_restart)));
}

std::vector<std::string> launcher_variables(const LaunchOptions& o, const RankPlacement& p) {
  std::vector<std::string> vars = {
      var("RANK", std::to_string(global_rank(o, p.local_rank))),
      var("WORLD_SIZE", std::to_string(o.launch_world_size())),
      var("LOCAL_RANK", std::to_string(p.local_rank)),
      var("LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node)),
      var("GROUP_RANK", std::to_string(o.node_rank)),  // torchrun's name for the node rank
      var("MASTER_ADDR", o.master_addr),
      // No rank serves the store: this cohortrun (node 0's) or etcd does.
      var("COHORT_STORE_HOSTED", "1"),
      // Each attempt's group keys apart from the last one's, in the same store.
      var("COHORT_STORE_PREFIX", "attempt" + std::to_string(p.attempt) + "/"),
      var("COHORT_RESTART_COUNT", std::to_string(p.attempt)),
      var("COHORT_JOB_TOKEN", p.token),
      // Not secret: checkpoints record it, so that a restart resumes only its own job's.
      var("COHORT_JOB_ID", p.job_id),
  };
  if (o.on_etcd()) {  // the ranks meet in etcd, where no cohortrun hosts a store
    vars.push_back(var("COHORT_RDZV_BACKEND", "etcd"));
    vars.push_back(var("COHORT_RDZV_ENDPOINTS", o.rdzv_endpoints));
  } else {
    vars.push_back(var("MASTER_PORT", std::to_string(p.store_port)));
  }
  if (o.elastic()) add_elastic_variables(o, p, vars);
  if (o.simulate_nodes > 1) {  // --simulate-nodes: blocks of this machine's ranks
    const int block = p.local_rank / (o.nproc_per_node / o.simulate_nodes);
    vars.push_back(var("COHORT_NODE_ID", "node" + std::to_string(o.node_rank) + ".simulated" +
                                             std::to_string(block)));
  }
  return vars;
}

}  // namespace

int global_rank(const LaunchOptions& options, int local_rank) {
  return options.node_rank * options.nproc_per_node + local_rank;
}

std::vector<std::string> rank_environment(const LaunchOptions& options,
                                          const RankPlacement& placement) {
  std::vector<std::string> env = launcher_variables(options, placement);
  std::vector<std::string> replaced;
  for (const std::string& entry : env) replaced.push_back(name_of(entry));
  replaced.insert(replaced.end(), std::begin(kDropped), std::end(kDropped));
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::find(replaced.begin(), replaced.end(), name_of(*e)) == replaced.end()) {
      env.emplace_back(*e);
    }
  }
  return env;
}

}  // namespace cohort::run
