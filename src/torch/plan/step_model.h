// The planner's arithmetic (docs/planner.md, "The model"): a configuration's step time, from
// when each bucket's or unit's collective can start and how long the cost model says it takes,
// and its peak memory per rank.
//
// Note [Planned step]
// Compute runs on one timeline and the collectives on another (a group runs its collectives one
// at a time, in the order they were issued). DDP and ZeRO: backward makes each bucket ready when
// the last of its parameters' gradients is (ComputeProfile::gradient_ready); its allreduce (ZeRO:
// reduce-scatter) starts then, or when the one before it ends. What runs past the end of
// backward is exposed. ZeRO then steps its block bucket by bucket, each bucket's all-gather after
// its step. FSDP: each unit's all-gather is issued when the unit before it starts computing
// (prefetch), and the unit computes once it has its parameters; in backward (reverse order)
// FULL_SHARD gathers each unit again but the last forward used, which stays gathered, and each
// unit's reduce-scatter is issued when its backward ends. Without prefetch
// (PlanConfig::fsdp_prefetch) a unit's all-gather is issued when the unit before it has
// finished: in backward behind that unit's reduce-scatter. The units are those of the layout
// the configuration names (ModelSpec::with_units).
// HYBRID_SHARD's unit collectives run inside a node; at the end of backward, unit by unit in
// the order they were reduced, each rank's shard is averaged with its peers on the other nodes
// (FullyShardedDataParallel::Impl::average_over_replicas, which waits for each: not overlapped
// with backward; a node's L ranks at once, sharing its link: timed as one allreduce of the whole
// unit across the nodes). The optimizer steps once every reduction has ended. FSDP's forward and
// backward take ComputeProfile::sharded_compute_ratio times the profile's (its interception and
// copies), and a unit's share of them is the part of backward its gradients' ready times measured
// (compute_shares). DDP under local SGD has no communication in backward and averages the
// parameters (one allreduce) every period steps after the optimizer step: its step is the mean
// over a period. DDP with PowerSGD
// (PlanConfig::powersgd_rank) allreduces each bucket's first round (P and the tensors sent whole)
// when the bucket is ready; its arithmetic (ComputeProfile::powersgd, measured) follows backward
// on compute's timeline, and the second rounds (Q) run bucket by bucket after it.
#pragma once

#include <cstdint>
#include <vector>

#include "cohort/torch/plan/planner.h"

namespace cohort::detail {

bool uses_buckets(StrategyKind strategy);

struct StepTimes {
  double compute_s = 0;
  double communication_s = 0;
  double exposed_s = 0;
  int64_t shm_bytes = 0;
  int64_t network_bytes = 0;
  std::vector<double> reduction_s;  // each gradient reduction's time, in order
};

// DDP's and ZeRO's buckets as the reducer cuts them after its first iteration (in the order
// the gradients are ready), as parameter indices.
std::vector<std::vector<size_t>> planned_buckets(const ModelSpec& model,
                                                 const ComputeProfile& compute,
                                                 const PlanConfig& config);

StepTimes predict_step(const ModelSpec& model, const ComputeProfile& compute,
                       const MachineSpec& machine, const PlanConfig& config);

int64_t predict_peak_memory(const ModelSpec& model, const ComputeProfile& compute,
                            const MachineSpec& machine, const PlanConfig& config);

}  // namespace cohort::detail
