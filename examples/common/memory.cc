#include "memory.h"

#include <sys/resource.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "cohort/torch/tensor_memory.h"

namespace cohort_examples {

int64_t peak_rss_bytes() {
  struct rusage usage {};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports kilobytes
}

void keep_freed_memory() {
#ifdef __GLIBC__
  constexpr int kLargestMmapThreshold = 32 * 1024 * 1024;  // glibc's HEAP_MAX_SIZE / 2
  constexpr int kTrimThreshold = 1024 * 1024 * 1024;
  ::mallopt(M_MMAP_THRESHOLD, kLargestMmapThreshold);
  ::mallopt(M_TRIM_THRESHOLD, kTrimThreshold);
#endif
}

namespace {
// One training loop per process.
int64_t g_step_memory_base = 0;
int64_t g_step_memory_peak = 0;
int64_t g_before_model = 0;
}  // namespace

void mark_memory_before_model() {
  g_before_model = cohort::cpu_tensor_bytes();
}

int64_t training_peak_bytes() {
  if (!cohort::tracking_cpu_tensor_memory()) return 0;
  return g_step_memory_base + g_step_memory_peak - g_before_model;
}

void start_counting_step_memory() {
  g_step_memory_base = cohort::cpu_tensor_bytes();
  cohort::reset_peak_cpu_tensor_bytes();
}

void stop_counting_step_memory() {
  if (cohort::tracking_cpu_tensor_memory())
    g_step_memory_peak = cohort::peak_cpu_tensor_bytes() - g_step_memory_base;
}

int64_t step_memory_peak_bytes() {
  return g_step_memory_peak;
}

}  // namespace cohort_examples
