#include "report.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cohort/core/error.h"

namespace cohort::bench {

namespace {

// Non-reducing collectives show "none" in the redop column, as nccl-tests does.
const char* op_label(const BenchConfig& config) {
  return reduces(config.collective) ? reduce_op_name(config.op) : "none";
}

nlohmann::ordered_json row_json(const Row& row) {
  return {{"size", row.bytes},           {"count", row.count},
          {"algo", algorithm_name(row.algorithm)},
          {"iters", row.iters},          {"time_us", row.time_us},
          {"time_us_min", row.time_us_min}, {"time_us_max", row.time_us_max},
          {"algbw_gbs", row.algbw_gbs},  {"busbw_gbs", row.busbw_gbs},
          {"wrong", row.wrong}};
}

}  // namespace

Reporter::Reporter(const BenchConfig& config, std::FILE* out) : config_(config), out_(out) {}

void Reporter::header(Algorithm algorithm, const std::vector<std::string>& notes) {
  algorithm_ = algorithm;
  std::fprintf(out_,
               "# cohort-bench %s  ranks %d  transport %s  algo %s  dtype %s  op %s  iters %d  "
               "warmup %d  trials %d%s\n",
               collective_name(config_.collective), config_.ranks,
               transport_name(config_.transport), algorithm_name(algorithm),
               dtype_name(config_.dtype), op_label(config_), config_.iters, config_.warmup,
               config_.trials, config_.registered ? "  registered" : "");
  std::fprintf(out_,
               "# time: per op, max over ranks of the mean over iters back-to-back calls "
               "(median of trials); busbw factor %.4g\n",
               busbw_factor(config_.collective, config_.ranks));
  for (const std::string& text : notes) note(text);
  std::fprintf(out_, "#\n");
  std::fprintf(out_, "# %13s %12s %9s %7s %12s %12s %12s %8s\n", "size(B)", "count", "type",
               "redop", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  std::fflush(out_);
}

void Reporter::note(const std::string& text) {
  notes_.push_back(text);
  std::fprintf(out_, "# %s\n", text.c_str());
  std::fflush(out_);
}

void Reporter::row(const Row& row) {
  rows_.push_back(row);
  std::fprintf(out_, "  %13zu %12zu %9s %7s %12.2f %12.3f %12.3f %8llu\n", row.bytes, row.count,
               dtype_name(config_.dtype), op_label(config_), row.time_us, row.algbw_gbs,
               row.busbw_gbs, static_cast<unsigned long long>(row.wrong));
  std::fflush(out_);
}

void Reporter::footer(uint64_t wrong_total) {
  wrong_total_ = wrong_total;
  double busbw_sum = 0;
  for (const Row& r : rows_) busbw_sum += r.busbw_gbs;
  std::fprintf(out_, "#\n# #wrong total: %llu (%s)\n",
               static_cast<unsigned long long>(wrong_total), wrong_total == 0 ? "OK" : "WRONG");
  if (!rows_.empty()) {
    std::fprintf(out_, "# avg busbw: %.3f GB/s (mean over %zu sizes)\n",
                 busbw_sum / static_cast<double>(rows_.size()), rows_.size());
  }
  std::fflush(out_);
}

bool Reporter::write_json(const std::string& error) const {
  if (config_.json_path.empty()) return true;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const Row& r : rows_) rows.push_back(row_json(r));
  const nlohmann::ordered_json doc = {
      {"tool", "cohort-bench"},
      {"command", config_.command_line},
      {"collective", collective_name(config_.collective)},
      {"ranks", config_.ranks},
      {"transport", transport_name(config_.transport)},
      {"algo", algorithm_name(algorithm_)},
      {"dtype", dtype_name(config_.dtype)},
      {"op", op_label(config_)},
      {"iters", config_.iters},
      {"warmup", config_.warmup},
      {"trials", config_.trials},
      {"registered", config_.registered},
      {"timeout_s", config_.timeout_s},
      {"min_bytes", config_.min_bytes},
      {"max_bytes", config_.max_bytes},
      {"busbw_factor", busbw_factor(config_.collective, config_.ranks)},
      {"notes", notes_},
      {"rows", rows},
      {"wrong_total", wrong_total_},
      {"ok", error.empty() && wrong_total_ == 0},
      {"error", error.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(error)},
  };
  std::ofstream file(config_.json_path);
  file << doc.dump(2) << "\n";
  file.close();
  if (!file) {
    std::fprintf(stderr, "cohort-bench: cannot write --json %s: %s\n", config_.json_path.c_str(),
                 std::strerror(errno));
    return false;
  }
  return true;
}

void check_json_writable(const std::string& path) {
  if (path.empty()) return;
  // Append mode leaves an existing file as it is until the run overwrites it at the end.
  std::ofstream file(path, std::ios::app);
  if (!file) {
    throw InvalidArgument("--json " + path + ": cannot open for writing: " +
                          std::strerror(errno));
  }
}

}  // namespace cohort::bench
