// cohort-bench: measures one collective over a range of message sizes, nccl-tests style, and
// checks every result (docs/bench.md).
//
//   cohort-bench allreduce --ranks 4 --min-bytes 4K --max-bytes 64M
//
// Three ways to run: by default it starts --ranks processes of itself over TCP (launch.h);
// --transport inproc runs the ranks as threads of this process; and when RANK is set it is
// one rank of a job that a launcher started (ranks.h); --transport mpi is one rank of an mpirun
// job on the MPI backend.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <optional>
#include <string>

#include "bench_config.h"
#include "cohort/core/env.h"
#include "cohort/core/error.h"
#include "launch.h"
#include "ranks.h"
#include "report.h"

namespace {

using namespace cohort::bench;

// The command line as typed, options still as strings where cohort parses them.
struct Arguments {
  std::string collective;
  std::string transport = "tcp";
  std::string algo = "auto";
  std::string dtype = "float32";
  std::string op = "sum";
  std::string min_bytes = "4K";
  std::string max_bytes = "64M";
  std::string calibrate;
};

void add_options(CLI::App& app, Arguments& a, BenchConfig& c) {
  app.add_option("collective", a.collective,
                 "allreduce, broadcast, reduce, allgather, reduce_scatter, all_to_all "
                 "(alltoall), ring_shift or barrier");
  app.add_option("-N,--ranks", c.ranks, "number of ranks (under a launcher: WORLD_SIZE)")
      ->capture_default_str();
  app.add_option("-t,--transport", a.transport,
                 "tcp: one process per rank; inproc: threads; mpi: a rank under mpirun")
      ->capture_default_str();
  app.add_option("-a,--algo", a.algo, "auto, ring, tree, hd, direct, shm or hierarchical")
      ->capture_default_str();
  app.add_option("-d,--dtype", a.dtype,
                 "float32, float64, float16, bfloat16, int8, uint8, int32 or int64")
      ->capture_default_str();
  app.add_option("-o,--op", a.op, "sum, avg, min, max or product (reducing collectives)")
      ->capture_default_str();
  app.add_option("-b,--min-bytes", a.min_bytes, "smallest size, bytes (K, M, G suffixes)")
      ->capture_default_str();
  app.add_option("-e,--max-bytes", a.max_bytes, "largest size; sizes double from the smallest")
      ->capture_default_str();
  app.add_option("-n,--iters", c.iters, "timed collectives per trial")->capture_default_str();
  app.add_option("-w,--warmup", c.warmup, "untimed collectives before timing each size")
      ->capture_default_str();
  app.add_flag("--registered", c.registered,
               "buffers in registered memory (Group::allocate_registered): in place on shared "
               "memory");
  app.add_option("--trials", c.trials, "timed loops per size; the median is reported")
      ->capture_default_str();
  app.add_option("--timeout", c.timeout_s,
                 "deadline of each collective, seconds (default: COHORT_TIMEOUT_S, else 60)");
  app.add_option("--json", c.json_path, "also write the rows and parameters as JSON here");
  app.add_option("--calibrate", a.calibrate,
                 "instead of a collective, measure the cost model's parameters and write them "
                 "here (default: COHORT_COST_MODEL, else ~/.cache/cohort/cost_model.json)")
      ->expected(0, 1);
  app.footer("Exit codes: 0 ok, 1 wrong results, 2 bad arguments, 3 a rank failed or hung.\n"
             "See docs/bench.md.");
}

std::string join(int argc, char** argv) {
  std::string out;
  for (int i = 0; i < argc; ++i) out += (i ? " " : "") + std::string(argv[i]);
  return out;
}

// Turns the strings into the config; throws cohort::InvalidArgument / ConfigError.
void resolve(const Arguments& a, const CLI::App& app, BenchConfig& c) {
  c.transport = parse_transport(a.transport);
  c.calibrate = app.count("--calibrate") > 0;
  c.calibrate_path = a.calibrate;
  if (c.calibrate && c.transport != TransportKind::kTcp) {
    throw cohort::InvalidArgument("--calibrate measures processes over TCP and shared memory: "
                                  "use --transport tcp");
  }
  if (c.calibrate) return;
  if (a.collective.empty()) {
    throw cohort::InvalidArgument("name a collective (allreduce, broadcast, ...) or --calibrate");
  }
  c.collective = parse_collective(a.collective);
  c.algorithm = cohort::parse_algorithm(a.algo);
  c.dtype = cohort::parse_dtype(a.dtype);
  c.op = cohort::parse_reduce_op(a.op);
  c.min_bytes = parse_size(a.min_bytes);
  c.max_bytes = parse_size(a.max_bytes);
  if (app.count("--timeout") == 0) {
    c.timeout_s = cohort::env_double("COHORT_TIMEOUT_S").value_or(c.timeout_s);
  }
}

// Under a launcher the job decides the size and the transport.
void adopt_launch(const LaunchEnv& env, const CLI::App& app, BenchConfig& c) {
  if (app.count("--ranks") > 0 && c.ranks != env.world_size) {
    throw cohort::InvalidArgument("--ranks " + std::to_string(c.ranks) +
                                  " differs from WORLD_SIZE=" + std::to_string(env.world_size));
  }
  if (c.transport != TransportKind::kTcp) {
    throw cohort::InvalidArgument("--transport inproc cannot run under a launcher (RANK is set)");
  }
  c.ranks = env.world_size;
}

int run(const BenchConfig& config, const std::optional<LaunchEnv>& env, char** argv) {
  if (env) return run_launched_rank(config, *env);
  if (config.transport == TransportKind::kInproc) return run_inproc(config);
  if (config.transport == TransportKind::kMpi) return run_mpi_rank(config);
  return launch_local_ranks(config, argv);
}

}  // namespace

int main(int argc, char** argv) {
  BenchConfig config;
  Arguments arguments;
  CLI::App app{"cohort-bench: nccl-tests style benchmark of cohort collectives", "cohort-bench"};
  add_options(app, arguments, config);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }
  std::optional<LaunchEnv> env;
  try {
    resolve(arguments, app, config);
    env = launch_env();
    if (env) adopt_launch(*env, app, config);
    validate(config);
    config.command_line = join(argc, argv);
    if (!env || env->rank == 0) check_json_writable(config.json_path);
  } catch (const cohort::Error& e) {
    std::fprintf(stderr, "cohort-bench: error: %s\nRun with --help for more information.\n",
                 e.what());
    return kExitUsage;
  }
  try {
    return run(config, env, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cohort-bench: error: %s\n", e.what());
    return kExitFailure;
  }
}
