// Which part of each parameter a rank owns under ZeRO (Note [Shard layout]).
//
// Note [Shard layout]
// A bucket of gradients (or parameters) is one flat run of elements, padded with zeros to a
// multiple of the world size W, so that it splits into W equal blocks: rank r owns block r,
// elements [r * B, (r + 1) * B) with B = padded length / W. A reduce-scatter of the bucket
// gives rank r the average of its block; an all-gather of every rank's block rebuilds the
// bucket. A parameter at [offset, offset + numel) of its bucket may cross block boundaries: the
// part of it in rank r's block is its shard on r, empty where it has none there. Shards are
// cut from the first bucket layout, which stays fixed (the optimizer holds them).
#pragma once

#include <cstdint>

namespace cohort {

struct ShardRange {
  int64_t parameter_offset = 0;  // where the shard starts in the flattened parameter
  int64_t block_offset = 0;      // where it starts in the rank's block of the bucket
  int64_t length = 0;            // elements; 0 when the rank owns none of the parameter
};

// The part of [offset, offset + numel) of a bucket of bucket_numel elements (a multiple of
// world) that lies in rank's block.
ShardRange shard_of(int64_t offset, int64_t numel, int64_t bucket_numel, int world, int rank);

}  // namespace cohort
