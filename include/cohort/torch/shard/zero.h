// cohort::ZeroDataParallel: ZeRO stages 1 and 2 for a libtorch training loop. Each rank keeps
// optimizer state (stage 1), and also averaged gradients (stage 2), only for its own block of
// the parameters; the parameters themselves stay whole on every rank.
//
//   auto model = std::make_shared<Net>();
//   cohort::ZeroOptions options;
//   options.stage = 2;
//   cohort::ZeroDataParallel zero(model, group, options);     // checks + broadcasts weights
//   torch::optim::AdamW optimizer(zero.parameters(), torch::optim::AdamWOptions(1e-3));
//   for (auto& batch : *loader) {                               // this rank's shard of the data
//     optimizer.zero_grad();
//     loss_fn(model->forward(batch.data), batch.target).backward();
//     cohort::clip_grad_norm(zero, 1.0);    // optional: the norm of the whole gradient
//     zero.step(optimizer);                 // steps this rank's block, all-gathers the rest
//   }
//
// How it works (docs/sharding.md): the DDP reducer buckets the gradients and, as each bucket's
// gradients are ready during backward, reduce-scatters it instead of allreducing it: rank r
// receives the average of block r of the bucket. zero.parameters() are the shards: for every
// trainable parameter, the part of it that lies in this rank's blocks (a 1-D view of the
// parameter's memory, possibly empty). The optimizer is built over them, so its state exists
// for this rank's part only. step() runs the optimizer bucket by bucket and all-gathers each
// bucket's updated parameters while the next bucket steps.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "cohort/comm/group.h"
#include "cohort/torch/ddp/ddp.h"
#include "cohort/torch/sharded_parameters.h"

namespace cohort {

struct ZeroOptions {
  // 1: optimizer state sharded; every rank keeps a bucket of its own gradients for the whole
  // model (the parameters' .grad are views into it, so backward accumulates without copies).
  // 2: gradients sharded too; a bucket exists only from its first gradient to the end of its
  // reduce-scatter, and the parameters' .grad are released as soon as they are copied in.
  int stage = 1;
  // Bucket caps, unused parameters, buffer broadcast and timeline as for DDP (ddp.h).
  // comm_hook must stay null (ZeRO reduce-scatters), gradient_as_bucket_view and
  // rebuild_buckets are not used: the buckets keep their first layout, since the shards the
  // optimizer holds are cut from it.
  DdpOptions ddp;
};

class ZeroDataParallel {
 public:
  // Collective, like DistributedDataParallel's constructor: the same model on every rank
  // (checked), rank 0's parameters and buffers copied to all. The parameters must be
  // contiguous (shards are views of their memory).
  ZeroDataParallel(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<Group> group,
                   ZeroOptions options = {});
  template <typename ModuleType>
  ZeroDataParallel(const torch::nn::ModuleHolder<ModuleType>& module, std::shared_ptr<Group> group,
                   ZeroOptions options = {})
      : ZeroDataParallel(std::static_pointer_cast<torch::nn::Module>(module.ptr()),
                         std::move(group), std::move(options)) {}
  ~ZeroDataParallel();
  ZeroDataParallel(ZeroDataParallel&&) noexcept;
  ZeroDataParallel& operator=(ZeroDataParallel&&) noexcept;

  // This rank's shards: one 1-D tensor per trainable parameter (requires_grad), in the order
  // of module->parameters(), empty where none of the parameter is this rank's. After a
  // synchronized backward, a shard's .grad holds the average over all ranks of its part of the
  // gradient, accumulated across backward calls until the optimizer zeroes it, as .grad does in
  // one process. The parameters' own .grad are not the averaged gradients: do not step on them.
  std::vector<torch::Tensor> parameters() const;
  // The same shards under the parameters' names (for param groups: no decay on biases, ...).
  torch::OrderedDict<std::string, torch::Tensor> named_parameters() const;

  // optimizer.step() on this rank's shards, then every rank's updated parameters all-gathered
  // into the model. Collective. The optimizer must hold only shards of this object (an error
  // names a tensor that is not one) and update elementwise: LBFGS is refused.
  void step(torch::optim::Optimizer& optimizer);

  // As DistributedDataParallel::no_sync(): backward accumulates into the parameters' .grad
  // without communicating; the next backward outside it reduces the sum. Under stage 2 the
  // accumulated .grad are whole (as DDP's) until that backward.
  DistributedDataParallel::NoSync no_sync();

  // What this rank holds now; optimizer: the one step() runs, for its state.
  MemoryReport memory(const torch::optim::Optimizer* optimizer = nullptr) const;

  // The view that loss scaling, clipping, trust ratios and sharded checkpoints take (Note [One
  // view of sharded parameters]); valid while this object lives and is not moved. The
  // conversion lets this object be passed where a view is expected.
  ShardedParameters sharded_parameters();
  operator ShardedParameters() { return sharded_parameters(); }  // NOLINT: by design

  torch::nn::Module& module() const;
  Group& group() const;
  int stage() const;
  const IterationStats& last_iteration_stats() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort
