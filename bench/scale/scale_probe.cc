// cohort-scale-probe: what one rank of a large group costs and whether its collectives are
// right, for issue-17 style measurements at 8 to 64 ranks (docs/bench.md, "Scale").
//
//   cohortrun --nproc-per-node 64 build/bin/cohort-scale-probe [--no-shm] [--iters 200]
//
// Each rank makes its group over the job's store (counted), checks allreduce, broadcast,
// allgather and reduce_scatter at a few counts against closed-form values, then runs a steady
// loop of small allreduces and, in the middle of it, counts its threads, sockets and resident
// memory. Rank 0 prints one JSON line with the group's figures.
#include <dirent.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cohort/comm/group.h"
#include "cohort/comm/launch_env.h"
#include "cohort/comm/prefix_store.h"
#include "cohort/comm/tcp_store.h"

namespace {

using cohort::Bytes;
using cohort::Milliseconds;
using Clock = std::chrono::steady_clock;

// Counts what the group asks of the job's store.
class CountingStore final : public cohort::Store {
 public:
  explicit CountingStore(std::shared_ptr<cohort::Store> inner) : inner_(std::move(inner)) {}
  void set(const std::string& k, const Bytes& v) override { ++ops, inner_->set(k, v); }
  Bytes get(const std::string& k, Milliseconds t) override { return ++ops, inner_->get(k, t); }
  int64_t add(const std::string& k, int64_t d) override { return ++ops, inner_->add(k, d); }
  Bytes compare_set(const std::string& k, const Bytes& e, const Bytes& d) override {
    return ++ops, inner_->compare_set(k, e, d);
  }
  void wait(const std::vector<std::string>& k, Milliseconds t) override {
    ++ops, inner_->wait(k, t);
  }
  bool delete_key(const std::string& k) override { return ++ops, inner_->delete_key(k); }
  int64_t num_keys() override { return ++ops, inner_->num_keys(); }

  std::atomic<int64_t> ops{0};

 private:
  std::shared_ptr<cohort::Store> inner_;
};

int count_entries(const std::string& dir, bool sockets_only) {
  int n = 0;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return -1;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    if (sockets_only) {
      char target[64] = {0};
      const std::string path = dir + "/" + e->d_name;
      if (readlink(path.c_str(), target, sizeof target - 1) <= 0) continue;
      if (std::string(target).rfind("socket:", 0) != 0) continue;
    }
    ++n;
  }
  closedir(d);
  return n;
}

double rss_mib() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return -1;
}

// Values small enough that every sum below is exact in float32.
float value(int rank, size_t i) {
  return static_cast<float>((rank + 1) * (i % 7 + 1));
}

int64_t check_collectives(cohort::Group& group) {
  const int n = group.size(), me = group.rank();
  int64_t wrong = 0;
  for (size_t count : {size_t{1}, size_t{1000}, size_t{1} << 18}) {
    std::vector<float> data(count);
    for (size_t i = 0; i < count; ++i) data[i] = value(me, i);
    group.allreduce(cohort::make_buffer(data));
    const float ranks_sum = static_cast<float>(n * (n + 1) / 2);
    for (size_t i = 0; i < count; ++i) wrong += data[i] != ranks_sum * float(i % 7 + 1);

    for (size_t i = 0; i < count; ++i) data[i] = me == n - 1 ? value(me, i) : -1.0f;
    cohort::CollectiveOptions root;
    root.root = n - 1;
    group.broadcast(cohort::make_buffer(data), root);
    for (size_t i = 0; i < count; ++i) wrong += data[i] != value(n - 1, i);

    std::vector<float> mine(count), all(count * static_cast<size_t>(n));
    for (size_t i = 0; i < count; ++i) mine[i] = value(me, i);
    group.allgather(cohort::make_buffer(mine), cohort::make_buffer(all));
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i) wrong += all[r * count + i] != value(r, i);

    for (size_t i = 0; i < all.size(); ++i) all[i] = value(me, i);
    group.reduce_scatter(cohort::make_buffer(all), cohort::make_buffer(mine));
    for (size_t i = 0; i < count; ++i) {
      wrong += mine[i] != ranks_sum * float((me * count + i) % 7 + 1);
    }
  }
  return wrong;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cohort-scale-probe: per-rank costs and correctness of one large group"};
  bool no_shm = false;
  int iters = 200;
  app.add_flag("--no-shm", no_shm, "TCP only (no shared memory window)");
  app.add_option("--iters", iters, "allreduces of 4096 floats in the steady loop");
  CLI11_PARSE(app, argc, argv);

  const cohort::LaunchEnv env = cohort::read_launch_env();
  cohort::TcpStoreOptions store_options;
  store_options.host = env.master_addr;
  store_options.port = env.master_port;
  store_options.is_server = env.rank == 0 && !env.store_hosted;
  std::shared_ptr<cohort::Store> job_store = std::make_shared<cohort::TcpStore>(store_options);
  if (!env.store_prefix.empty()) {
    job_store = std::make_shared<cohort::PrefixStore>(env.store_prefix, job_store);
  }
  auto store = std::make_shared<CountingStore>(job_store);
  cohort::GroupOptions options;
  options.shared_memory = !no_shm;
  options.host = "127.0.0.1";
  const auto created_at = Clock::now();
  auto group = cohort::Group::create(store, env.rank, env.world_size, options);
  group->barrier();
  const double creation_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - created_at).count();

  const int64_t wrong = check_collectives(*group);

  std::vector<float> small(4096, 1.0f);
  group->barrier();
  const int64_t ops_before = store->ops.load();
  const auto loop_at = Clock::now();
  int threads = 0, sockets = 0;
  double rss = 0;
  for (int i = 0; i < iters; ++i) {
    group->allreduce(cohort::make_buffer(small));
    if (i == iters / 2) {
      threads = count_entries("/proc/self/task", false);
      sockets = count_entries("/proc/self/fd", true);
      rss = rss_mib();
    }
  }
  const double loop_s = std::chrono::duration<double>(Clock::now() - loop_at).count();
  const double store_ops = static_cast<double>(store->ops.load() - ops_before);

  // Every rank's figures to rank 0.
  std::vector<double> mine{creation_ms, double(wrong), double(threads), double(sockets),
                           rss,         store_ops,     loop_s};
  std::vector<double> all(mine.size() * static_cast<size_t>(group->size()));
  group->allgather(cohort::make_buffer(mine), cohort::make_buffer(all));
  if (group->rank() != 0) return 0;
  auto column = [&](size_t c) {
    std::vector<double> v;
    for (int r = 0; r < group->size(); ++r) v.push_back(all[r * mine.size() + c]);
    std::sort(v.begin(), v.end());
    return v;
  };
  auto sum = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return s;
  };
  const double loop = column(6).back();
  nlohmann::json out = {
      {"world", group->size()},
      {"transport", no_shm ? "tcp" : "tcp+shm"},
      {"group_creation_ms_max", column(0).back()},
      {"wrong", sum(column(1))},
      {"threads_per_rank_max", column(2).back()},
      {"sockets_per_rank_max", column(3).back()},
      {"rss_mib_median", column(4)[column(4).size() / 2]},
      {"store_ops_per_s_all_ranks", sum(column(5)) / loop},
      {"steady_allreduce_us", loop / iters * 1e6},
  };
  std::printf("%s\n", out.dump().c_str());
  return wrong == 0 ? 0 : 1;
}
