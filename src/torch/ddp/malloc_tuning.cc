// glibc malloc settings for training loops (DistributedDataParallel calls this).
//
// Why: a training step frees and reallocates the same multi-megabyte activation and gradient
// blocks every iteration. With glibc's defaults those blocks are mmapped and unmapped each
// time, or the heap top is trimmed and regrown, and every step pays page faults for them: on
// the 2-core machines this was measured on, 15-20% of a step, and bimodal step times. Keeping
// them in a heap that is never trimmed removes that.
#include <malloc.h>

#include <cstdlib>
#include <mutex>

#include "cohort/core/env.h"
#include "cohort/torch/ddp/ddp.h"

namespace cohort {
namespace {

// Blocks below the mmap threshold come from the heap. Some glibc releases refuse thresholds
// above half their maximal heap size (32 MiB on 64-bit); then the largest they accept is used.
constexpr int kMmapThreshold = 1 << 30;
constexpr int kMmapThresholdFallback = 32 << 20;
constexpr int kTrimThreshold = 1 << 30;
constexpr int kTopPad = 256 << 20;

bool user_tuned_malloc() {
  for (const char* name :
       {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "GLIBC_TUNABLES"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

bool apply() {
  if (env_int("COHORT_MALLOC_TUNING").value_or(1) == 0 || user_tuned_malloc()) return false;
  const bool threshold_set = mallopt(M_MMAP_THRESHOLD, kMmapThreshold) == 1 ||
                             mallopt(M_MMAP_THRESHOLD, kMmapThresholdFallback) == 1;
  return threshold_set && mallopt(M_TRIM_THRESHOLD, kTrimThreshold) == 1 &&
         mallopt(M_TOP_PAD, kTopPad) == 1;
}

}  // namespace

bool tune_malloc_for_training() {
  static std::once_flag once;
  static bool applied = false;
  std::call_once(once, [] { applied = apply(); });
  return applied;
}

}  // namespace cohort
