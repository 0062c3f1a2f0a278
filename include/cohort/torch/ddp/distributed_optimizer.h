// cohort::DistributedOptimizer: data parallelism for code that has an optimizer and gradients
// but no module to wrap (Horovod's hvd.DistributedOptimizer): parameters built by hand, several
// models stepped by one optimizer, a training loop that never sees the module.
//
//   torch::optim::SGD sgd(parameters, torch::optim::SGDOptions(0.1).momentum(0.9));
//   cohort::DistributedOptimizer optimizer(sgd, group);   // checks shapes, broadcasts rank 0's
//   for (auto& batch : *loader) {                          // this rank's shard
//     optimizer.zero_grad();
//     loss_fn(forward(batch.data), batch.target).backward();  // gradients averaged meanwhile
//     optimizer.step();
//   }
//
// Tensor fusion. Horovod packs gradients that became ready into fusion buffers of up to
// HOROVOD_FUSION_THRESHOLD bytes (64 MiB) and allreduces one buffer at a time; a background
// thread wakes every HOROVOD_CYCLE_TIME milliseconds to gather what is ready, and the ranks
// negotiate which tensors are ready everywhere before each fused allreduce. Here the fusion
// buffers are the buckets of DistributedDataParallel's reducer (src/torch/ddp/reducer.h): the
// parameters are laid out once into buckets of up to fusion_threshold_mb (the .grad tensors are
// views into them, so nothing is copied into a fusion buffer), and a hook on each parameter's
// gradient accumulator marks it ready during backward; a bucket whose gradients are all there
// starts its allreduce at once, while backward goes on. No cycle timer is needed, nor any
// negotiation: readiness itself launches a bucket, and buckets are launched in the same index
// order on every rank (Note [Collective order] in ddp/reducer.h), which is what Horovod's
// coordinator establishes at run time. After the first backward the buckets are rebuilt once in
// the order gradients really became ready, as Horovod's fusion follows readiness.
// Compression is a CommHook (comm_hook.h: fp16_compress_hook(), ...), applied per bucket, as
// Horovod's Compression.fp16 is per fused buffer.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "cohort/comm/group.h"
#include "cohort/comm/timeline.h"
#include "cohort/torch/ddp/comm_hook.h"
#include "cohort/torch/ddp/ddp.h"

namespace cohort {

class Reducer;  // src/torch/ddp/reducer.h

struct DistributedOptimizerOptions {
  // Fusion buffer (bucket) size in MiB: Horovod's HOROVOD_FUSION_THRESHOLD, 64 MiB by default.
  double fusion_threshold_mb = 64.0;
  // The first bucket (the last layers' gradients, ready first) is kept this small so that
  // communication starts early in backward. Set it to fusion_threshold_mb for Horovod's
  // uniform buffers.
  double first_bucket_mb = 1.0;
  // How a bucket is reduced (comm_hook.h): null is an averaging allreduce.
  std::shared_ptr<CommHook> comm_hook;
  // Where each bucket's reduction and the end-of-backward wait are recorded (docs/timeline.md).
  std::shared_ptr<Timeline> timeline;
  // Copy rank 0's parameters to every rank in the constructor (Horovod's
  // broadcast_parameters(root_rank=0)). Off: the ranks must have equal parameters already.
  bool broadcast_parameters = true;
  // Allow parameters that get no gradient in some iterations (DdpOptions::
  // find_unused_parameters): one small allreduce per iteration.
  bool find_unused_parameters = false;
  // .grad tensors share the buckets' memory (DdpOptions::gradient_as_bucket_view).
  bool gradient_as_bucket_view = true;
};

class DistributedOptimizer {
 public:
  // Collective: every rank of `group` constructs one around an optimizer over parameters of the
  // same shapes and dtypes in the same param_groups order (a difference throws InvalidArgument
  // on every rank naming it), then copies rank 0's parameters to every rank unless told not to.
  // The optimizer must outlive this object (the shared_ptr form keeps it alive). Parameters
  // that do not require grad are left alone.
  DistributedOptimizer(torch::optim::Optimizer& optimizer, std::shared_ptr<Group> group,
                       DistributedOptimizerOptions options = {});
  DistributedOptimizer(std::shared_ptr<torch::optim::Optimizer> optimizer,
                       std::shared_ptr<Group> group, DistributedOptimizerOptions options = {});
  ~DistributedOptimizer();
  DistributedOptimizer(DistributedOptimizer&&) noexcept;
  DistributedOptimizer& operator=(DistributedOptimizer&&) noexcept;

  // Steps the wrapped optimizer. Backward has already averaged the gradients (the end of
  // backward waits for the buckets), so unlike Horovod's step() this waits for nothing. A
  // closure (LBFGS) may run forward and backward again: each of its backwards is reduced too.
  // Throws InvalidArgument inside a no_sync() guard: the gradients there are this rank's own.
  torch::Tensor step(torch::optim::Optimizer::LossClosure closure = nullptr);
  // Zeroes the gradients in place (set_to_none = false), which keeps .grad as views into the
  // buckets, or drops them (true), after which the next backward copies them into the buckets.
  void zero_grad(bool set_to_none = false);

  // RAII, as DistributedDataParallel::no_sync(): while alive, backward accumulates locally; the
  // next backward outside it reduces the accumulated sum (Horovod's backward_passes_per_step).
  using NoSync = NoSyncGuard;
  NoSync no_sync();

  // The last synchronized backward's communication (ddp.h: IterationStats).
  const IterationStats& last_iteration_stats() const;
  // Names ("param_groups[g][i]") of the parameters in each fusion buffer, in reduction order.
  std::vector<std::vector<std::string>> bucket_parameter_names() const;

  torch::optim::Optimizer& optimizer() const;
  Group& group() const;
  const DistributedOptimizerOptions& options() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort
