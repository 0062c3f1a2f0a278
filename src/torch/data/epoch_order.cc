#include "epoch_order.h"

#include <random>
#include <utility>

namespace cohort::detail {
namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

uint64_t splitmix64(uint64_t x) {
  x += kGolden;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in [0, bound), bound >= 1, by rejection: draws below 2^64 mod bound are refused so
// that the remaining range is a whole multiple of bound and `x % bound` has no bias.
uint64_t uniform_below(std::mt19937_64& engine, uint64_t bound) {
  const uint64_t threshold = (~bound + 1) % bound;  // 2^64 mod bound
  for (;;) {
    const uint64_t x = engine();
    if (x >= threshold) return x % bound;
  }
}

}  // namespace

// See Note [Portable shuffle].
std::vector<size_t> epoch_order(size_t n, bool shuffle, uint64_t seed, uint64_t epoch) {
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  if (!shuffle || n < 2) return order;
  // Mixing the epoch through splitmix64 before combining keeps nearby (seed, epoch) pairs
  // from seeding the engine with nearby values.
  std::mt19937_64 engine(splitmix64(seed ^ splitmix64(epoch)));
  for (size_t i = n - 1; i > 0; --i) {
    const size_t j = static_cast<size_t>(uniform_below(engine, static_cast<uint64_t>(i) + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

}  // namespace cohort::detail
