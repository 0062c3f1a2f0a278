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
#include <string>
#include <type_traits>
#include <utility>

#include "cohort/comm/launch_env.h"
#include "cohort/core/error.h"

namespace launched_main {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

template <typename Config, typename = void>
struct HasLocalRank : std::false_type {};
template <typename Config>
struct HasLocalRank<Config, std::void_t<decltype(std::declval<Config&>().local_rank)>>
    : std::true_type {};

// Where this process sits in the job: world, rank and, where the program has one, local_rank.
template <typename Config>
void take_place(Config& config, const cohort::LaunchEnv& env) {
  config.world = env.world_size;
  config.rank = env.rank;
  if constexpr (HasLocalRank<Config>::value) config.local_rank = env.local_rank;
}

// Runs body(); when it throws, bench.abort() breaks the benchmark's groups first, so that the
// peers stop now instead of at their deadline, and the error goes on to run_main.
template <typename Bench, typename Body>
void aborting_on_failure(Bench& bench, const std::string& program, int rank, Body&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    bench.abort(program + " rank " + std::to_string(rank) + " failed: " + e.what());
    throw;
  }
}

// check(config): the program's own checks of its options (throws cohort::Error for bad
// arguments); run(config): the benchmark, returning the exit code.
template <typename Config>
int run_main(int argc, char** argv, CLI::App& app, Config& config,
             const std::function<void(Config&)>& check,
             const std::function<int(const Config&)>& run) {
  const std::string name = app.get_name();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }
  try {
    take_place(config, cohort::read_launch_env());
    check(config);
  } catch (const cohort::Error& e) {
    std::fprintf(stderr, "%s: error: %s\nRun with --help for more information.\n", name.c_str(),
                 e.what());
    return kExitUsage;
  }
  try {
    return run(config);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: rank %d: error: %s\n", name.c_str(), config.rank, e.what());
    return kExitFailure;
  }
}

}  // namespace launched_main
