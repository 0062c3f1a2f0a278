#include "launch_options.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "cohort/comm/etcd_store.h"
#include "cohort/core/error.h"

namespace cohort::run {

namespace {

// The comma-separated integers of `text` (given as `flag`), each from `lowest` to `highest`;
// ConfigError naming the item otherwise, with `what` an item must be.
std::vector<int> int_list(const std::string& flag, const std::string& text, int lowest, int highest,
                          const std::string& what) {
  std::vector<int> values;
  std::istringstream items(text);
  for (std::string item; std::getline(items, item, ',');) {
    size_t used = 0;
    int value = lowest - 1;
    try {
      value = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || value < lowest || value > highest) {
      throw ConfigError(flag + " " + text + ": '" + item + "' is not " + what);
    }
    values.push_back(value);
  }
  return values;
}

Milliseconds seconds_to_ms(double seconds) {
  return Milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

bool is_executable_file(const std::string& path) {
  return ::access(path.c_str(), X_OK) == 0;
}

// The program as execve() needs it: a path as given when it has a '/', else the first match in
// PATH (what a shell would run).
std::string resolve_program(const std::string& program) {
  if (program.find('/') != std::string::npos) {
    if (is_executable_file(program)) return program;
    throw ConfigError("cannot run '" + program + "': no such executable file");
  }
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (is_executable_file(candidate)) return candidate;
  }
  throw ConfigError("cannot run '" + program + "': no such program in PATH (give its path, " +
                    "e.g. ./" + program + ")");
}

// --min-ranks and --max-ranks (docs/launch.md, "Elastic mode").
void check_elastic_options(const LaunchOptions& o) {
  if (o.max_ranks > 0 && !o.elastic()) {
    throw ConfigError("--max-ranks needs --min-ranks: it bounds an elastic job");
  }
  if (!o.elastic()) return;
  const std::string min = "--min-ranks " + std::to_string(o.min_ranks);
  if (!o.expendable_list.empty()) {
    throw ConfigError(
        "--expendable cannot be given with --min-ranks: elastic mode supersedes "
        "it (any rank may fail, and the job goes on while " +
        min + " remain)");
  }
  if (o.min_ranks > o.world_size()) {
    throw ConfigError(min + " is more than the " + std::to_string(o.world_size()) +
                      " ranks started (--nproc-per-node)");
  }
  if (o.max_ranks > 0 && o.max_ranks < o.min_ranks) {
    throw ConfigError("--max-ranks " + std::to_string(o.max_ranks) + " is below " + min);
  }
  // The first generation waits for every started rank, so fewer places would leave the
  // others waiting to join for ever.
  if (o.max_ranks > 0 && o.max_ranks < o.world_size()) {
    throw ConfigError("--max-ranks " + std::to_string(o.max_ranks) + " is below the " +
                      std::to_string(o.world_size()) +
                      " ranks started (--nproc-per-node): they would not all have a place");
  }
}

// --rdzv-backend and --rdzv-endpoints.
void check_rendezvous_backend(const LaunchOptions& o) {
  if (o.rdzv_backend == "tcp") {
    if (!o.rdzv_endpoints.empty()) {
      throw ConfigError("--rdzv-endpoints needs --rdzv-backend etcd");
    }
    return;
  }
  if (o.rdzv_endpoints.empty()) {
    throw ConfigError("--rdzv-backend etcd needs --rdzv-endpoints host:port[,host:port...]");
  }
  parse_etcd_endpoints(o.rdzv_endpoints);  // its ConfigError names what is wrong
}

}  // namespace

Milliseconds LaunchOptions::rdzv_timeout() const {
  return seconds_to_ms(rdzv_timeout_s);
}
Milliseconds LaunchOptions::stop_timeout() const {
  return seconds_to_ms(stop_timeout_s);
}
Milliseconds LaunchOptions::stopped_timeout() const {
  return seconds_to_ms(stopped_timeout_s);
}
Milliseconds LaunchOptions::node_timeout() const {
  return seconds_to_ms(node_timeout_s);
}

std::string LaunchOptions::store_name() const {
  return on_etcd() ? "the etcd cluster (" + rdzv_endpoints + ")" : "node 0's store";
}

bool LaunchOptions::is_expendable(int rank) const {
  return std::find(expendable.begin(), expendable.end(), rank) != expendable.end();
}

bool LaunchOptions::never_restarts(int exit_code) const {
  return std::find(no_restart_exit_codes.begin(), no_restart_exit_codes.end(), exit_code) !=
         no_restart_exit_codes.end();
}

void add_launch_options(CLI::App& app, LaunchOptions& o) {
  app.add_option("--nproc-per-node", o.nproc_per_node, "Ranks to start on this machine")
      ->check(CLI::Range(1, 1024));
  app.add_option("--nnodes", o.nnodes, "Machines in the job (each runs cohortrun)")
      ->check(CLI::Range(1, 65536));
  app.add_option("--node-rank", o.node_rank, "This machine's index in [0, nnodes)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--master-addr", o.master_addr,
                 "Address of node 0, which hosts the rendezvous store");
  app.add_option("--master-port", o.master_port,
                 "Port of the store (default: a free port on one node, 29500 on several)")
      ->check(CLI::Range(1, 65535));
  app.add_option("--max-restarts", o.max_restarts,
                 "Restart every rank this many times after a failure (COHORT_RESTART_COUNT); "
                 "with --min-ranks, restart each failed rank alone this many times")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--rdzv-timeout", o.rdzv_timeout_s,
                 "Seconds to wait for every node at the rendezvous (and at the end)")
      ->check(CLI::PositiveNumber);
  app.add_option("--stop-timeout", o.stop_timeout_s,
                 "Seconds ranks get to exit after SIGTERM before SIGKILL")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--stopped-timeout", o.stopped_timeout_s,
                 "Seconds ranks stopped by a signal (SIGSTOP) may stay stopped once every other "
                 "rank has ended; then cohortrun ends them")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--no-restart-exit-codes", o.no_restart_exit_codes_list,
                 "Exit codes of a usage or configuration error, which a restart would repeat: a "
                 "rank exiting with one is not restarted (default 2,64,78; none: restart any "
                 "failure)");
  app.add_option("--expendable", o.expendable_list,
                 "Ranks whose failure does not stop the others (parameter-server workers), "
                 "e.g. --expendable 1,2");
  app.add_option("--min-ranks", o.min_ranks,
                 "Elastic mode: a failed rank is restarted alone and rejoins the running job, "
                 "which goes on while at least this many ranks remain")
      ->check(CLI::PositiveNumber);
  app.add_option("--max-ranks", o.max_ranks,
                 "Elastic mode: at most this many ranks in the job at once")
      ->check(CLI::PositiveNumber);
  app.add_option("--node-timeout", o.node_timeout_s,
                 "Elastic mode on several nodes: seconds without a word from a node's cohortrun "
                 "before it is taken for lost")
      ->check(CLI::PositiveNumber);
  app.add_option("--simulate-nodes", o.simulate_nodes,
                 "Split this machine's ranks into this many simulated nodes (COHORT_NODE_ID), "
                 "e.g. to try HYBRID_SHARD on one host")
      ->check(CLI::Range(1, 1024));
  app.add_flag("!--no-prefix", o.prefix_output,
               "Do not prefix output lines with '[rank] ' ('[slot N] ' with --min-ranks)");
  app.add_option("--tail-lines", o.tail_lines,
                 "Lines of a failed rank's output repeated in the summary")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--rdzv-backend", o.rdzv_backend,
                 "Where the ranks' store is: tcp (hosted by this cohortrun) or etcd (the "
                 "cluster at --rdzv-endpoints, which no node of the job holds)")
      ->check(CLI::IsMember({"tcp", "etcd"}));
  app.add_option("--rdzv-endpoints", o.rdzv_endpoints,
                 "etcd's client endpoints, host:port[,host:port...] (with --rdzv-backend etcd)");
  app.prefix_command();  // the first positional and everything after it: the program
}

void finish_launch_options(CLI::App& app, LaunchOptions& o) {
  o.command = app.remaining();
  if (!o.command.empty() && o.command.front() == "--") o.command.erase(o.command.begin());
  if (o.command.empty()) {
    throw ConfigError("no program given: cohortrun [options] program [args...]");
  }
  if (o.node_rank >= o.nnodes && !o.elastic()) {
    throw ConfigError("--node-rank " + std::to_string(o.node_rank) + " must be below --nnodes " +
                      std::to_string(o.nnodes) +
                      " (a node beyond --nnodes can only join an elastic job: --min-ranks)");
  }
  if (o.joins_running_job() && o.nnodes == 1) {
    throw ConfigError("--node-rank " + std::to_string(o.node_rank) +
                      " with --nnodes 1: a job of one node keeps its store on loopback, so no "
                      "node can join it; start the job with --nnodes 2 or more");
  }
  if (o.nproc_per_node % o.simulate_nodes != 0) {
    throw ConfigError("--simulate-nodes " + std::to_string(o.simulate_nodes) +
                      " must divide --nproc-per-node " + std::to_string(o.nproc_per_node) +
                      ": every simulated node gets as many ranks");
  }
  o.expendable = int_list("--expendable", o.expendable_list, 0, o.world_size() - 1,
                          "a rank of this job of " + std::to_string(o.world_size()) + " ranks");
  if (o.no_restart_exit_codes_list == "none") {
    o.no_restart_exit_codes.clear();
  } else if (!o.no_restart_exit_codes_list.empty()) {
    o.no_restart_exit_codes = int_list("--no-restart-exit-codes", o.no_restart_exit_codes_list, 1,
                                       255, "an exit code from 1 to 255, or none");
  }
  check_elastic_options(o);
  check_rendezvous_backend(o);
  if (o.multi_node() && o.master_port < 0) o.master_port = LaunchOptions::kDefaultMasterPort;
  o.command.front() = resolve_program(o.command.front());
}

}  // namespace cohort::run
