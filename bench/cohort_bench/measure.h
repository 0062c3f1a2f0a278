// The measurement loop one rank runs, the same on every rank of a run.
//
// For each size: `warmup` untimed collectives; then `trials` times: fresh inputs, a barrier,
// `iters` back-to-back collectives timed on this rank, and the time per op taken as the maximum
// over ranks (the method of the peers in shared/peers and of nccl-tests). The reported time is
// the median of the trials. Then the check: fresh closed-form inputs, one more collective, and
// every rank counts its wrong elements; the counts are summed over ranks.
#pragma once

#include <cstdint>

#include "bench_config.h"
#include "cohort/comm/group.h"
#include "report.h"
#include "watchdog.h"

namespace cohort::bench {

// Measures every size of the config. `reporter` is non-null on rank 0 only, which prints.
// Returns the number of wrong elements over all sizes and ranks (the same on every rank).
uint64_t run_benchmark(Group& group, const BenchConfig& config, Reporter* reporter,
                       Watchdog::Slot& progress);

}  // namespace cohort::bench
