// Rank 0's view of training as it runs: a progress bar with samples/s, loss and ETA when stdout
// is a terminal, else a plain line every `line_every` steps (logs, cohortrun's relay, CI).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace cohort_examples {

class Progress {
 public:
  Progress(bool enabled, int64_t line_every);
  void start_epoch(int64_t epoch, int64_t epochs, int64_t steps_in_epoch);
  // After each step of the epoch (step_in_epoch from 1).
  void update(int64_t step_in_epoch, int64_t samples, double loss);
  // Ends the bar's line before the epoch's summary is printed.
  void finish_epoch();

 private:
  void draw_bar(int64_t step, double rate, double loss, double eta_s);
  void print_line(int64_t step, double rate, double loss, double eta_s);

  bool enabled_;
  bool terminal_;
  int64_t line_every_;
  int64_t epoch_ = 0, epochs_ = 0, steps_ = 0;
  int64_t samples_ = 0;
  double loss_sum_ = 0;
  int64_t loss_count_ = 0;
  std::chrono::steady_clock::time_point started_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace cohort_examples
