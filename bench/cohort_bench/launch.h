// Starting the ranks of a TCP run as local processes: cohort-bench runs cohortrun (the launcher
// users start their own programs with, docs/launch.md) on its own executable and arguments, so
// benchmarks start ranks the one way the project has. cohortrun hosts the store on a free port,
// gives each rank the launcher environment (ranks.h), prefixes nothing (rank 0 prints the table
// on the shared stdout), stops the other ranks when one fails and kills what is left behind.
#pragma once

#include "bench_config.h"

namespace cohort::bench {

// Environment variable naming the cohortrun to use; default: the cohortrun next to this
// executable (both are built into bin/ and installed together), else the one on PATH.
inline constexpr const char* kEnvCohortrun = "COHORTRUN";

// Returns the exit code of the whole run: 0, kExitWrong or kExitFailure as a rank's, and
// kExitFailure for anything else (a rank killed by a signal, cohortrun not found).
// `argv` is main()'s, null-terminated; the ranks get the same arguments.
int launch_local_ranks(const BenchConfig& config, char** argv);

}  // namespace cohort::bench
