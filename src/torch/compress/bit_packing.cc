#include "compress/bit_packing.h"

#include "cohort/core/check.h"

namespace cohort {
namespace {

int codes_per_byte(int bits) {
  COHORT_INTERNAL_ASSERT(bits == 1 || bits == 2 || bits == 4, "codes of 1, 2 or 4 bits");
  return 8 / bits;
}

// The shift of each position in a byte: 0, bits, 2 * bits, ...
torch::Tensor shifts(int bits, const torch::Device& device) {
  return torch::arange(0, 8, bits, torch::TensorOptions().dtype(torch::kUInt8).device(device));
}

}  // namespace

int64_t packed_size(int64_t count, int bits) {
  const int per_byte = codes_per_byte(bits);
  return (count + per_byte - 1) / per_byte;
}

torch::Tensor pack_codes(const torch::Tensor& codes, int bits) {
  const int per_byte = codes_per_byte(bits);
  const int64_t count = codes.numel();
  const int64_t bytes = packed_size(count, bits);
  auto padded = torch::zeros({bytes * per_byte}, codes.options().dtype(torch::kUInt8));
  padded.narrow(0, 0, count).copy_(codes.reshape({-1}));
  // The codes of a byte occupy disjoint bits, so their sum is their bitwise or; the sum is
  // taken in uint8 (it never exceeds 255).
  return padded.view({bytes, per_byte})
      .bitwise_left_shift(shifts(bits, codes.device()))
      .sum(1, /*keepdim=*/false, torch::kUInt8);
}

torch::Tensor unpack_codes(const torch::Tensor& packed, int64_t count, int bits) {
  const int per_byte = codes_per_byte(bits);
  COHORT_INTERNAL_ASSERT(packed.numel() * per_byte >= count, "too few packed bytes");
  const auto mask = static_cast<int64_t>((1 << bits) - 1);
  return packed.reshape({-1, 1})
      .bitwise_right_shift(shifts(bits, packed.device()))
      .bitwise_and(mask)
      .reshape({-1})
      .narrow(0, 0, count);
}

}  // namespace cohort
