// What sharded checkpoints (parameter_shard.cc's fsdp_holdings) need of a
// FullyShardedDataParallel beyond its public API: where each parameter's part of this rank's
// shard lies (frozen parameters included), which ranks hold the same shards, and gathering
// again the units that are gathered once a load has written the shards.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "cohort/torch/shard/fsdp.h"
#include "shard/flat_unit.h"

namespace cohort::detail {

// One parameter of a unit and this rank's part of it.
struct FsdpParameterPart {
  torch::Tensor parameter;  // the module's own parameter
  // range.parameter_offset, range.length: the part, in the flattened parameter; tensor: a 1-D
  // view of it in this rank's shard (for a trainable parameter, the tensor of fsdp.parameters())
  ShardPart part;
};

class FsdpAccess {
 public:
  // Every parameter of every unit, unit after unit. Empty under kNoShard.
  static std::vector<FsdpParameterPart> parts(const FullyShardedDataParallel& fsdp);
  // How many ranks hold the same shards (kHybridShard: one per node; else 1), and this rank's
  // index among them.
  static int replicas(const FullyShardedDataParallel& fsdp);
  static int replica(const FullyShardedDataParallel& fsdp);
  // Every unit gathered now (or being gathered) is gathered again from the shards, so that it
  // holds what was written into them. Collective over the shard group.
  static void regather(const FullyShardedDataParallel& fsdp);
  // Without communicating: every parameter whole again, in memory of its own holding zeros,
  // and the destructor gathers nothing. For a wrapper whose group is broken (ElasticTrainer
  // after a failure: the values come back from the shards the survivors hold). `cause`, the
  // failure, breaks the subgroups too, so that their collectives in flight end before their
  // memory goes (null: waits for them).
  static void abandon(FullyShardedDataParallel& fsdp, std::exception_ptr cause);
};

}  // namespace cohort::detail
