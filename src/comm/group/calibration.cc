// cohort::calibrate (include/cohort/comm/calibration.h): the measurements behind the cost
// model's parameters. Each is an allreduce timed over a few trials (the slowest rank's time,
// median of the trials), from which the model's other terms are subtracted:
//
//   tcp alpha     direct allreduce of 4 bytes over TCP: one message each way
//   tcp beta      ring allreduce of 64 MiB over TCP, less its latency and reduction terms
//   reduce gamma  a float32 sum of 16 MiB into 16 MiB on one rank
//   shm alpha     shared-memory allreduce of 4 bytes: two rounds
//   shm beta      shared-memory allreduce of 64 MiB, less its round and reduction terms
#include "cohort/comm/calibration.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "cohort/comm/cost_model.h"
#include "cohort/core/error.h"
#include "kernels/reduce_kernels.h"
#include "transport/shm/shm_window.h"

namespace cohort {

namespace {

constexpr size_t kLargeBytes = size_t{64} << 20;
constexpr size_t kGammaBytes = size_t{16} << 20;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds per allreduce of `bytes` with `algorithm`: median over trials of the slowest rank.
double allreduce_seconds(Group& group, Algorithm algorithm, size_t bytes, int iters,
                         const CalibrationProgress& progress) {
  std::vector<float> data(std::max<size_t>(1, bytes / sizeof(float)), 1.0f);
  CollectiveOptions options;
  options.algorithm = algorithm;
  if (progress.enter) progress.enter(algorithm_name(algorithm), bytes);
  for (int i = 0; i < 3; ++i) group.allreduce(make_buffer(data), options);
  std::vector<double> trials;
  for (int t = 0; t < 5; ++t) {
    group.barrier();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) {
      group.allreduce(make_buffer(data), options);
      if (progress.tick) progress.tick();
    }
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
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
    trials.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return median(trials) / static_cast<double>(kGammaBytes);
}

CostModel to_cost_model(const Calibration& c) {
  CostModel model = CostModel::defaults();
  model.tcp = {c.tcp_alpha_s, c.tcp_beta_s_per_byte};
  if (c.shm_measured) model.shm = {c.shm_alpha_s, c.shm_beta_s_per_byte};
  model.gamma_s_per_byte = c.gamma_s_per_byte;
  return model;
}

const char* short_name(Algorithm a) {
  return a == Algorithm::kHalvingDoubling ? "hd"
         : a == Algorithm::kHierarchical  ? "hier"
                                          : algorithm_name(a);
}

std::string size_label(size_t bytes) {
  return bytes >= (1 << 20) ? std::to_string(bytes >> 20) + "M" : std::to_string(bytes >> 10) + "K";
}

}  // namespace

Calibration calibrate(Group& group, const CalibrationProgress& progress) {
  if (group.size() < 2) throw InvalidArgument("calibrate needs a group of at least 2 ranks");
  const double n = group.size();
  const double large = static_cast<double>(kLargeBytes);
  const CostModel defaults = CostModel::defaults();
  Calibration c;
  c.gamma_s_per_byte = reduce_seconds_per_byte();
  c.tcp_alpha_s = allreduce_seconds(group, Algorithm::kDirect, 4, 200, progress);
  // Ring: 2(n-1) alpha + 2(n-1)/n bytes beta + (n-1)/n bytes gamma.
  const double ring = allreduce_seconds(group, Algorithm::kRing, kLargeBytes, 3, progress);
  c.tcp_beta_s_per_byte = std::max(
      1e-12, (ring - 2 * (n - 1) * c.tcp_alpha_s - (n - 1) / n * large * c.gamma_s_per_byte) /
                 (2 * (n - 1) / n * large));
  c.shm_alpha_s = defaults.shm.alpha_s;
  c.shm_beta_s_per_byte = defaults.shm.beta_s_per_byte;
  c.shm_measured = group.algorithm_for(CollectiveKind::kAllreduce, 4) == Algorithm::kShm;
  if (!c.shm_measured) return c;
  c.shm_alpha_s = allreduce_seconds(group, Algorithm::kShm, 4, 2000, progress) / 2;
  // Shared memory: 2 rounds alpha + (2(n-1)/n + 1/n) bytes beta + (n-1)/n bytes gamma.
  const double shm = allreduce_seconds(group, Algorithm::kShm, kLargeBytes, 5, progress);
  const double rounds = std::ceil(large / static_cast<double>(ShmWindow::kSlotBytes));
  c.shm_beta_s_per_byte = std::max(
      1e-12, (shm - 2 * rounds * c.shm_alpha_s - (n - 1) / n * large * c.gamma_s_per_byte) /
                 ((2 * (n - 1) / n + 1 / n) * large));
  return c;
}

std::string Calibration::to_json() const {
  return to_cost_model(*this).to_json();
}

std::string Calibration::choice_table() const {
  const CostModel model = to_cost_model(*this);
  struct Shape {
    const char* name;
    GroupShape shape;
  };
  const Shape shapes[] = {
      {"2 ranks, TCP", {2, 2, 1, false}},     {"4 ranks, TCP", {4, 4, 1, false}},
      {"8 ranks, TCP", {8, 8, 1, false}},     {"16 ranks, TCP", {16, 16, 1, false}},
      {"4 ranks, one host", {4, 1, 4, true}}, {"2 hosts x 2 ranks", {4, 2, 2, true}}};
  std::ostringstream out;
  char cell[64];
  out << "# automatic allreduce choice with this model, by bytes per rank\n#"
      << std::string(20, ' ');
  for (size_t bytes = 4096; bytes <= (size_t{256} << 20); bytes *= 4) {
    std::snprintf(cell, sizeof cell, " %7s", size_label(bytes).c_str());
    out << cell;
  }
  out << "\n";
  for (const Shape& s : shapes) {
    std::snprintf(cell, sizeof cell, "# %-20s", s.name);
    out << cell;
    for (size_t bytes = 4096; bytes <= (size_t{256} << 20); bytes *= 4) {
      std::snprintf(cell, sizeof cell, " %7s",
                    short_name(cheapest_allreduce(bytes, s.shape, model)));
      out << cell;
    }
    out << "\n";
  }
  return out.str();
}

std::string cost_model_path() {
  return CostModel::default_path();
}

void write_calibration(const Calibration& calibration, const std::string& path) {
  const std::filesystem::path file(path);
  std::error_code ignored;
  if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path(), ignored);
  std::ofstream out(path);
  out << calibration.to_json();
  if (!out.flush()) throw ConfigError("cannot write the cost model to " + path);
}

}  // namespace cohort
