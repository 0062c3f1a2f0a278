// cohort-bench --calibrate: measures the cost model's parameters on this machine
// (cohort::calibrate, include/cohort/comm/calibration.h, which says what each measurement is),
// prints them with the algorithm the model then picks per size, and writes the file every group
// of this user reads when it is made (docs/algorithms.md, "Cost model").
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
