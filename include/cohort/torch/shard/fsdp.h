// cohort::FullyShardedDataParallel: ZeRO stage 3 / FSDP for a libtorch training loop. The model
// is cut into units (submodules); between uses each unit's parameters exist on a rank only as
// that rank's 1/W shard. A unit is gathered just before an operation reads one of its
// parameters, freed after, gathered again for its backward, and its gradients are
// reduce-scattered as soon as its backward is done. Neither the model class nor its forward()
// changes:
//
//   auto model = std::make_shared<Gpt>(...);      // e.g. blocks in a torch::nn::ModuleList
//   cohort::FsdpOptions options;                   // FULL_SHARD, units = the children of every
//   cohort::FullyShardedDataParallel fsdp(model, group, options);  // Sequential and ModuleList
//   torch::optim::AdamW optimizer(fsdp.parameters(), torch::optim::AdamWOptions(1e-3));
//   for (auto& batch : *loader) {                  // this rank's shard of the data
//     optimizer.zero_grad();
//     loss_fn(model->forward(batch.data), batch.target).backward();
//     cohort::clip_grad_norm(fsdp, 1.0);           // optional
//     fsdp.step(optimizer);                        // = optimizer.step() on the shards, checked
//   }
//
// How (docs/sharding.md, Note [FSDP interception] in src/torch/shard/fsdp.cc): libtorch has no
// module hooks, so cohort watches the operators instead. While the object lives, an observer on
// the constructing thread sees every operator's inputs before it runs; an input over a unit's
// storage gathers that unit first. The operators recorded in forward are remembered by their
// autograd sequence numbers, so the same observer gathers a unit again just before the
// backward nodes that need it. Every parameter of a unit sends its gradient to one node of
// the unit's own, which reduce-scatters them when the last has arrived.
//
// Limits: use the model from the thread that built this object (its autograd threads
// included); read parameters through torch operators (not data_ptr() or accessors outside
// one); every rank must run the same forwards and backwards (a forward on one rank only waits
// for the others until the group's timeout). The parameters' .grad stay undefined: the
// averaged gradients are the shards' .grad.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cohort/comm/group.h"
#include "cohort/comm/timeline.h"
#include "cohort/torch/ddp/ddp.h"
#include "cohort/torch/sharded_parameters.h"

namespace cohort {

namespace detail {
class FsdpAccess;  // what sharded checkpoints read of the shards (src/torch/shard/fsdp_access.h)
}

enum class ShardingStrategy {
  // Parameters, gradients and optimizer state sharded; a unit's parameters are freed after its
  // forward and after its backward (ZeRO-3).
  kFullShard,
  // As kFullShard, but a unit gathered in a forward with gradients on stays gathered until its
  // backward is done: one all-gather per unit and step instead of two (ZeRO-2's memory for
  // parameters during the step, ZeRO-3's between steps).
  kShardGradOp,
  // Nothing sharded: DistributedDataParallel underneath (same results and collectives).
  kNoShard,
  // kFullShard inside each node (the group's node_id topology), replicas across nodes: the
  // gradients are reduce-scattered within the node, then allreduced across the nodes.
  kHybridShard,
};
const char* sharding_strategy_name(ShardingStrategy strategy);

// Which submodules become units when FsdpOptions::units is empty. A module that matches
// becomes a unit and its own submodules are not searched further. Parameters outside every
// unit form the root unit.
struct AutoWrapPolicy {
  // The children of every torch::nn::Sequential and torch::nn::ModuleList.
  bool container_children = true;
  // Any submodule holding at least this many parameter elements (its own and its
  // submodules'), when > 0.
  int64_t min_parameters = 0;
  // Any submodule for which this returns true (name: the path from the model, "blocks.3").
  std::function<bool(const std::string& name, const torch::nn::Module& module)> predicate;
};

// As PyTorch FSDP's MixedPrecision (docs/fsdp.md, "Mixed precision").
struct MixedPrecisionPolicy {
  // dtype the forward and backward compute with (e.g. torch::kBFloat16); undefined: the
  // parameters' own. The shards stay in the parameters' dtype (the master weights the
  // optimizer updates); a unit is gathered by all-gathering the shards cast to param_dtype,
  // and the module's parameters are param_dtype tensors while this object lives, except inside
  // full_parameters(), which shows them in their own dtype with the master values, as the
  // destructor leaves them. Feed the model inputs of param_dtype. Buffers keep their dtype.
  // Not with kNoShard (an error).
  c10::optional<torch::Dtype> param_dtype;
  // dtype the gradients are reduce-scattered in (e.g. torch::kBFloat16: half the bytes on the
  // wire); the averaged blocks are cast back to the shards' dtype. Undefined: param_dtype, or
  // the parameters' own.
  c10::optional<torch::Dtype> reduce_dtype;
};

struct FsdpOptions {
  ShardingStrategy strategy = ShardingStrategy::kFullShard;
  // The units, by submodule path ("encoder.layers.0"); empty: chosen by auto_wrap. A path
  // named twice, or a module that is itself or inside another unit under another name, is an
  // error.
  std::vector<std::string> units;
  AutoWrapPolicy auto_wrap;
  // While a unit is in use, the all-gather of the unit that came next in the previous
  // iteration's forward (backward) order runs in the background.
  bool forward_prefetch = true;
  bool backward_prefetch = true;
  // Rank 0's buffers (BatchNorm statistics) copied to every rank at the end of each
  // synchronized backward, so that every rank ends the step with the same model.
  bool broadcast_buffers = true;
  MixedPrecisionPolicy mixed_precision;
  // For a model on a CUDA device: keep this rank's shards (the master weights), their
  // gradients and the optimizer's state in page-locked host memory, and step the optimizer on
  // the CPU; only the gathered units and the gradients in flight take device memory. Each
  // gather copies the shard to the device first (asynchronously: a prefetch's copy overlaps
  // the compute before it), each reduce-scatter's block is copied back (Note [FSDP CPU
  // offload]). FULL_SHARD, SHARD_GRAD_OP and HYBRID_SHARD only. A model on the CPU has nothing
  // to offload: asking for it is an error.
  bool cpu_offload = false;
  // Where the all-gathers ("unit NAME all-gather") and reduce-scatters ("unit NAME
  // reduce-scatter") are recorded, on the "comm" track; may be null.
  std::shared_ptr<Timeline> timeline;
  // kNoShard only: DistributedDataParallel's options.
  DdpOptions ddp;
};

// Bytes one rank holds for the model's training state (FullyShardedDataParallel::memory()).
struct FsdpMemoryReport {
  size_t parameter_shards = 0;  // this rank's shards of every unit (the master weights)
  size_t gathered = 0;          // units gathered now (full parameters)
  size_t peak_gathered = 0;     // the most gathered at once since construction or reset_peak
  size_t gradients = 0;         // this rank's averaged gradient shards + buffers in flight now
  size_t peak_gradients = 0;    // at most: the shards + three units' flat gradients + 1/W of
                                // the model's blocks waiting to land (docs/fsdp.md, "Memory")
  size_t optimizer_state = 0;   // of the optimizer passed in (0 without one)
  size_t model_state() const { return parameter_shards + gathered + gradients + optimizer_state; }
};

class FullyShardedDataParallel {
 public:
  // Collective: the same model on every rank (checked, naming the first parameter that
  // differs), rank 0's parameters and buffers copied to all, the units cut and every
  // parameter's memory released (kNoShard: as DistributedDataParallel). The parameters must be
  // contiguous and, within a unit, of one dtype and device. Tunes malloc as
  // DistributedDataParallel does (tune_malloc_for_training).
  FullyShardedDataParallel(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<Group> group,
                           FsdpOptions options = {});
  template <typename ModuleType>
  FullyShardedDataParallel(const torch::nn::ModuleHolder<ModuleType>& module,
                           std::shared_ptr<Group> group, FsdpOptions options = {})
      : FullyShardedDataParallel(std::static_pointer_cast<torch::nn::Module>(module.ptr()),
                                 std::move(group), std::move(options)) {}
  // Restores every parameter whole (gathered) and stops watching operators. Collective when
  // units are sharded. Not while an exception unwinds the stack: the error that ends the
  // training most likely broke the group too, so the parameters are left without memory, and
  // nothing is printed before that error.
  ~FullyShardedDataParallel();
  FullyShardedDataParallel(const FullyShardedDataParallel&) = delete;
  FullyShardedDataParallel& operator=(const FullyShardedDataParallel&) = delete;

  // This rank's shards: one 1-D tensor per trainable parameter, in the order of
  // module->parameters(), empty where none of the parameter is this rank's (kNoShard: the
  // parameters themselves). Build the optimizer over these. After a synchronized backward a
  // shard's .grad holds the average over the ranks of its part of the gradient, accumulated
  // over backward calls until the optimizer zeroes it.
  std::vector<torch::Tensor> parameters() const;
  torch::OrderedDict<std::string, torch::Tensor> named_parameters() const;

  // Which part of its parameter each shard is, by the names of named_parameters(): elements
  // [offset, offset + numel) of the parameter flattened in row-major order, whose whole shape is
  // `shape`. With it, a shard's optimizer state maps back onto the parameter, e.g.
  //   auto span = fsdp.shard_spans()["fc1.weight"];
  //   full.view(-1).narrow(0, span.offset, span.numel).copy_(state_of_the_shard);
  // numel 0 where none of the parameter is this rank's; kNoShard: the whole parameter.
  struct ShardSpan {
    int64_t offset = 0;
    int64_t numel = 0;
    std::vector<int64_t> shape;
  };
  torch::OrderedDict<std::string, ShardSpan> shard_spans() const;

  // optimizer.step(), after checking that the optimizer holds only this object's shards and
  // updates elementwise (LBFGS is refused). No communication: the next forward gathers the
  // updated shards.
  void step(torch::optim::Optimizer& optimizer);

  // Backward passes inside accumulate each unit's full gradient on this rank without
  // communicating; the next synchronized backward reduces the sum (memory: one full gradient
  // per rank while accumulating, in the mixed precision policy's reduce_dtype, which defaults
  // to param_dtype).
  class NoSync {
   public:
    explicit NoSync(FullyShardedDataParallel* owner);
    ~NoSync();
    NoSync(NoSync&& other) noexcept;
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;
    NoSync& operator=(NoSync&&) = delete;

   private:
    FullyShardedDataParallel* owner_;
    DistributedDataParallel::NoSync ddp_;
  };
  NoSync no_sync();

  // Frees every gathered unit now (a forward without backward, e.g. evaluation, leaves its
  // last unit and the root gathered until the next forward moves on). Not collective.
  void reshard();

  // Every parameter whole, gathered from the shards, for as long as the returned object lives
  // (evaluation, export, checkpoint of the full model). Collective. With writeback, changes
  // made to the parameters in the scope are copied into the shards when it ends. Using the
  // parameters after it ends gathers them again, unit by unit. Under param_dtype the
  // parameters are in their own dtype with the master values in the scope (full precision, as
  // PyTorch's summon_full_params), param_dtype again after it; take it between iterations.
  class FullParameters {
   public:
    FullParameters(FullyShardedDataParallel* owner, bool writeback);
    ~FullParameters();
    FullParameters(FullParameters&& other) noexcept;
    FullParameters(const FullParameters&) = delete;
    FullParameters& operator=(const FullParameters&) = delete;
    FullParameters& operator=(FullParameters&&) = delete;

   private:
    FullyShardedDataParallel* owner_;
    bool writeback_;
  };
  FullParameters full_parameters(bool writeback = false);

  // The last synchronized iteration (from its forward to the end of its backward):
  // exposed_comm_ms is the time this rank was blocked on communication: all-gathers not yet
  // done when needed, reduce-scatters (in flight or at the end of backward) and the end of
  // backward's small collectives (0 at world size 1, which issues none); buckets: one per unit
  // reduced, in reduction order, bytes of its flat gradient and latency from its gradient node to
  // the end of its reduce-scatter. kNoShard: DistributedDataParallel's.
  const IterationStats& last_iteration_stats() const;

  // What this rank holds now; optimizer: the one step() runs, for its state.
  FsdpMemoryReport memory(const torch::optim::Optimizer* optimizer = nullptr) const;
  void reset_peak_memory();

  // The units as cut: "" for the root, else the submodule path.
  std::vector<std::string> unit_names() const;
  // The view that loss scaling, clipping, trust ratios and sharded checkpoints take (Note [One
  // view of sharded parameters]); valid while this object lives and is not moved. The
  // conversion lets this object be passed where a view is expected.
  ShardedParameters sharded_parameters();
  operator ShardedParameters() { return sharded_parameters(); }  // NOLINT: by design

  torch::nn::Module& module() const;
  Group& group() const;
  // The ranks one unit is sharded over: group() but under kHybridShard, this node's ranks.
  Group& shard_group() const;
  ShardingStrategy strategy() const;

  class Impl;

 private:
  friend class detail::FsdpAccess;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort
