#include "ranks.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include "calibrate.h"
#include "cohort/comm/group.h"
#include "cohort/comm/inproc_transport.h"
#include "cohort/comm/mpi.h"
#include "cohort/comm/prefix_store.h"
#include "cohort/comm/tcp_store.h"
#include "cohort/core/env.h"
#include "cohort/core/error.h"
#include "measure.h"
#include "watchdog.h"

namespace cohort::bench {

namespace {

// Time for a rank to report its own error after a collective's deadline passed.
constexpr Milliseconds kReportSlack{15'000};

struct RankOutcome {
  uint64_t wrong = 0;
  std::string error;  // empty: the rank finished
};

int exit_code(const RankOutcome& outcome) {
  if (!outcome.error.empty()) return kExitFailure;
  return outcome.wrong > 0 ? kExitWrong : kExitOk;
}

GroupOptions group_options(const BenchConfig& config) {
  GroupOptions options;
  options.timeout = collective_timeout(config);
  return options;
}

// Breaks the group on every rank, so that the others stop at once instead of waiting for
// their deadline, and returns the message for this rank's report.
std::string fail(Group* group, int rank, const std::string& what) {
  if (group) group->abort("cohort-bench rank " + std::to_string(rank) + " failed: " + what);
  return what;
}

// Runs the benchmark on a group made by `make_group`, catching every error.
template <typename MakeGroup>
RankOutcome run_rank(int rank, const BenchConfig& config, Reporter* reporter,
                     Watchdog::Slot& progress, MakeGroup make_group) {
  RankOutcome outcome;
  std::shared_ptr<Group> group;
  try {
    progress.enter("joining the group", 0);
    group = make_group();
    if (config.calibrate) {
      run_calibration(*group, config, reporter != nullptr, progress);
    } else {
      outcome.wrong = run_benchmark(*group, config, reporter, progress);
    }
    progress.enter("finishing", 0);
    group->barrier();  // nobody tears down its end while another still talks to it
  } catch (const std::exception& e) {
    outcome.error = fail(group.get(), rank, e.what());
  } catch (...) {
    outcome.error = fail(group.get(), rank, "unknown exception");
  }
  return outcome;
}

void print_error(int rank, const std::string& error) {
  std::fprintf(stderr, "cohort-bench: rank %d: error: %s\n", rank, error.c_str());
  std::fflush(stderr);
}

std::shared_ptr<TcpStore> connect_store(const BenchConfig& config, const LaunchEnv& env) {
  TcpStoreOptions options;
  options.host = env.master_addr;
  options.port = env.master_port;
  options.is_server = env.rank == 0 && !env.store_hosted;
  options.timeout = collective_timeout(config);
  return std::make_shared<TcpStore>(options);
}

// Rank 0 hosts the store under a plain launcher: it must outlive every other rank's last use
// of it, so each rank checks out and rank 0 waits for all of them (or the deadline).
void leave_store(Store& store, const LaunchEnv& env, const BenchConfig& config) {
  if (env.store_hosted) return;
  const std::string prefix = "cohort-bench/left/";
  store.set(prefix + std::to_string(env.rank), std::string("1"));
  if (env.rank != 0) return;
  std::vector<std::string> keys;
  for (int r = 0; r < env.world_size; ++r) keys.push_back(prefix + std::to_string(r));
  store.wait(keys, collective_timeout(config));
}

}  // namespace

Milliseconds watchdog_window(const BenchConfig& config) {
  return collective_timeout(config) + kReportSlack;
}

std::optional<LaunchEnv> launch_env() {
  const auto rank = env_int(kEnvRank);
  if (!rank) return std::nullopt;
  const auto world = env_int(kEnvWorldSize);
  const auto port = env_int(kEnvMasterPort);
  if (!world || !port) {
    throw ConfigError("RANK is set, so cohort-bench runs as one rank of a launched job, but " +
                      std::string(!world ? "WORLD_SIZE" : "MASTER_PORT") +
                      " is not set (unset RANK to let cohort-bench start its own ranks)");
  }
  if (*world < 1 || *rank < 0 || *rank >= *world) {
    throw ConfigError("RANK=" + std::to_string(*rank) +
                      " is outside [0, WORLD_SIZE=" + std::to_string(*world) + ")");
  }
  if (*port < 1 || *port > 65535) {
    throw ConfigError("MASTER_PORT=" + std::to_string(*port) + " is not a TCP port");
  }
  LaunchEnv env;
  env.rank = static_cast<int>(*rank);
  env.world_size = static_cast<int>(*world);
  env.master_port = static_cast<uint16_t>(*port);
  env.master_addr = env_string(kEnvMasterAddr).value_or("127.0.0.1");
  env.store_hosted = env_string(kEnvStoreHosted).value_or("") == "1";
  env.store_prefix = env_string(kEnvStorePrefix).value_or("");
  return env;
}

int run_inproc(const BenchConfig& config) {
  auto fabric = std::make_shared<InprocFabric>(config.ranks);
  Watchdog watchdog(config.ranks, 0, watchdog_window(config));
  Reporter reporter(config, stdout);
  std::vector<RankOutcome> outcomes(static_cast<size_t>(config.ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < config.ranks; ++r) {
    threads.emplace_back([&, r] {
      outcomes[r] = run_rank(r, config, r == 0 ? &reporter : nullptr, watchdog.slot(r), [&] {
        return Group::create_inproc(fabric, r, group_options(config));
      });
    });
  }
  for (auto& t : threads) t.join();
  int code = kExitOk;
  std::string first_error;
  for (int r = 0; r < config.ranks; ++r) {
    if (!outcomes[r].error.empty()) print_error(r, outcomes[r].error);
    if (first_error.empty()) first_error = outcomes[r].error;
    code = std::max(code, exit_code(outcomes[r]));
  }
  if (!reporter.write_json(first_error)) code = kExitFailure;
  return code;
}

int run_launched_rank(const BenchConfig& config, const LaunchEnv& env) {
  Watchdog watchdog(1, env.rank, watchdog_window(config));
  std::unique_ptr<Reporter> reporter;
  if (env.rank == 0) reporter = std::make_unique<Reporter>(config, stdout);
  std::shared_ptr<TcpStore> store;
  RankOutcome outcome = run_rank(env.rank, config, reporter.get(), watchdog.slot(0), [&] {
    watchdog.slot(0).enter("connecting to the store", 0);
    store = connect_store(config, env);
    watchdog.slot(0).enter("connecting to the other ranks", 0);
    std::shared_ptr<Store> group_store = store;
    if (!env.store_prefix.empty()) {
      group_store = std::make_shared<PrefixStore>(env.store_prefix, store);
    }
    return Group::create(group_store, env.rank, env.world_size, group_options(config));
  });
  if (outcome.error.empty()) {
    try {
      watchdog.slot(0).enter("leaving the store", 0);
      leave_store(*store, env, config);
    } catch (const std::exception& e) {
      outcome.error = std::string("while leaving the store: ") + e.what();
    }
  }
  if (!outcome.error.empty()) print_error(env.rank, outcome.error);
  int code = exit_code(outcome);
  if (reporter && !reporter->write_json(outcome.error)) code = kExitFailure;
  return code;
}

int run_mpi_rank(BenchConfig config) {
  std::shared_ptr<Group> group = create_mpi_group(group_options(config));
  config.ranks = group->size();
  Watchdog watchdog(1, group->rank(), watchdog_window(config));
  std::unique_ptr<Reporter> reporter;
  if (group->rank() == 0) reporter = std::make_unique<Reporter>(config, stdout);
  const RankOutcome outcome =
      run_rank(group->rank(), config, reporter.get(), watchdog.slot(0), [&] { return group; });
  if (!outcome.error.empty()) print_error(group->rank(), outcome.error);
  int code = exit_code(outcome);
  if (reporter && !reporter->write_json(outcome.error)) code = kExitFailure;
  return code;
}

}  // namespace cohort::bench
