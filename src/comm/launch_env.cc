#include "cohort/comm/launch_env.h"

#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <vector>

#include "cohort/core/env.h"
#include "cohort/core/error.h"

namespace cohort {

namespace {

constexpr int kDefaultPort = 29500;  // torchrun's default, for launchers that have no port

class Reader {
 public:
  explicit Reader(const EnvLookup& lookup) : lookup_(lookup) {}

  bool has(const std::string& name) const { return lookup_(name).has_value(); }
  std::optional<std::string> text(const std::string& name) const { return lookup_(name); }

  // An integer in [low, high]; `fallback` when unset, or a ConfigError when there is none.
  int integer(const std::string& name, int low, int high, std::optional<int> fallback) const {
    const auto value = lookup_(name);
    if (!value) {
      if (fallback) return *fallback;
      throw ConfigError(name + " is not set; the launcher's other variables need it");
    }
    char* end = nullptr;
    errno = 0;
    const long parsed = std::strtol(value->c_str(), &end, 10);
    if (errno != 0 || end == value->c_str() || *end != '\0' || parsed < low || parsed > high) {
      throw ConfigError(name + "='" + *value + "' is not an integer in [" + std::to_string(low) +
                        ", " + std::to_string(high) + "]");
    }
    return static_cast<int>(parsed);
  }

 private:
  const EnvLookup& lookup_;
};

constexpr int kMaxInt = std::numeric_limits<int>::max();

// MASTER_ADDR and MASTER_PORT, shared by every convention.
void read_master(const Reader& env, LaunchEnv& out, std::optional<int> default_port) {
  // With etcd (read_rendezvous_backend) no rank or launcher hosts a store.
  const bool etcd = env.text("COHORT_RDZV_BACKEND") == "etcd";
  const bool all_local = out.local_world_size == out.world_size || etcd;
  if (auto addr = env.text("MASTER_ADDR")) {
    out.master_addr = *addr;
  } else if (!all_local) {
    throw ConfigError("MASTER_ADDR is not set, and the " + std::to_string(out.world_size) +
                      " ranks run on several machines: set it to the host of rank 0");
  }
  if ((out.world_size > 1 && !etcd) || env.has("MASTER_PORT")) {
    out.master_port = static_cast<uint16_t>(env.integer("MASTER_PORT", 1, 65535, default_port));
  }
}

void check_consistent(const LaunchEnv& e, const std::string& rank_var,
                      const std::string& local_var) {
  if (e.rank >= e.world_size) {
    throw ConfigError(rank_var + "=" + std::to_string(e.rank) + " must be below the world size " +
                      std::to_string(e.world_size));
  }
  if (e.local_world_size > e.world_size || e.local_rank >= e.local_world_size) {
    throw ConfigError(local_var + "=" + std::to_string(e.local_rank) + " of " +
                      std::to_string(e.local_world_size) +
                      " ranks on this machine does not fit a world of " +
                      std::to_string(e.world_size));
  }
}

LaunchEnv from_torchrun(const Reader& env) {
  if (!env.has("RANK") || !env.has("WORLD_SIZE")) {
    throw ConfigError(std::string(env.has("RANK") ? "RANK" : "WORLD_SIZE") + " is set but " +
                      (env.has("RANK") ? "WORLD_SIZE" : "RANK") +
                      " is not: a launcher sets both (torchrun convention)");
  }
  LaunchEnv e;
  e.launcher = "torchrun";
  e.world_size = env.integer("WORLD_SIZE", 1, kMaxInt, std::nullopt);
  e.rank = env.integer("RANK", 0, kMaxInt, std::nullopt);
  // One process per pod (Kubernetes operators) sets no local variables.
  e.local_world_size = env.integer("LOCAL_WORLD_SIZE", 1, kMaxInt, 1);
  e.local_rank = env.integer("LOCAL_RANK", 0, kMaxInt, 0);
  check_consistent(e, "RANK", "LOCAL_RANK");
  read_master(env, e, std::nullopt);
  // Under torchrun its agent already serves PyTorch's own store on MASTER_PORT: cohort's store
  // (a different protocol) goes on the next port.
  if (env.text("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True") {
    if (e.master_port == 65535)
      throw ConfigError(
          "MASTER_PORT=65535 leaves no port for cohort's store under torchrun (it uses MASTER_PORT "
          "+ 1)");
    e.master_port = static_cast<uint16_t>(e.master_port + 1);
  }
  return e;
}

LaunchEnv from_openmpi(const Reader& env) {
  LaunchEnv e;
  e.launcher = "openmpi";
  e.world_size = env.integer("OMPI_COMM_WORLD_SIZE", 1, kMaxInt, std::nullopt);
  e.rank = env.integer("OMPI_COMM_WORLD_RANK", 0, kMaxInt, std::nullopt);
  e.local_world_size = env.integer("OMPI_COMM_WORLD_LOCAL_SIZE", 1, kMaxInt, std::nullopt);
  e.local_rank = env.integer("OMPI_COMM_WORLD_LOCAL_RANK", 0, kMaxInt, std::nullopt);
  check_consistent(e, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK");
  read_master(env, e, kDefaultPort);
  return e;
}

// MPICH's and Intel MPI's Hydra launcher (mpiexec).
LaunchEnv from_hydra(const Reader& env) {
  LaunchEnv e;
  e.launcher = "mpich";
  e.world_size = env.integer("PMI_SIZE", 1, kMaxInt, std::nullopt);
  e.rank = env.integer("PMI_RANK", 0, kMaxInt, std::nullopt);
  e.local_world_size = env.integer("MPI_LOCALNRANKS", 1, kMaxInt, e.world_size);
  e.local_rank = env.integer("MPI_LOCALRANKID", 0, kMaxInt, e.rank);
  check_consistent(e, "PMI_RANK", "MPI_LOCALRANKID");
  read_master(env, e, kDefaultPort);
  return e;
}

// SLURM_TASKS_PER_NODE lists tasks per node in node order, runs compressed: "2(x3),1".
int slurm_tasks_on_node(const std::string& list, int node) {
  size_t at = 0;
  int index = 0;
  while (at < list.size()) {
    const size_t comma = list.find(',', at);
    const std::string item = list.substr(at, comma == std::string::npos ? comma : comma - at);
    const size_t paren = item.find("(x");
    const int tasks = std::atoi(item.substr(0, paren).c_str());
    const int repeat = paren == std::string::npos ? 1 : std::atoi(item.c_str() + paren + 2);
    if (tasks <= 0 || repeat <= 0) break;
    if (node < index + repeat) return tasks;
    index += repeat;
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  throw ConfigError("SLURM_TASKS_PER_NODE='" + list + "' does not give the tasks of node " +
                    std::to_string(node) + " (SLURM_NODEID)");
}

LaunchEnv from_slurm(const Reader& env) {
  LaunchEnv e;
  e.launcher = "slurm";
  e.world_size = env.integer("SLURM_NTASKS", 1, kMaxInt, std::nullopt);
  e.rank = env.integer("SLURM_PROCID", 0, kMaxInt, std::nullopt);
  e.local_rank = env.integer("SLURM_LOCALID", 0, kMaxInt, std::nullopt);
  const int node = env.integer("SLURM_NODEID", 0, kMaxInt, 0);
  const auto per_node = env.text("SLURM_TASKS_PER_NODE");
  e.local_world_size = per_node ? slurm_tasks_on_node(*per_node, node) : e.world_size;
  check_consistent(e, "SLURM_PROCID", "SLURM_LOCALID");
  if (auto addr = env.text("MASTER_ADDR")) {
    e.master_addr = *addr;
  } else if (auto nodes = env.text("SLURM_JOB_NODELIST") ? env.text("SLURM_JOB_NODELIST")
                                                         : env.text("SLURM_NODELIST")) {
    e.master_addr = first_slurm_host(*nodes);
  } else if (e.local_world_size != e.world_size && env.text("COHORT_RDZV_BACKEND") != "etcd") {
    throw ConfigError(
        "neither MASTER_ADDR nor SLURM_JOB_NODELIST is set, and the ranks run on "
        "several machines: set MASTER_ADDR to the host of rank 0");
  }
  e.master_port = static_cast<uint16_t>(env.integer("MASTER_PORT", 1, 65535, kDefaultPort));
  return e;
}

// COHORT_RDZV_BACKEND and what etcd needs with it.
void read_rendezvous_backend(const Reader& env, LaunchEnv& e) {
  e.rdzv_backend = env.text("COHORT_RDZV_BACKEND").value_or("tcp");
  if (e.rdzv_backend == "tcp") return;
  if (e.rdzv_backend != "etcd") {
    throw ConfigError("COHORT_RDZV_BACKEND='" + e.rdzv_backend + "': expected tcp or etcd");
  }
  e.rdzv_endpoints = env.text("COHORT_RDZV_ENDPOINTS").value_or("");
  e.job_id = env.text("COHORT_JOB_ID").value_or("");
  if (e.rdzv_endpoints.empty()) {
    throw ConfigError(
        "COHORT_RDZV_BACKEND=etcd needs COHORT_RDZV_ENDPOINTS, the cluster's client endpoints "
        "(host:port[,host:port...])");
  }
  if (e.job_id.empty()) {
    throw ConfigError(
        "COHORT_RDZV_BACKEND=etcd needs COHORT_JOB_ID: the job's keys live under "
        "/cohort/<job id>/, apart from other jobs' (cohortrun sets it)");
  }
}

}  // namespace

std::string first_slurm_host(const std::string& host_list) {
  // The first top-level item: commas inside brackets separate ranges, not hosts.
  int depth = 0;
  size_t end = 0;
  for (; end < host_list.size(); ++end) {
    if (host_list[end] == '[') ++depth;
    if (host_list[end] == ']') --depth;
    if (host_list[end] == ',' && depth == 0) break;
  }
  std::string item = host_list.substr(0, end);
  const size_t open = item.find('[');
  if (open == std::string::npos) return item;
  const size_t close = item.find(']', open);
  if (close == std::string::npos) {
    throw ConfigError("Slurm host list '" + host_list + "' has an unclosed '['");
  }
  const std::string ranges = item.substr(open + 1, close - open - 1);
  const size_t stop = ranges.find_first_of(",-");
  return item.substr(0, open) + ranges.substr(0, stop) + item.substr(close + 1);
}

LaunchEnv read_launch_env(const EnvLookup& lookup) {
  const Reader env(lookup);
  LaunchEnv e;
  if (env.has("RANK") || env.has("WORLD_SIZE")) {
    e = from_torchrun(env);
  } else if (env.has("OMPI_COMM_WORLD_RANK")) {
    e = from_openmpi(env);
  } else if (env.has("PMI_RANK") && env.has("PMI_SIZE")) {
    e = from_hydra(env);
  } else if (env.has("SLURM_PROCID") && env.has("SLURM_NTASKS")) {
    e = from_slurm(env);
  }
  e.store_hosted = env.text("COHORT_STORE_HOSTED").value_or("0") == "1";
  e.store_prefix = env.text("COHORT_STORE_PREFIX").value_or("");
  read_rendezvous_backend(env, e);
  return e;
}

std::string random_job_token() {
  std::random_device device;
  std::string token;
  for (int i = 0; i < 4; ++i) {
    char part[9];
    std::snprintf(part, sizeof part, "%08x", static_cast<unsigned>(device()));
    token += part;
  }
  return token;
}

LaunchEnv read_launch_env() {
  return read_launch_env([](const std::string& name) { return env_string(name.c_str()); });
}

}  // namespace cohort
