// The order in which a sampler hands out a data set's indices in one epoch.
//
// Note [Portable shuffle]: every rank must build the same permutation, and a checkpoint written
// on one machine must resume on another, possibly built with another standard library. The
// engine std::mt19937_64 is specified bit for bit by the standard, but std::shuffle and
// std::uniform_int_distribution are not (libstdc++ and libc++ draw differently). So the
// Fisher-Yates loop and the bounded draw below are ours, and the permutation depends only on
// (seed, epoch, N). tests/torch/distributed_sampler_test.cc pins it.
// DistributedSampler and ElasticSampler share it, so an elastic run and a fixed one see the same
// permutation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace cohort::detail {

// 0..n-1, shuffled for (seed, epoch) when `shuffle`.
std::vector<size_t> epoch_order(size_t n, bool shuffle, uint64_t seed, uint64_t epoch);

}  // namespace cohort::detail
