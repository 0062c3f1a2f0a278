// cohortrun: starts the ranks of a cohort job on this machine, relays their output, stops them
// all when one fails, and restarts the job from its checkpoints when asked (docs/launch.md);
// in elastic mode (--min-ranks) it restarts a failed rank alone, and the others go on.
//
//   cohortrun --nproc-per-node 4 ./train --epochs 3
//   cohortrun --nproc-per-node 4 --min-ranks 2 --max-restarts 3 ./train --elastic
//   cohortrun --nnodes 2 --node-rank 0 --master-addr node1 --nproc-per-node 4 ./train
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cohort/core/error.h"
#include "job.h"
#include "launch_options.h"
#include "node_rendezvous.h"
#include "stop_signals.h"

int main(int argc, char** argv) {
  using namespace cohort::run;
  CLI::App app("cohortrun: starts and watches the ranks of a cohort job on this machine");
  LaunchOptions options;
  add_launch_options(app, options);
  try {
    app.parse(argc, argv);
    finish_launch_options(app, options);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  } catch (const cohort::ConfigError& e) {
    std::fprintf(stderr, "cohortrun: %s\n", e.what());
    return kExitUsage;
  }
  catch_stop_signals();
  try {
    return run_job(options);
  } catch (const Interrupted& e) {
    std::fprintf(stderr, "cohortrun: %s\n", e.what());
    return 128 + e.signal();
  } catch (const cohort::ConfigError& e) {
    std::fprintf(stderr, "cohortrun: %s\n", e.what());
    return kExitUsage;
  } catch (const cohort::Error& e) {
    std::fprintf(stderr, "cohortrun: %s\n", e.what());
    return kExitLaunchFailed;
  }
}
