// The whole job as one node's cohortrun sees it: the rendezvous with the other nodes, the
// attempts (the first run and up to --max-restarts restarts), the failure summary and the
// exit code (docs/launch.md).
#pragma once

#include "launch_options.h"

namespace cohort::run {

// Exit codes of cohortrun besides a failed rank's own (docs/launch.md).
constexpr int kExitOk = 0;
constexpr int kExitLaunchFailed = 1;  // rendezvous, store or start-up failure
constexpr int kExitUsage = 2;         // bad command line or environment

// Runs the job; returns cohortrun's exit code: 0 when every rank of every node succeeded,
// the first failed rank's code (or 128 + signal) when the job failed, 128 + signal when
// cohortrun itself was interrupted. Throws Error for start-up failures.
int run_job(const LaunchOptions& options);

}  // namespace cohort::run
