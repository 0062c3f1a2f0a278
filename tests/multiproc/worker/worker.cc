// One rank of a multi-process test. Usage:
//   cohort_test_worker <store-port> <rank> <size> <scenario> [<param>]
// It joins the group through the TCP store on 127.0.0.1:<store-port>, prints "READY" once the
// group works, runs the scenario, and prints one line
//   RESULT <ok|ErrorType> failed_rank=<r> seconds=<time from READY to result> | <message>
// so that the test process can check what every rank saw, and how fast.
//
// COHORT_TEST_SHM_KILL=<step>:<rank>:<signal>:<self|all> ends rank <rank> (or every rank, each
// of which publishes its pid in the store first) with <signal> when that rank reaches <step>
// of the shared-memory window's creation (ShmWindow::set_creation_hook).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cohort/comm/group.h"
#include "cohort/comm/tcp_store.h"
#include "cohort/core/error.h"
#include "transport/shm/shm_window.h"

namespace {

using Clock = std::chrono::steady_clock;

void report(const char* kind, int failed_rank, Clock::time_point since, const std::string& text) {
  const double seconds = std::chrono::duration<double>(Clock::now() - since).count();
  std::string one_line = text;  // the test reads one line per result
  for (auto& c : one_line) c = c == '\n' ? ' ' : c;
  std::printf("RESULT %s failed_rank=%d seconds=%.3f | %s\n", kind, failed_rank, seconds,
              one_line.c_str());
  std::fflush(stdout);
}

// Allreduces forever (until an error, or `iterations`), checking every result.
// Prints "LOOPING" once the first allreduce is done, so that a test can act mid-loop.
void allreduce_loop(cohort::Group& group, long iterations) {
  std::vector<float> data(1 << 20);
  for (long it = 0; it < iterations; ++it) {
    std::fill(data.begin(), data.end(), 1.0f);
    group.allreduce(cohort::make_buffer(data));
    if (data[0] != static_cast<float>(group.size())) throw cohort::Error("wrong allreduce result");
    if (it == 0) {
      std::printf("LOOPING\n");
      std::fflush(stdout);
    }
  }
}

// As allreduce_loop, on registered memory (Group::allocate_registered): the ranks read and
// write each other's buffers in place. Prints "SHARED" or "PRIVATE" (what the node made of it)
// before "LOOPING".
void registered_loop(cohort::Group& group, long iterations) {
  constexpr size_t kCount = 1 << 20;
  auto memory = group.allocate_registered(kCount * sizeof(float));
  std::printf("%s\n", memory->shared() ? "SHARED" : "PRIVATE");
  float* data = memory->as<float>();
  for (long it = 0; it < iterations; ++it) {
    std::fill(data, data + kCount, 1.0f);
    group.allreduce(memory->buffer<float>(0, kCount));
    if (data[0] != static_cast<float>(group.size()) ||
        data[kCount - 1] != static_cast<float>(group.size())) {
      throw cohort::Error("wrong allreduce result");
    }
    if (it == 0) {
      std::printf("LOOPING\n");
      std::fflush(stdout);
    }
  }
}

// Every rank but `skipped` calls an allreduce and says in the store when it is over (it times
// out); `skipped` stays away until they all have, so it never joins late however slow the
// machine is. A fixed sleep here once had to outlast the others' deadline.
void skip_rank(cohort::Group& group, cohort::Store& store, int skipped) {
  const auto gave_up = [](int rank) { return "test/gave_up/" + std::to_string(rank); };
  if (group.rank() != skipped) {
    std::vector<float> small(64, 1.0f);
    try {
      group.allreduce(cohort::make_buffer(small));
    } catch (...) {
      store.set(gave_up(group.rank()), "1");
      throw;
    }
    store.set(gave_up(group.rank()), "1");
    return;
  }
  std::vector<std::string> others;
  for (int r = 0; r < group.size(); ++r) {
    if (r != skipped) others.push_back(gave_up(r));
  }
  store.wait(others, std::chrono::seconds(60));
}

// The out-of-step mistakes users make (docs/errors.md, "Collectives out of step"), with rank 1
// the odd one out. "count": allreduce of another count; "kind": allgather where the others
// allreduce, the same number of bytes; "root": broadcast from another root.
void out_of_step(cohort::Group& group, const std::string& how) {
  const bool odd = group.rank() == 1;
  const size_t count = 1024 * static_cast<size_t>(group.size());
  std::vector<float> data(odd && how == "count" ? 2 * count : count, 1.0f);
  if (how == "count" || (how == "kind" && !odd)) {
    group.allreduce(cohort::make_buffer(data));
  } else if (how == "kind") {
    std::vector<float> mine(count / static_cast<size_t>(group.size()), 1.0f);
    group.allgather(cohort::make_buffer(mine), cohort::make_buffer(data));
  } else if (how == "root") {
    cohort::CollectiveOptions options;
    options.root = odd ? 1 : 0;
    group.broadcast(cohort::make_buffer(data), options);
  } else {
    throw cohort::InvalidArgument("unknown out_of_step case " + how);
  }
}

void run_scenario(cohort::Group& group, cohort::Store& store, const std::string& scenario,
                  const std::string& param) {
  if (scenario == "allreduce_loop") {
    allreduce_loop(group, 1000000);
  } else if (scenario == "allreduce_once") {
    allreduce_loop(group, 3);
  } else if (scenario == "registered_loop") {
    registered_loop(group, 1000000);
  } else if (scenario == "skip_rank") {  // every rank but <param> calls an allreduce
    skip_rank(group, store, std::atoi(param.c_str()));
  } else if (scenario == "count_mismatch") {  // rank <param> passes one element more
    std::vector<float> data(group.rank() == std::atoi(param.c_str()) ? 101 : 100, 1.0f);
    group.allreduce(cohort::make_buffer(data));
  } else if (scenario == "out_of_step") {  // rank 1 makes another call than the others
    out_of_step(group, param);
    // A rank whose part of the bad call was correct, or only sent, may leave it before a peer
    // sees the mismatch; the group fails at the latest in the next collective that needs the
    // peer that saw it, which is one of these (docs/errors.md, "Collectives out of step").
    group.barrier();
    group.barrier();
  } else if (scenario == "exit_early") {  // rank <param> exits without closing its group
    if (group.rank() == std::atoi(param.c_str())) std::_Exit(3);
    allreduce_loop(group, 1000000);
  } else {
    throw cohort::InvalidArgument("unknown scenario " + scenario);
  }
}

// The COHORT_TEST_SHM_KILL plan, and the pids of every rank for "all".
struct KillPlan {
  std::string step;
  int rank = -1;
  int signal = 0;
  std::vector<pid_t> everyone;  // empty: this rank only
};
KillPlan g_plan;

void kill_at_step(const char* step, int rank) {
  if (g_plan.step != step || g_plan.rank != rank) return;
  for (pid_t pid : g_plan.everyone) {
    if (pid != ::getpid()) ::kill(pid, g_plan.signal);
  }
  ::raise(g_plan.signal);
}

void plan_kill(cohort::Store& store, int rank, int size) {
  const char* text = std::getenv("COHORT_TEST_SHM_KILL");
  if (text == nullptr) return;
  char step[32] = {};
  int target = -1;
  int signal = 0;
  char who[8] = {};
  if (std::sscanf(text, "%31[^:]:%d:%d:%7s", step, &target, &signal, who) != 4) {
    throw cohort::InvalidArgument(std::string("bad COHORT_TEST_SHM_KILL: ") + text);
  }
  g_plan.step = step;
  g_plan.rank = target;
  g_plan.signal = signal;
  if (std::string(who) == "all") {
    store.set("test-pid/" + std::to_string(rank), std::to_string(::getpid()));
    for (int r = 0; r < size; ++r) {
      const auto key = "test-pid/" + std::to_string(r);
      g_plan.everyone.push_back(std::atoi(store.get_string(key, std::chrono::seconds(30)).c_str()));
    }
  }
  cohort::ShmWindow::set_creation_hook(kill_at_step);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s <store-port> <rank> <size> <scenario> [<param>]\n", argv[0]);
    return 2;
  }
  const int rank = std::atoi(argv[2]);
  const int size = std::atoi(argv[3]);
  const std::string scenario = argv[4];
  const std::string param = argc > 5 ? argv[5] : "";
  auto since = Clock::now();
  try {
    cohort::TcpStoreOptions store_options;
    store_options.port = static_cast<uint16_t>(std::atoi(argv[1]));
    store_options.timeout = std::chrono::seconds(30);
    auto store = std::make_shared<cohort::TcpStore>(store_options);
    plan_kill(*store, rank, size);
    cohort::GroupOptions options;
    options.host = "127.0.0.1";
    auto group = cohort::Group::create(store, rank, size, options);
    group->barrier();
    std::printf("READY\n");
    std::fflush(stdout);
    since = Clock::now();
    run_scenario(*group, *store, scenario, param);
    report("ok", -1, since, "");
  } catch (const cohort::PeerError& e) {
    report("PeerError", e.failed_rank(), since, e.what());
  } catch (const cohort::TimeoutError& e) {
    report("TimeoutError", -1, since, e.what());
  } catch (const cohort::MismatchError& e) {
    report("MismatchError", -1, since, e.what());
  } catch (const cohort::InvalidArgument& e) {
    report("InvalidArgument", -1, since, e.what());
  } catch (const std::exception& e) {
    report("Error", -1, since, e.what());
  }
  return 0;
}
