// The TCP store server under load: requests/s of N clients in this process, each on a thread of
// its own doing set+get on its own key against one TcpStoreServer (a rank's traffic when a
// group is made), and the server's threads while 64 clients are blocked in get().
//
// Counters: req_per_s = requests answered per second, all clients together (a set+get pair is
// two); server_threads = threads the server runs with 64 clients parked in get() (this
// process's threads minus those it had before the server and the 64 client threads).
//
//   store_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <dirent.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cohort/comm/tcp_store.h"

namespace {

using namespace std::chrono_literals;

// Requests per timed iteration, shared among the clients, so that every N does the same work.
constexpr int kPairsPerIteration = 4096;
constexpr int kBlockedClients = 64;

cohort::TcpStoreOptions client_options(uint16_t port) {
  cohort::TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.token = "bench";
  o.timeout = std::chrono::milliseconds(60'000);
  return o;
}

std::unique_ptr<cohort::TcpStoreServer> start_server() {
  cohort::TcpStoreServerOptions o;
  o.bind_host = "127.0.0.1";
  o.token = "bench";
  return std::make_unique<cohort::TcpStoreServer>(o);
}

int thread_count() {
  int count = 0;
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) return -1;
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  ::closedir(dir);
  return count;
}

// True when thread `tid` of this process sleeps in the kernel (state S).
bool is_sleeping(pid_t tid) {
  std::ifstream stat("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'S';
}

void BM_SetGet(benchmark::State& state) {
  const int clients = static_cast<int>(state.range(0));
  const int pairs = kPairsPerIteration / clients;
  auto server = start_server();
  std::vector<std::unique_ptr<cohort::TcpStore>> stores;
  for (int c = 0; c < clients; ++c) {
    stores.push_back(std::make_unique<cohort::TcpStore>(client_options(server->port())));
  }
  const cohort::Bytes value(64, 'v');
  for (auto _ : state) {
    std::vector<std::thread> threads;
    for (int c = 0; c < clients; ++c) {
      threads.emplace_back([&, c] {
        const std::string key = "rank/" + std::to_string(c);
        for (int i = 0; i < pairs; ++i) {
          stores[c]->set(key, value);
          benchmark::DoNotOptimize(stores[c]->get(key, 10'000ms));
        }
      });
    }
    for (auto& t : threads) t.join();
  }
  const double requests = 2.0 * pairs * clients * static_cast<double>(state.iterations());
  state.counters["req_per_s"] = benchmark::Counter(requests, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SetGet)->Arg(1)->Arg(8)->Arg(64)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_ServerThreadsWithBlockedGets(benchmark::State& state) {
  int server_threads = 0;
  for (auto _ : state) {
    const int before = thread_count();
    auto server = start_server();
    std::vector<std::unique_ptr<cohort::TcpStore>> stores;
    for (int c = 0; c < kBlockedClients; ++c) {
      stores.push_back(std::make_unique<cohort::TcpStore>(client_options(server->port())));
    }
    std::vector<std::atomic<pid_t>> tids(kBlockedClients);
    std::vector<std::thread> getters;
    for (int c = 0; c < kBlockedClients; ++c) {
      getters.emplace_back([&, c] {
        tids[c] = static_cast<pid_t>(::syscall(SYS_gettid));
        stores[c]->get("released", 60'000ms);
      });
    }
    // Every getter has sent its GET and sleeps waiting for the reply.
    for (auto& tid : tids) {
      while (tid.load() == 0 || !is_sleeping(tid.load())) std::this_thread::sleep_for(1ms);
    }
    server_threads = thread_count() - before - kBlockedClients;
    stores.front()->set("released", "yes");
    for (auto& t : getters) t.join();
  }
  state.counters["server_threads"] = server_threads;
}
BENCHMARK(BM_ServerThreadsWithBlockedGets)
    ->Iterations(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
