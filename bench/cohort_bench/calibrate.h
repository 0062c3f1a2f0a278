// cohort-bench --calibrate: measures the cost model's parameters (src/comm/cost_model.h) on
// this machine, prints them with the algorithm the model then picks per size, and writes the
// file every group of this user reads when it is made (docs/algorithms.md, "Cost model").
//
//   tcp alpha     direct allreduce of 4 bytes over TCP: one message each way
//   tcp beta      ring allreduce of 64 MiB over TCP, less its latency and reduction terms
//   reduce gamma  a float32 sum of 16 MiB into 16 MiB on one rank
//   shm alpha     shared-memory allreduce of 4 bytes: two rounds
//   shm beta      shared-memory allreduce of 64 MiB, less its round and reduction terms
#pragma once

#include "bench_config.h"
#include "cohort/comm/group.h"
#include "watchdog.h"

namespace cohort::bench {

// Collective over the group. On rank 0 (`report`), prints the result and writes the model to
// config.calibrate_path (default: CostModel::default_path()).
void run_calibration(Group& group, const BenchConfig& config, bool report,
                     Watchdog::Slot& progress);

}  // namespace cohort::bench
