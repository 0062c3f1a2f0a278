// Measuring the cost model's parameters on this machine: what `cohort-bench --calibrate` runs
// (docs/algorithms.md, "Cost model"; docs/bench.md). The file written to cost_model_path() is
// what every group made later reads for its automatic algorithm choice.
//
//   auto calibration = cohort::calibrate(*group);               // collective
//   if (group->rank() == 0) cohort::write_calibration(calibration, cohort::cost_model_path());
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "cohort/comm/group.h"

namespace cohort {

struct Calibration {
  double tcp_alpha_s = 0;          // direct allreduce of 4 bytes over TCP: one message each way
  double tcp_beta_s_per_byte = 0;  // ring allreduce of 64 MiB, less its latency and reductions
  double shm_alpha_s = 0;          // one round through a node's shared memory window
  double shm_beta_s_per_byte = 0;  // shared-memory allreduce of 64 MiB, less rounds, reductions
  double gamma_s_per_byte = 0;     // a float32 sum of 16 MiB into 16 MiB on one rank
  // False where the ranks share no memory window: shm_* are then the built-in defaults.
  bool shm_measured = false;

  // The cost model file's text, as groups read it (COHORT_COST_MODEL).
  std::string to_json() const;
  // The automatic allreduce these numbers give, by bytes per rank, for a few group shapes:
  // lines that start with '#', for a reader to see the crossovers at once.
  std::string choice_table() const;
};

// Lets a caller watch a calibration (a watchdog): `enter` before each measured collective
// (what it is, a string literal, and its bytes per rank), `tick` after each call. Either may be
// empty.
struct CalibrationProgress {
  std::function<void(const char* what, size_t bytes)> enter;
  std::function<void()> tick;
};

// Collective over `group`, which needs 2 or more ranks (InvalidArgument otherwise): measures
// every field, the shared-memory ones where the group allreduces through shared memory. Takes
// seconds (64 MiB allreduces); every rank gets the same numbers (the slowest rank's).
Calibration calibrate(Group& group, const CalibrationProgress& progress = {});

// Where groups read the calibration: COHORT_COST_MODEL, else
// $XDG_CACHE_HOME/cohort/cost_model.json, else ~/.cache/cohort/cost_model.json.
std::string cost_model_path();

// Writes calibration.to_json() to `path`, creating its directory; ConfigError when it cannot.
void write_calibration(const Calibration& calibration, const std::string& path);

}  // namespace cohort
