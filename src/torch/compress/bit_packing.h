// Packing small codes (1, 2 or 4 bits each) into bytes, for the quantizing hooks: the sign
// hook's 1-bit signs, TernGrad's 2-bit ternary codes. Code j of a byte sits in bits
// [j * bits, (j + 1) * bits), lowest first; the last byte is padded with zero codes.
// Torch ops only, so codes on a CUDA device are packed there.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace cohort {

// Bytes that `count` codes of `bits` bits take: ceil(count * bits / 8).
int64_t packed_size(int64_t count, int bits);

// `codes`: 1-D uint8, each below 2^bits (bits: 1, 2 or 4). Returns packed_size(numel, bits)
// uint8 bytes on codes' device. Larger codes would spill into their neighbours: the caller
// guarantees the range (not checked: it would cost a pass over the codes).
torch::Tensor pack_codes(const torch::Tensor& codes, int bits);

// The inverse: the first `count` codes of `packed` as 1-D uint8.
torch::Tensor unpack_codes(const torch::Tensor& packed, int64_t count, int bits);

}  // namespace cohort
