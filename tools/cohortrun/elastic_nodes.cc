#include "elastic_nodes.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <thread>

#include "cohort/comm/prefix_store.h"
#include "cohort/core/error.h"
#include "node_rendezvous.h"
#include "stop_signals.h"

namespace cohort::run {

namespace {

using Clock = std::chrono::steady_clock;

constexpr Milliseconds kLongestWatchInterval{500};

void say(const std::string& line) {
  std::fprintf(stderr, "cohortrun: %s\n", line.c_str());
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}

std::string ranks_word(int n) {
  return std::to_string(n) + (n == 1 ? " rank" : " ranks");
}

void throw_if_interrupted() {
  if (const int signal = received_stop_signal()) throw Interrupted(signal);
}

// The ranks' view of the store: elastic mode runs one attempt, whose prefix the ranks get as
// COHORT_STORE_PREFIX (rank_environment.cc) and init_elastic() puts in front of every key.
std::shared_ptr<Store> ranks_view(Store& store) {
  std::shared_ptr<Store> unowned(std::shared_ptr<Store>(), &store);
  return std::make_shared<PrefixStore>("attempt0/", std::move(unowned));
}

}  // namespace

ElasticNodes::ElasticNodes(const LaunchOptions& options, Store& store)
    : options_(options), store_(store), job_store_(ranks_view(store)) {
  for (int node = 0; node < options.nnodes; ++node) {
    if (node == options.node_rank) continue;
    Node& n = others_[node];
    n.ranks = options.nproc_per_node;
    n.heard = Clock::now();
  }
}

std::string ElasticNodes::key(const std::string& name) const {
  return "cohortrun/elastic/" + name;
}

std::string ElasticNodes::beat_key(int node) const {
  return key("beat/" + std::to_string(node));
}

void ElasticNodes::join_running_job() {
  const Deadline deadline = Deadline::after(options_.rdzv_timeout());
  for (;;) {
    status_ = elastic_job_status(*job_store_, status_);
    if (status_.finished) {
      throw Error("the job at " + options_.master_addr + ":" +
                  std::to_string(options_.master_port) +
                  " has finished (its ranks marked it done): there is nothing to join");
    }
    if (status_.generation > 0) break;
    if (deadline.expired()) {
      throw TimeoutError("the job at " + options_.master_addr + ":" +
                         std::to_string(options_.master_port) +
                         " formed no generation within --rdzv-timeout: its first nodes' ranks "
                         "never met, so there is no running job to join");
    }
    throw_if_interrupted();
    std::this_thread::sleep_for(std::min(kLongestWatchInterval, options_.node_timeout() / 4));
  }
  const int64_t index = store_.add(key("joiners"), 1) - 1;
  store_.add(beat_key(options_.node_rank), 1);
  store_.set(key("joiner/" + std::to_string(index)), std::to_string(options_.node_rank) + " " +
                                                         std::to_string(options_.nproc_per_node) +
                                                         " " + host_name());
  read_joiners(index, false);  // the nodes that joined before this one: no news
  ++joiners_seen_;             // this one
  const int first = options_.node_rank * options_.nproc_per_node;
  say("node " + std::to_string(options_.node_rank) + " joins the running job (generation " +
      std::to_string(status_.generation) + ", " + ranks_word(status_.size) + "): its slots " +
      std::to_string(first) + " to " + std::to_string(first + options_.nproc_per_node - 1) +
      " become members at the job's next step boundary");
}

void ElasticNodes::watch() {
  if (next_watch_.expired()) watch_now();
}

void ElasticNodes::watch_now() {
  if (!store_lost_.empty()) return;
  next_watch_ = Deadline::after(std::min(kLongestWatchInterval, options_.node_timeout() / 4));
  try {
    look();
  } catch (const Error& e) {
    store_lost_ = e.what();
  }
}

// The beats first: a node heard from now was alive after the last look at the generation,
// so a generation newer than that one may have formed without its ranks.
void ElasticNodes::look() {
  store_.add(beat_key(options_.node_rank), 1);
  check_beats();
  read_new_joiners();
  check_generation();
}

// Nodes that joined the running job after this one started: each is news.
void ElasticNodes::read_new_joiners() {
  read_joiners(store_.add(key("joiners"), 0), true);
}

void ElasticNodes::read_joiners(int64_t count, bool news) {
  for (; joiners_seen_ < count; ++joiners_seen_) {
    std::istringstream entry(
        store_.get_string(key("joiner/" + std::to_string(joiners_seen_)), options_.rdzv_timeout()));
    int node = -1;
    Node n;
    entry >> node >> n.ranks >> n.host;
    if (node == options_.node_rank) continue;
    n.heard = Clock::now();
    n.generation_when_heard = status_.generation;
    others_[node] = n;
    if (news) {
      say("node " + std::to_string(node) + " (" + n.host + ") joined the job with " +
          ranks_word(n.ranks) + "; they become members at the next step boundary");
    }
  }
}

void ElasticNodes::check_generation() {
  const ElasticJobStatus last = status_;
  status_ = elastic_job_status(*job_store_, status_);
  if (status_.generation == last.generation) return;
  if (status_.generation == 1) {
    say("the job started with " + ranks_word(status_.size) + " (generation 1)");
    return;
  }
  std::string change;
  if (status_.left > 0) change += std::to_string(status_.left) + " left";
  if (status_.joined > 0) {
    change += (change.empty() ? "" : ", ") + std::to_string(status_.joined) + " joined";
  }
  say("the job goes on with " + ranks_word(status_.size) + " (generation " +
      std::to_string(status_.generation) + (change.empty() ? "" : ": " + change) + ")");
}

bool ElasticNodes::has_key(const std::string& name) {
  try {
    store_.wait({name}, Milliseconds(1));
    return true;
  } catch (const TimeoutError&) {
    return false;
  }
}

std::optional<int> ElasticNodes::done_of(int node) {
  const std::string done = key("done/" + std::to_string(node));
  if (!has_key(done)) return std::nullopt;
  return std::stoi(store_.get_string(done, options_.rdzv_timeout()));
}

void ElasticNodes::check_beats() {
  const auto now = Clock::now();
  for (auto& [node, n] : others_) {
    if (n.left) continue;
    const int64_t beat = store_.add(beat_key(node), 0);
    if (beat != n.beat) {
      if (n.lost) say("node " + std::to_string(node) + " is heard from again");
      n.beat = beat;
      n.heard = now;
      n.generation_when_heard = status_.generation;
      n.lost = false;
      continue;
    }
    if (n.lost || now - n.heard < options_.node_timeout()) continue;
    if (has_key(key("left/" + std::to_string(node)))) {
      n.left = true;
      n.done = done_of(node);
      continue;
    }
    n.lost = true;
    char silent[64];
    std::snprintf(silent, sizeof silent, "%g s", options_.node_timeout_s);
    std::string line = "node " + std::to_string(node) +
                       " left (its cohortrun was not heard from for " + silent +
                       " (--node-timeout): it was killed or its host is gone)";
    // A generation that left ranks out and formed after the node was last heard from: most
    // likely without its ranks. Otherwise (a vanished host: the others wait for its ranks until
    // their collective's timeout) it has not formed yet.
    if (status_.generation > n.generation_when_heard && status_.left > 0) {
      line += "; the job goes on with " + ranks_word(status_.size);
    } else {
      line += "; the job goes on without its ranks once the others notice";
    }
    say(line);
  }
}

template <typename Ready>
bool ElasticNodes::wait_for_nodes(Ready ready, Deadline deadline) {
  watch_now();  // the latest news first: new nodes, too
  for (;;) {
    watch();
    if (!store_lost_.empty()) return false;
    bool all = true;
    for (auto& [node, n] : others_) {
      if (n.lost) continue;
      try {
        if (!ready(node, n)) all = false;
      } catch (const Error& e) {
        store_lost_ = e.what();
        return false;
      }
    }
    if (all) return true;
    if (deadline.expired()) return false;
    throw_if_interrupted();
    std::this_thread::sleep_for(Milliseconds(100));
  }
}

std::optional<int> ElasticNodes::report_done(int succeeded, bool wait_for_others) {
  try {
    store_.set(key("done/" + std::to_string(options_.node_rank)), std::to_string(succeeded));
  } catch (const Error& e) {
    store_lost_ = e.what();
    return std::nullopt;
  }
  if (!wait_for_others) {
    watch_now();  // the news since the last look, for this node's log
    return std::nullopt;
  }
  const bool all = wait_for_nodes(
      [&](int node, Node& n) {
        if (!n.done) n.done = done_of(node);
        return n.done.has_value() || n.left;
      },
      Deadline::never());
  if (!all) return std::nullopt;
  int total = succeeded;
  for (const auto& [node, n] : others_) total += n.done.value_or(0);
  return total;
}

void ElasticNodes::leave() {
  try {
    store_.set(key("left/" + std::to_string(options_.node_rank)), "1");
  } catch (const Error&) {
    return;  // the store is gone already: nothing left to wait for
  }
  // Only node 0's store, on TCP, must outlive the other nodes' last look.
  if (options_.node_rank != 0 || options_.on_etcd()) return;
  const bool all = wait_for_nodes(
      [&](int node, Node& n) {
        if (!n.left) n.left = has_key(key("left/" + std::to_string(node)));
        return n.left;
      },
      Deadline::after(options_.rdzv_timeout()));
  if (all) return;
  std::string missing;
  for (const auto& [node, n] : others_) {
    if (!n.left && !n.lost) missing += (missing.empty() ? "" : ", ") + std::to_string(node);
  }
  say("warning: node(s) " + missing +
      " did not leave within --rdzv-timeout; closing the store anyway");
}

}  // namespace cohort::run
