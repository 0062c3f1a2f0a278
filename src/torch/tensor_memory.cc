// The counting CPU allocator behind include/cohort/torch/tensor_memory.h.

#include "cohort/torch/tensor_memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace cohort {

namespace {

std::atomic<int64_t> g_current{0};
std::atomic<int64_t> g_peak{0};

void note_peak(int64_t now) {
  int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

// The base allocator's DataPtr and size of every live allocation, by address: libtorch's
// raw_allocate() requires a DataPtr's context to be its data, so the bookkeeping cannot ride in
// the context.
class LiveAllocations {
 public:
  void add(void* data, c10::DataPtr base, int64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    live_.emplace(data, Entry{std::move(base), bytes});
  }
  // Frees `data`'s base allocation (outside the lock) and uncounts it.
  void release(void* data) {
    Entry entry;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = live_.find(data);
      if (it == live_.end()) return;
      entry = std::move(it->second);
      live_.erase(it);
    }
    g_current.fetch_sub(entry.bytes, std::memory_order_relaxed);
  }

 private:
  struct Entry {
    c10::DataPtr base;
    int64_t bytes = 0;
  };
  std::mutex mutex_;
  std::unordered_map<void*, Entry> live_;
};

LiveAllocations& live_allocations() {
  static auto* live = new LiveAllocations();  // never destroyed: tensors outlive static dtors
  return *live;
}

void release(void* data) { live_allocations().release(data); }

class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}

  // Both forms: libtorch 1.13's Allocator::allocate is const, later releases' is not; the one
  // that matches the base class overrides it.
  c10::DataPtr allocate(size_t bytes) const { return counted(bytes); }
  c10::DataPtr allocate(size_t bytes) { return counted(bytes); }

  c10::DeleterFnPtr raw_deleter() const override { return &release; }

  // Pure in libtorch 2.x's Allocator (an ordinary member on 1.13).
  void copy_data(void* destination, const void* source, std::size_t count) const {
    std::memcpy(destination, source, count);
  }

 private:
  c10::DataPtr counted(size_t bytes) const {
    c10::DataPtr base = base_->allocate(bytes);
    void* data = base.get();
    const c10::Device device = base.device();
    if (data == nullptr) return base;  // nothing to count (0 bytes)
    live_allocations().add(data, std::move(base), static_cast<int64_t>(bytes));
    const int64_t size = static_cast<int64_t>(bytes);
    note_peak(g_current.fetch_add(size, std::memory_order_relaxed) + size);
    return {data, data, &release, device};
  }

  c10::Allocator* base_;
};

std::once_flag g_installed;
std::atomic<bool> g_tracking{false};

}  // namespace

void track_cpu_tensor_memory() {
  std::call_once(g_installed, [] {
    // Never destroyed: libtorch keeps using it until the process ends.
    auto* counting = new CountingAllocator(c10::GetCPUAllocator());
    // Priority: above the default CPU allocator's 0, so that it takes the place. An allocator
    // of a higher priority installed by someone else keeps its place: then nothing is counted.
    c10::SetCPUAllocator(counting, /*priority=*/1);
    g_tracking = c10::GetCPUAllocator() == counting;
  });
}

bool tracking_cpu_tensor_memory() { return g_tracking; }

int64_t cpu_tensor_bytes() { return g_current.load(std::memory_order_relaxed); }

int64_t peak_cpu_tensor_bytes() { return g_peak.load(std::memory_order_relaxed); }

void reset_peak_cpu_tensor_bytes() { g_peak.store(cpu_tensor_bytes(), std::memory_order_relaxed); }

std::shared_ptr<void> count_foreign_cpu_tensor_bytes(int64_t bytes) {
  const int64_t counted = g_tracking ? bytes : 0;
  note_peak(g_current.fetch_add(counted, std::memory_order_relaxed) + counted);
  return std::shared_ptr<void>(
      nullptr, [counted](void*) { g_current.fetch_sub(counted, std::memory_order_relaxed); });
}

}  // namespace cohort
