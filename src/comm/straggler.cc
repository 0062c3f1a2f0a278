#include "cohort/comm/straggler.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <thread>

#include "cohort/comm/group.h"
#include "cohort/core/env.h"
#include "cohort/core/error.h"

namespace cohort {

// Test and benchmark only (docs/env.md): "R:F[,R:F...]", rank R computes F times as long.
constexpr const char* kSlowRanksVar = "COHORT_SLOW_RANKS";

void StepTimes::add(double ms) {
  sum_ms_ += ms;
  ++count_;
}

StepTimes::Report StepTimes::report(Group& group) {
  std::vector<double> means(static_cast<size_t>(group.size()));
  double mine = count_ > 0 ? sum_ms_ / static_cast<double>(count_) : 0.0;
  group.allgather(ConstBuffer(&mine, 1, DType::kFloat64), make_buffer(means));
  sum_ms_ = 0;
  count_ = 0;
  return of(std::move(means));
}

StepTimes::Report StepTimes::of(std::vector<double> mean_ms) {
  Report report;
  report.mean_ms = std::move(mean_ms);
  if (report.mean_ms.empty()) return report;
  std::vector<double> sorted = report.mean_ms;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  const auto slowest = std::max_element(report.mean_ms.begin(), report.mean_ms.end());
  report.slowest_rank = static_cast<int>(slowest - report.mean_ms.begin());
  report.slowest_ratio = median > 0 ? *slowest / median : 0.0;
  return report;
}

std::string StepTimes::Report::describe() const {
  std::ostringstream out;
  out << "compute ms per step by rank:";
  char value[32];
  for (double ms : mean_ms) {
    std::snprintf(value, sizeof value, " %.1f", ms);
    out << value;
  }
  std::snprintf(value, sizeof value, "%.2f", slowest_ratio);
  out << "; slowest: rank " << slowest_rank << ", " << value << "x the median";
  return out.str();
}

SlowDown::SlowDown(double factor) : factor_(factor) {}

SlowDown SlowDown::from_env(int rank) {
  const auto value = env_string(kSlowRanksVar);
  if (!value || value->empty()) return SlowDown();
  std::istringstream entries(*value);
  for (std::string entry; std::getline(entries, entry, ',');) {
    int slow_rank = -1;
    double factor = 0;
    char tail = 0;
    if (std::sscanf(entry.c_str(), "%d:%lf%c", &slow_rank, &factor, &tail) != 2 ||
        slow_rank < 0 || factor < 1.0) {
      throw ConfigError(std::string(kSlowRanksVar) + "='" + *value + "': '" + entry +
                        "' is not RANK:FACTOR with a rank >= 0 and a factor >= 1 (e.g. 2:2.0)");
    }
    if (slow_rank == rank) return SlowDown(factor);
  }
  return SlowDown();
}

void SlowDown::after_compute(Clock::duration compute) const {
  if (factor_ <= 1.0) return;
  std::this_thread::sleep_for(
      std::chrono::duration_cast<Clock::duration>(compute * (factor_ - 1.0)));
}

}  // namespace cohort
