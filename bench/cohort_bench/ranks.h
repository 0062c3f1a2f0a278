// How a rank comes to exist and join its group: as one thread of N over the in-process
// transport, or as a process over TCP that a launcher started (cohortrun, which cohort-bench
// runs itself for --ranks N, torchrun, ...). Both run the same measurement loop (measure.h) and return an exit code.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "bench_config.h"

namespace cohort::bench {

// The launcher environment (docs/bench.md), read when RANK is set.
inline constexpr const char* kEnvRank = "RANK";
inline constexpr const char* kEnvWorldSize = "WORLD_SIZE";
inline constexpr const char* kEnvMasterAddr = "MASTER_ADDR";
inline constexpr const char* kEnvMasterPort = "MASTER_PORT";
// The launcher already runs the store at MASTER_ADDR:MASTER_PORT, so rank 0 must not start
// one: set by cohortrun (the name cohort::init() reads, so one launcher serves both).
inline constexpr const char* kEnvStoreHosted = "COHORT_STORE_HOSTED";
// The job's keys live under this prefix of the store (cohortrun: one per attempt).
inline constexpr const char* kEnvStorePrefix = "COHORT_STORE_PREFIX";

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  std::string master_addr = "127.0.0.1";
  uint16_t master_port = 0;
  bool store_hosted = false;  // else rank 0 hosts the store at master_port
  std::string store_prefix;   // the group's keys go under it
};

// The launcher environment, or nullopt when RANK is unset (not started by a launcher).
// Throws ConfigError when it is incomplete or malformed.
std::optional<LaunchEnv> launch_env();

// `config.ranks` threads of this process over one InprocFabric.
int run_inproc(const BenchConfig& config);
// This process as rank env.rank of env.world_size over TCP.
int run_launched_rank(const BenchConfig& config, const LaunchEnv& env);
// This process as one rank of an mpirun job on the MPI backend (the job decides the size;
// COHORT_MPI_COLLECTIVES, or --algo engine, picks MPI's own collectives).
int run_mpi_rank(BenchConfig config);

// How long no rank may make progress before the watchdog ends the run: a collective's
// deadline plus time for its error to be reported.
Milliseconds watchdog_window(const BenchConfig& config);

}  // namespace cohort::bench
