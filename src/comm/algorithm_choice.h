// Which algorithm runs a collective: the caller's override, else the group's default
// (COHORT_ALGO), else a choice by message size and world size (docs/algorithms.md). A request
// for a variant a collective does not have falls back to the automatic choice.
#pragma once

#include <cstddef>

#include "cohort/comm/options.h"

namespace cohort {

enum class CollectiveKind : uint8_t {
  kAllreduce, kBroadcast, kReduce, kAllgather, kReduceScatter, kGather, kScatter, kAllToAll,
  kBarrier, kSend, kRecv
};
const char* collective_name(CollectiveKind kind);

// `requested` is the per-call override or the group default (kAuto when neither is set).
// `shared_memory`: every rank runs on this host and the group has a shared memory window.
Algorithm choose_algorithm(CollectiveKind kind, Algorithm requested, size_t bytes, int world,
                           bool shared_memory = false);

}  // namespace cohort
