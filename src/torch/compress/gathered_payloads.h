// The one collective of the quantizing and sparsifying hooks: every rank encodes its
// compensated gradient into a byte payload of the same length on every rank; one allgather
// brings all payloads to all ranks; each rank decodes them and averages them into the bucket.
// Every rank decodes the same payloads in rank order, so every rank writes the same average.
//
// Note [Compression on the device]
// The hooks encode and decode with torch ops on the bucket's device, so a CUDA bucket is
// compressed on the GPU and its payload (on that device) goes to the group's collective as is.
// Only random numbers are drawn on the CPU, from a CPU generator seeded with mix_seed, and
// copied over: the draws are then the same whatever the device. (Untested on CUDA: the
// tests run where libtorch has no CUDA.)
#pragma once

#include <torch/torch.h>

#include <functional>

#include "cohort/torch/ddp/comm_hook.h"

namespace cohort {

// Adds what one rank's payload stands for into `sum` (float32, the bucket's length).
using AccumulatePayload = std::function<void(const torch::Tensor& payload, torch::Tensor& sum)>;

// `payload`: 1-D uint8, the same length on every rank. The returned reduction's finishing step
// sums the decoded payloads, divides by the world size and writes the bucket.
PendingReduction allgather_payloads(Group& group, GradBucket& bucket, torch::Tensor payload,
                                    AccumulatePayload accumulate);

// Turns a rank's codes (uint8, one per element, each below 2^bits) and its float32 scale back
// into its contribution: scale times the value each code stands for.
using DecodeScaled = torch::Tensor (*)(const torch::Tensor& codes, const torch::Tensor& scale);

// allgather_payloads for the hooks whose payload is one float32 scale followed by the codes,
// `bits` bits each, packed (compress/bit_packing.h): EF-SignSGD (1 bit) and TernGrad (2 bits).
// `codes` holds one code per element of the bucket.
PendingReduction allgather_scaled_codes(Group& group, GradBucket& bucket,
                                        const torch::Tensor& scale, const torch::Tensor& codes,
                                        int bits, DecodeScaled decode);

// A float32 tensor's bytes as a uint8 tensor (a view when contiguous), and back.
torch::Tensor as_bytes(const torch::Tensor& tensor);
torch::Tensor bytes_as(const torch::Tensor& bytes, torch::ScalarType type);

// The float32 at byte `offset` of a uint8 tensor, as a 1-element tensor. Copied, because a
// payload's scale need not lie at an offset divisible by 4 inside the gathered tensor (a
// dtype view would refuse it).
torch::Tensor float_at(const torch::Tensor& bytes, int64_t offset);

}  // namespace cohort
