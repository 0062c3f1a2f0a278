#include "calibrate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "cohort/core/error.h"
#include "choice/cost_model.h"
#include "kernels/reduce_kernels.h"
#include "transport/shm/shm_window.h"

namespace cohort::bench {

namespace {

constexpr size_t kLargeBytes = size_t{64} << 20;
constexpr size_t kGammaBytes = size_t{16} << 20;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds per allreduce of `bytes` with `algorithm`: median over trials of the slowest rank.
double allreduce_seconds(Group& group, Algorithm algorithm, size_t bytes, int iters,
                         Watchdog::Slot& progress) {
  std::vector<float> data(std::max<size_t>(1, bytes / sizeof(float)), 1.0f);
  CollectiveOptions options;
  options.algorithm = algorithm;
  progress.enter(algorithm_name(algorithm), bytes);
  for (int i = 0; i < 3; ++i) group.allreduce(make_buffer(data), options);
  std::vector<double> trials;
  for (int t = 0; t < 5; ++t) {
    group.barrier();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) {
      group.allreduce(make_buffer(data), options);
      progress.tick();
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
    CollectiveOptions max;
    max.op = ReduceOp::kMax;
    group.allreduce(make_buffer(&seconds, 1), max);
    trials.push_back(seconds);
  }
  return median(trials);
}

double reduce_seconds_per_byte() {
  std::vector<float> into(kGammaBytes / sizeof(float), 1.0f), from(into.size(), 2.0f);
  std::vector<double> trials;
  for (int t = 0; t < 7; ++t) {
    const auto start = std::chrono::steady_clock::now();
    kernels::reduce_into(into.data(), from.data(), into.size(), DType::kFloat32, ReduceOp::kSum);
    trials.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return median(trials) / static_cast<double>(kGammaBytes);
}

CostModel measure(Group& group, Watchdog::Slot& progress) {
  const double n = group.size();
  const double large = static_cast<double>(kLargeBytes);
  CostModel model = CostModel::defaults();
  model.gamma_s_per_byte = reduce_seconds_per_byte();
  model.tcp.alpha_s = allreduce_seconds(group, Algorithm::kDirect, 4, 200, progress);
  // Ring: 2(n-1) alpha + 2(n-1)/n bytes beta + (n-1)/n bytes gamma.
  const double ring = allreduce_seconds(group, Algorithm::kRing, kLargeBytes, 3, progress);
  model.tcp.beta_s_per_byte = std::max(
      1e-12, (ring - 2 * (n - 1) * model.tcp.alpha_s - (n - 1) / n * large * model.gamma_s_per_byte) /
                 (2 * (n - 1) / n * large));
  if (group.algorithm_for(CollectiveKind::kAllreduce, 4) != Algorithm::kShm) return model;
  model.shm.alpha_s = allreduce_seconds(group, Algorithm::kShm, 4, 2000, progress) / 2;
  // Shared memory: 2 rounds alpha + (2(n-1)/n + 1/n) bytes beta + (n-1)/n bytes gamma.
  const double shm = allreduce_seconds(group, Algorithm::kShm, kLargeBytes, 5, progress);
  const double rounds = std::ceil(large / static_cast<double>(ShmWindow::kSlotBytes));
  model.shm.beta_s_per_byte = std::max(
      1e-12, (shm - 2 * rounds * model.shm.alpha_s - (n - 1) / n * large * model.gamma_s_per_byte) /
                 ((2 * (n - 1) / n + 1 / n) * large));
  return model;
}

const char* short_name(Algorithm a) {
  return a == Algorithm::kHalvingDoubling ? "hd" : a == Algorithm::kHierarchical ? "hier"
                                                                                  : algorithm_name(a);
}

// The model's choice per size for a few shapes, so a reader sees the crossovers at once.
void print_choices(const CostModel& model) {
  struct Shape {
    const char* name;
    GroupShape shape;
  };
  const Shape shapes[] = {{"2 ranks, TCP", {2, 2, 1, false}},   {"4 ranks, TCP", {4, 4, 1, false}},
                          {"8 ranks, TCP", {8, 8, 1, false}},   {"16 ranks, TCP", {16, 16, 1, false}},
                          {"4 ranks, one host", {4, 1, 4, true}},
                          {"2 hosts x 2 ranks", {4, 2, 2, true}}};
  std::printf("# automatic allreduce choice with this model, by bytes per rank\n#%-20s", "");
  for (size_t bytes = 4096; bytes <= (size_t{256} << 20); bytes *= 4) {
    std::printf(" %7s", bytes >= (1 << 20) ? (std::to_string(bytes >> 20) + "M").c_str()
                                            : (std::to_string(bytes >> 10) + "K").c_str());
  }
  std::printf("\n");
  for (const Shape& s : shapes) {
    std::printf("# %-20s", s.name);
    for (size_t bytes = 4096; bytes <= (size_t{256} << 20); bytes *= 4) {
      std::printf(" %7s", short_name(cheapest_allreduce(bytes, s.shape, model)));
    }
    std::printf("\n");
  }
}

void write_model(const CostModel& model, const std::string& path) {
  const std::filesystem::path file(path);
  std::error_code ignored;
  if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path(), ignored);
  std::ofstream out(path);
  out << model.to_json();
  if (!out.flush()) throw ConfigError("cannot write the cost model to " + path);
}

}  // namespace

void run_calibration(Group& group, const BenchConfig& config, bool report,
                     Watchdog::Slot& progress) {
  if (group.size() < 2) throw InvalidArgument("--calibrate needs at least 2 ranks");
  const CostModel model = measure(group, progress);
  if (!report) return;
  const bool shm = group.algorithm_for(CollectiveKind::kAllreduce, 4) == Algorithm::kShm;
  std::printf("# cost model measured over %d ranks\n", group.size());
  std::printf("#  tcp    alpha %8.2f us   beta %6.3f GB/s\n", model.tcp.alpha_s * 1e6,
              1e-9 / model.tcp.beta_s_per_byte);
  std::printf("#  shm    alpha %8.2f us   beta %6.3f GB/s%s\n", model.shm.alpha_s * 1e6,
              1e-9 / model.shm.beta_s_per_byte,
              shm ? "" : "   (defaults: the ranks share no memory window)");
  std::printf("#  reduce                   gamma %6.3f GB/s\n", 1e-9 / model.gamma_s_per_byte);
  print_choices(model);
  const std::string path =
      config.calibrate_path.empty() ? CostModel::default_path() : config.calibrate_path;
  write_model(model, path);
  std::printf("# written to %s (groups read it when made; COHORT_COST_MODEL names another)\n",
              path.c_str());
  std::fflush(stdout);
}

}  // namespace cohort::bench
