// The main() of the benchmarks a launcher starts (cohort-ddp-bench, cohort-zero-bench,
// cohort-staged-bench): parse the command line, read where this process sits in the job from
// the launcher's environment, check the options, run. Exit codes: 0; 1 when the run failed
// (this rank or a peer) or a result was wrong; 2 for bad arguments, each with a message on
// stderr.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <functional>

#include "cohort/comm/launch_env.h"
#include "cohort/core/error.h"

namespace launched_main {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// prepare: takes the launch environment into the program's options and checks them (throws
// cohort::Error for bad arguments); run: the benchmark, returning the exit code; rank: this
// process's rank, for the error message.
inline int run_main(int argc, char** argv, CLI::App& app,
                    const std::function<void(const cohort::LaunchEnv&)>& prepare,
                    const std::function<int()>& run, const std::function<int()>& rank) {
  const std::string name = app.get_name();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }
  try {
    prepare(cohort::read_launch_env());
  } catch (const cohort::Error& e) {
    std::fprintf(stderr, "%s: error: %s\nRun with --help for more information.\n", name.c_str(),
                 e.what());
    return kExitUsage;
  }
  try {
    return run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: rank %d: error: %s\n", name.c_str(), rank(), e.what());
    return kExitFailure;
  }
}

}  // namespace launched_main
