#include "step_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>
#include <stdexcept>

namespace cohort_examples {

double quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(values.size())));
  return values[std::min(values.size() - 1, rank == 0 ? 0 : rank - 1)];
}

namespace {

template <typename Field>
std::vector<double> column(const std::vector<StepRecord>& steps, Field field) {
  std::vector<double> out;
  for (const StepRecord& s : steps) out.push_back(field(s));
  return out;
}

double sum(const std::vector<double>& values) {
  return std::accumulate(values.begin(), values.end(), 0.0);
}

void summarize_buckets(const std::vector<StepRecord>& steps, EpochSummary& summary) {
  size_t buckets = 0;
  for (const StepRecord& s : steps) buckets = std::max(buckets, s.bucket_latency_ms.size());
  for (size_t b = 0; b < buckets; ++b) {
    std::vector<double> latencies;
    for (const StepRecord& s : steps) {
      if (b < s.bucket_latency_ms.size()) latencies.push_back(s.bucket_latency_ms[b]);
    }
    summary.bucket_p50_ms.push_back(quantile(latencies, 0.5));
    summary.bucket_p95_ms.push_back(quantile(latencies, 0.95));
  }
}

}  // namespace

EpochSummary summarize(const std::vector<StepRecord>& steps) {
  EpochSummary summary;
  summary.steps = static_cast<int64_t>(steps.size());
  if (steps.empty()) return summary;
  const auto step_ms = column(steps, [](const StepRecord& s) { return s.step_ms; });
  const auto exposed = column(steps, [](const StepRecord& s) { return s.exposed_comm_ms; });
  const auto samples = column(steps, [](const StepRecord& s) { return double(s.samples); });
  summary.mean_loss =
      sum(column(steps, [](const StepRecord& s) { return s.loss; })) / double(steps.size());
  summary.samples_per_s = sum(samples) / (sum(step_ms) / 1000.0);
  summary.step_ms_p50 = quantile(step_ms, 0.5);
  summary.step_ms_p95 = quantile(step_ms, 0.95);
  summary.compute_ms =
      quantile(column(steps, [](const StepRecord& s) { return s.compute_ms(); }), 0.5);
  summary.exposed_comm_ms = quantile(exposed, 0.5);
  summary.comm_fraction = sum(exposed) / sum(step_ms);
  summarize_buckets(steps, summary);
  return summary;
}

void print_epoch_timing(const EpochSummary& s, int ranks) {
  std::printf(
      "  %.0f samples/s on %d rank(s); step %.1f ms median, %.1f ms p95; compute %.1f ms, "
      "exposed communication %.2f ms, s = %.3f\n",
      s.samples_per_s, ranks, s.step_ms_p50, s.step_ms_p95, s.compute_ms, s.exposed_comm_ms,
      s.comm_fraction);
  for (size_t b = 0; b < s.bucket_p50_ms.size(); ++b) {
    std::printf("  bucket %zu allreduce latency: %.2f ms p50, %.2f ms p95\n", b, s.bucket_p50_ms[b],
                s.bucket_p95_ms[b]);
  }
}

MetricsFile::MetricsFile(const std::string& path, bool append)
    : out_(path, append ? std::ios::app | std::ios::ate : std::ios::trunc),
      csv_(path.size() >= 4 && path.compare(path.size() - 4, 4, ".csv") == 0) {
  if (!out_) throw std::runtime_error("cannot write the metrics file '" + path + "'");
  if (csv_ && out_.tellp() == 0) {
    out_ << "epoch,step,samples,loss,lr,data_ms,forward_ms,backward_ms,optimizer_ms,step_ms,"
            "compute_ms,exposed_comm_ms,comm_fraction,reduced_bytes,loss_scale,bucket_latency_ms,"
            "world_size,generation\n";
  }
}

void MetricsFile::write(const StepRecord& r) {
  if (csv_) {
    std::string buckets;
    for (double ms : r.bucket_latency_ms)
      buckets += (buckets.empty() ? "" : ";") + std::to_string(ms);
    out_ << r.epoch << ',' << r.step << ',' << r.samples << ',' << r.loss << ',' << r.lr << ','
         << r.data_ms << ',' << r.forward_ms << ',' << r.backward_ms << ',' << r.optimizer_ms << ','
         << r.step_ms << ',' << r.compute_ms() << ',' << r.exposed_comm_ms << ','
         << r.comm_fraction() << ',' << r.reduced_bytes << ',' << r.loss_scale << ',' << buckets
         << ',' << r.world_size << ',' << r.generation << '\n';
  } else {
    nlohmann::json line = {{"epoch", r.epoch},
                           {"step", r.step},
                           {"samples", r.samples},
                           {"loss", r.loss},
                           {"lr", r.lr},
                           {"data_ms", r.data_ms},
                           {"forward_ms", r.forward_ms},
                           {"backward_ms", r.backward_ms},
                           {"optimizer_ms", r.optimizer_ms},
                           {"step_ms", r.step_ms},
                           {"compute_ms", r.compute_ms()},
                           {"exposed_comm_ms", r.exposed_comm_ms},
                           {"comm_fraction", r.comm_fraction()},
                           {"reduced_bytes", r.reduced_bytes},
                           {"loss_scale", r.loss_scale},
                           {"bucket_latency_ms", r.bucket_latency_ms}};
    if (r.generation > 0) {
      line["world_size"] = r.world_size;
      line["generation"] = r.generation;
    }
    out_ << line.dump() << '\n';
  }
  out_.flush();
}

}  // namespace cohort_examples
