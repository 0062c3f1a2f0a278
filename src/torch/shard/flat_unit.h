// One FSDP unit's memory (Note [FSDP flat units]).
//
// Note [FSDP flat units]
// A unit's parameters are laid end to end in one flat tensor, padded with zeros to a multiple
// of the world size W: rank r owns elements [r * S, (r + 1) * S), S = padded / W, as a tensor
// of its own (the shard: the master weights the optimizer updates, through one 1-D view per
// trainable parameter, empty where the rank owns none of it; Note [Shard layout]). Each module
// parameter keeps its TensorImpl (the module's fields and the user's references stay valid)
// but its data is set once to a view of the flat tensor; the flat tensor's storage is released
// between uses and allocated again by a gather, so the parameters keep their shapes while
// holding no memory. A gather all-gathers every rank's shard (cast to the compute dtype) into
// the flat storage.
//
// Note [FSDP param dtype]
// With MixedPrecisionPolicy::param_dtype the compute dtype differs from the shard's: the flat
// tensor, and so every parameter viewing it, has the compute dtype (set_data changes a
// parameter's dtype but keeps its TensorImpl), the shard is cast to it before the all-gather
// (which so moves param_dtype's bytes), and gradients arrive in it (the gradient node's input
// metadata is taken from the parameters when it is made, in forward). A unit may be switched,
// while freed, to gather in the shard's own dtype instead (set_full_precision): the same
// storage, allocated at the other element size, viewed by a flat tensor and parameters of the
// other dtype. full_parameters() and the destructor do that so that the model is seen, and
// left, in its own dtype with the master values, not their rounded copies. A view of a
// parameter taken in one dtype must not be kept across a switch (it would read the storage
// with the wrong element size).
//
// Note [FSDP CPU offload]
// With FsdpOptions::cpu_offload (a model on a CUDA device), the shard is kept in page-locked
// host memory, and so are the views the optimizer holds, their gradients and the optimizer's
// state (torch's optimizers make their state where the parameters are): only the gathered
// units and the gradients in flight take device memory. A gather first copies the shard to
// the device (asynchronously from page-locked memory, on the caller's stream: a prefetch's copy
// overlaps the compute of the unit before), cast to the compute dtype, then all-gathers it
// there; a reduce-scatter's block is copied back to host memory when it lands in the shards'
// .grad, and the optimizer steps on the CPU.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "cohort/comm/group.h"
#include "shard/shard_layout.h"
#include "shard/unit_plan.h"

namespace cohort {

// A trainable parameter's part of this rank's shard.
struct ShardPart {
  size_t parameter = 0;  // index in the unit's parameters
  ShardRange range;      // block_offset: where it starts in the shard
  torch::Tensor tensor;  // 1-D view of the shard; what the optimizer holds
};

class FlatUnit {
 public:
  enum class State { kFreed, kGathering, kGathered };

  // The parameters must hold the values every rank starts from. compute_dtype: the dtype the
  // gathered parameters have (the parameters' own unless mixed precision asks otherwise).
  // offload: the shard in page-locked host memory (Note [FSDP CPU offload]).
  FlatUnit(UnitPlan plan, int world, int rank, torch::Dtype compute_dtype, bool offload = false);

  const std::string& name() const { return plan_.name; }
  const std::vector<UnitParameter>& parameters() const { return plan_.parameters; }
  const std::vector<ShardPart>& shard_parts() const { return parts_; }
  // Parameter p's part of this rank's shard, trainable or not (for a trainable one, its entry
  // of shard_parts(); for a frozen one, a view cut now).
  ShardPart part_of(size_t p) const;
  // Trainable parameters in order: the inputs of the unit's gradient node.
  const std::vector<size_t>& trainable() const { return trainable_; }
  const c10::StorageImpl* storage() const { return flat_.storage().unsafeGetStorageImpl(); }
  State state() const { return state_; }
  // The all-gather in flight (kGathering), else null.
  const std::shared_ptr<Work>& gather_work() const { return gather_; }
  int64_t padded_numel() const { return padded_; }
  int64_t shard_numel() const { return shard_.numel(); }
  size_t gathered_bytes() const { return padded_ * flat_.element_size(); }
  size_t shard_bytes() const { return shard_.nbytes(); }
  torch::Dtype shard_dtype() const { return shard_.scalar_type(); }
  // Where the shard is: the parameters' device, or the CPU under offload.
  torch::Device shard_device() const { return shard_.device(); }
  // The dtype the parameters have (gathered or not): the compute dtype, or the shard's while
  // set_full_precision(true).
  torch::Dtype gathered_dtype() const { return flat_.scalar_type(); }

  // Whether a gather fills the parameters in the shard's dtype (full) or the compute dtype
  // (Note [FSDP param dtype]). Only while freed.
  void set_full_precision(bool full);

  // kFreed -> kGathering: allocates the flat storage and starts the all-gather (-> kGathered
  // at once over a group of one rank, which copies the shard).
  void start_gather(Group& group, const CollectiveOptions& options);
  // -> kGathered, waiting for the all-gather if one is in flight (rethrows its error).
  void wait_gathered();
  // -> kFreed (waits for an all-gather in flight first, ignoring its error).
  void release();
  // Fills the flat storage with zeros instead of gathering it (after a failed gather, so that
  // an operator already committed to run reads zeros rather than freed memory).
  void fill_with_zeros();
  // Copies this rank's block of the gathered parameters into the shard.
  void write_back_shard();

  // The gradients of trainable() (undefined: no gradient) laid out as the flat tensor, in
  // `dtype`, padding zeroed.
  torch::Tensor flatten_gradients(const std::vector<torch::Tensor>& gradients,
                                  torch::Dtype dtype) const;

 private:
  void alias_parameters();
  ShardPart cut_part(size_t p, int world, int rank) const;
  void cut_shard(int world, int rank);

  UnitPlan plan_;
  int rank_;
  torch::Dtype compute_dtype_;
  std::vector<int64_t> offsets_;  // of each parameter in the flat tensor
  std::vector<size_t> trainable_;
  int64_t padded_ = 0;
  torch::Tensor flat_;     // compute dtype; storage released while kFreed
  torch::Tensor shard_;    // this rank's block, the parameters' dtype
  torch::Tensor staging_;  // the shard cast to the compute dtype while an all-gather reads it
  std::vector<ShardPart> parts_;
  State state_ = State::kFreed;
  std::shared_ptr<Work> gather_;
};

}  // namespace cohort
