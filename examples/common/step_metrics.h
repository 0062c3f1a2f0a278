// The figures of each training step, what an epoch's summary makes of them, and the --metrics
// file (JSON lines, or CSV when the name ends in .csv). Shared by the examples.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace cohort_examples {

struct StepRecord {
  int64_t epoch = 0;
  int64_t step = 0;     // global step count, from 1
  int64_t samples = 0;  // in the global batch
  double loss = 0;      // this rank's
  double lr = 0;
  double data_ms = 0;
  double forward_ms = 0;
  double backward_ms = 0;  // including the end-of-backward wait for communication
  double optimizer_ms = 0;
  double step_ms = 0;  // all of the above
  double exposed_comm_ms = 0;
  std::vector<double> bucket_latency_ms;  // in reduction order
  std::vector<double> bucket_comm_ms;     // the same reductions' time on the wire (not written)
  int64_t reduced_bytes = 0;  // of gradients this rank's reductions took in (all buckets)
  double loss_scale = 1;      // the GradScaler's scale the step used (1: no loss scaling)
  // --elastic (docs/elastic.md): the ranks that committed the step and their generation, so
  // that the file shows each change of membership. 0 in other runs (and left out of JSON lines).
  int world_size = 0;
  uint64_t generation = 0;
  double compute_ms() const { return step_ms - exposed_comm_ms; }
  double comm_fraction() const { return step_ms > 0 ? exposed_comm_ms / step_ms : 0; }
};

// Quantile q in [0, 1] of `values` (nearest rank); 0 when empty.
double quantile(std::vector<double> values, double q);

struct EpochSummary {
  int64_t steps = 0;
  double mean_loss = 0;
  double samples_per_s = 0;
  double step_ms_p50 = 0, step_ms_p95 = 0;
  double compute_ms = 0;       // median
  double exposed_comm_ms = 0;  // median
  double comm_fraction = 0;    // total exposed communication / total step time
  std::vector<double> bucket_p50_ms, bucket_p95_ms;
};
EpochSummary summarize(const std::vector<StepRecord>& steps);

// The lines of an epoch's summary that say where the time went: samples/s, step time, compute
// and exposed communication, then each bucket's allreduce latency (docs/fashion_mnist.md).
void print_epoch_timing(const EpochSummary& summary, int ranks);

// Appends one line per step; the CSV form starts with a header.
class MetricsFile {
 public:
  // Throws std::runtime_error naming the file. `append`: adds to what the file holds (the CSV
  // header only when it is empty): an elastic run's new rank 0 goes on with the file.
  explicit MetricsFile(const std::string& path, bool append = false);
  void write(const StepRecord& record);

 private:
  std::ofstream out_;
  bool csv_;
};

}  // namespace cohort_examples
