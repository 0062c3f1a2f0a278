// What the training benchmarks (cohort-ddp-bench, cohort-zero-bench) share: the rendezvous of
// ranks started by run_ranks.sh (rank 0 hosts the store, on a port handed on through a file),
// the store's orderly shutdown, and the figures they report (medians, peak RSS).
#pragma once

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cohort/comm/tcp_store.h"
#include "cohort/core/error.h"

namespace bench_ranks {

using Clock = std::chrono::steady_clock;

inline void write_port_file(const std::string& path, uint16_t port) {
  // Written aside and renamed, so a rank polling the file never reads half a number.
  const std::string aside = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(aside);
    out << port << "\n";
    if (!out.flush()) throw cohort::ConfigError("cannot write the port file " + aside);
  }
  if (std::rename(aside.c_str(), path.c_str()) != 0) {
    throw cohort::ConfigError("cannot rename " + aside + " to " + path);
  }
}

inline uint16_t read_port_file(const std::string& path, cohort::Milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    std::ifstream in(path);
    int port = 0;
    if (in >> port && port > 0 && port <= 65535) return static_cast<uint16_t>(port);
    if (Clock::now() > deadline) {
      throw cohort::TimeoutError("no port in " + path + " after " +
                                 std::to_string(timeout.count() / 1000) +
                                 " s: did rank 0 start, with the same --port-file?");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// Rank 0 hosts the store on 127.0.0.1:port (0: a free port, written to port_file); the others
// connect to port, or to the one they read from port_file.
inline std::shared_ptr<cohort::TcpStore> connect_store(int rank, int port,
                                                       const std::string& port_file,
                                                       cohort::Milliseconds timeout) {
  cohort::TcpStoreOptions options;
  options.host = "127.0.0.1";
  options.bind_host = "127.0.0.1";  // a benchmark has no business listening beyond loopback
  options.timeout = timeout;
  options.is_server = rank == 0;
  if (rank == 0 || port != 0) {
    options.port = static_cast<uint16_t>(port);
  } else {
    options.port = read_port_file(port_file, timeout);
  }
  auto store = std::make_shared<cohort::TcpStore>(options);
  if (rank == 0 && !port_file.empty()) write_port_file(port_file, store->port());
  return store;
}

// Rank 0 hosts the store: it must outlive every other rank's last use of it, so each rank
// checks out (under `prefix`) and rank 0 waits for all of them.
inline void leave_store(cohort::Store& store, int rank, int world, const std::string& prefix,
                        cohort::Milliseconds timeout) {
  if (rank != 0) {
    try {
      store.set(prefix + std::to_string(rank), std::string("1"));
    } catch (const cohort::StoreError&) {
      // Rank 0 may see the key and close the store before the reply reaches us (seen once in
      // a few dozen runs). This rank's part is done either way: had rank 0 closed the store
      // for another reason, it failed and reports that itself.
    }
    return;
  }
  store.set(prefix + "0", std::string("1"));
  std::vector<std::string> keys;
  for (int r = 0; r < world; ++r) keys.push_back(prefix + std::to_string(r));
  store.wait(keys, timeout);
}

inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// Peak resident set of this process so far, KiB (Linux reports ru_maxrss in KiB).
inline int64_t peak_rss_kib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

}  // namespace bench_ranks
