// cohort::DistributedDataParallel: makes a libtorch training loop data-parallel.
//
//   auto model = std::make_shared<Net>();                        // any torch::nn::Module
//   cohort::DistributedDataParallel ddp(model, group);           // checks + broadcasts weights
//   torch::optim::SGD optimizer(model->parameters(), lr);
//   for (auto& batch : *loader) {                                 // this rank's shard
//     optimizer.zero_grad();
//     auto loss = loss_fn(model->forward(batch.data), batch.target);
//     loss.backward();          // returns with every .grad averaged over all ranks
//     optimizer.step();
//   }
//
// How it works (docs/ddp.md): gradients live in a few flat buckets (the parameters' .grad are
// tensors over bucket memory, so gradients are not stored twice). A hook on each parameter's
// gradient accumulator marks it ready during backward; a bucket whose gradients are all ready
// starts its allreduce at once on the group's communication thread while backward goes on.
// Buckets are reduced in the same order on every rank; the end of backward waits for the last.
// After the first iteration the buckets are rebuilt once in the order gradients really became
// ready (rank 0's order, so the same everywhere).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cohort/comm/group.h"
#include "cohort/comm/timeline.h"
#include "cohort/torch/ddp/comm_hook.h"

namespace cohort {

class Reducer;           // src/torch/ddp/reducer.h
struct ReducerSharding;  // what ZeroDataParallel (zero.h) changes in it

struct DdpOptions {
  // Bucket size in MiB. Bigger buckets: fewer, larger allreduces; smaller: more overlap.
  double bucket_cap_mb = 25.0;
  // The first bucket (the last layers' gradients, ready first) is kept small so communication
  // starts early.
  double first_bucket_cap_mb = 1.0;
  // Copy rank 0's buffers (BatchNorm running statistics) to every rank after each
  // synchronized backward, i.e. before the next forward.
  bool broadcast_buffers = true;
  // Allow parameters that get no gradient in some iterations (a branch the forward skipped).
  // Costs one small allreduce per iteration and the overlap of buckets holding such
  // parameters. Without it, such a parameter is an error that names it.
  bool find_unused_parameters = false;
  // The set of parameters used is the same in every iteration (and on every rank): unused
  // parameters are found once, in the first iteration, and never searched for again.
  bool static_graph = false;
  // .grad tensors share the buckets' memory. false: gradients are copied into the buckets and
  // back (twice the gradient memory, for code that needs .grad to be separate tensors).
  bool gradient_as_bucket_view = true;
  // Rebuild the buckets after the first iteration in the order gradients became ready.
  bool rebuild_buckets = true;
  // CPU buckets live in memory the ranks of a node share (Group::allocate_registered), so that
  // their allreduce inside a node runs in place, without staging copies (docs/algorithms.md,
  // "Registered buffers"). false: private memory, staged through the shared-memory window.
  bool registered_buckets = true;
  // How a bucket is reduced (comm_hook.h); null: allreduce_hook().
  std::shared_ptr<CommHook> comm_hook;
  // Where to record each bucket's reduction (track "comm") and the end of backward's wait for
  // them (track "main"); null: no timeline (docs/timeline.md).
  std::shared_ptr<Timeline> timeline;
};

// Bytes one rank holds for the model's training state (DistributedDataParallel::memory(),
// ZeroDataParallel::memory()).
struct MemoryReport {
  size_t parameters = 0;  // the model's parameters as this rank holds them
  // Now: the gradient buckets and the .grad outside them (DDP: the whole model's, once with
  // gradient_as_bucket_view, else twice); ZeRO also this rank's averaged blocks.
  size_t gradients = 0;
  size_t peak_gradients = 0;   // the most gradient memory held at once since construction
  size_t optimizer_state = 0;  // of the optimizer passed in (0 without one)
  size_t model_state() const { return parameters + gradients + optimizer_state; }
};

// The bytes of an optimizer's state tensors (SGD, Adam, AdamW, Adagrad, RMSprop,
// cohort::optim::Lars and Lamb; others count 0).
size_t optimizer_state_bytes(const torch::optim::Optimizer& optimizer);

// What the last synchronized backward spent on communication
// (DistributedDataParallel::last_iteration_stats()).
struct BucketStats {
  size_t bytes = 0;  // of gradients in the bucket
  // What this rank handed to the bucket's collectives: the dtype and bytes of the tensor the
  // collective reduced (for a reduce-scatter, its whole input). The gradients' own for the
  // default hook and ZeRO; 16-bit and half the bytes for fp16/bf16_compress_hook; float32 and
  // twice the bytes of a 16-bit bucket for float32_reduction_hook; FSDP's
  // MixedPrecisionPolicy::reduce_dtype when set; the compression hooks' own count
  // (PendingReduction::wire_bytes: PowerSGD's P and Q, an allgather's payload once, although
  // a ring allgather forwards each rank's payload to W - 1 ranks).
  torch::ScalarType reduced_dtype = torch::kFloat32;
  size_t reduced_bytes = 0;
  // From the moment the bucket's gradients were all ready (its reduction was started) to the
  // end of its reduction: what overlap has to hide.
  double latency_ms = 0;
  // On the group's communication thread, from start to end.
  double comm_ms = 0;
  // The bucket lives in memory shared with the other ranks of this node
  // (DdpOptions::registered_buckets): the shared-memory algorithms (on one host, and the
  // hierarchical allreduce's phases inside each host) reduce it in place. A comm hook that
  // reduces a copy (compression) does not.
  bool shared_memory = false;
};
struct IterationStats {
  // Time the end of backward waited for communication (the buckets' reductions, and the
  // buffer broadcast and unused-parameter allreduce when those are on): the communication
  // that computation did not hide. Step time minus it is the time computing.
  double exposed_comm_ms = 0;
  std::vector<BucketStats> buckets;  // in reduction order; empty in a world of one
  // FullyShardedDataParallel only (0 otherwise): bytes of the units this rank all-gathered for
  // the iteration's forward and backward, prefetches included, each unit counted at its
  // gathered size (in MixedPrecisionPolicy::param_dtype when that is set).
  size_t allgather_bytes = 0;
};

// The guard of no_sync() (DistributedDataParallel's, ZeroDataParallel's and
// DistributedOptimizer's, each a Reducer's): while one is alive, backward() accumulates
// gradients locally without communicating, and the next backward outside it reduces the sum.
// A default-constructed guard holds nothing; assigning to a guard ends the one it held.
class NoSyncGuard {
 public:
  NoSyncGuard() = default;
  NoSyncGuard(NoSyncGuard&& other) noexcept;
  NoSyncGuard& operator=(NoSyncGuard&& other) noexcept;
  ~NoSyncGuard();

 private:
  friend class DistributedDataParallel;
  friend class DistributedOptimizer;
  // Checks that `reducer` is not in a guard already (InvalidArgument naming `owner`).
  NoSyncGuard(Reducer* reducer, const char* owner);
  void release() noexcept;
  Reducer* reducer_ = nullptr;
};

class DistributedDataParallel {
 public:
  // Collective: every rank of `group` constructs one, with the same model. Checks that all
  // ranks have the same parameters and buffers (names, shapes, dtypes; a mismatch throws
  // InvalidArgument naming the first difference and the ranks), then copies rank 0's
  // parameters and buffers to every rank.
  DistributedDataParallel(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<Group> group,
                          DdpOptions options = {});
  template <typename ModuleType>
  DistributedDataParallel(const torch::nn::ModuleHolder<ModuleType>& module,
                          std::shared_ptr<Group> group, DdpOptions options = {})
      : DistributedDataParallel(std::static_pointer_cast<torch::nn::Module>(module.ptr()),
                                std::move(group), std::move(options)) {}
  ~DistributedDataParallel();
  DistributedDataParallel(DistributedDataParallel&&) noexcept;
  DistributedDataParallel& operator=(DistributedDataParallel&&) noexcept;

  torch::nn::Module& module() const;
  Group& group() const;
  const DdpOptions& options() const;

  // RAII: while one is alive, backward() accumulates gradients locally without communicating.
  // The next backward outside it reduces the accumulated sum.
  //   { auto guard = ddp.no_sync(); for (k micro-batches) forward + backward; }
  //   forward + backward;   // reduces all k + 1 micro-batches' gradients
  // A default-constructed guard holds nothing; assigning to a guard ends the one it held:
  //   DistributedDataParallel::NoSync guard;     // holds nothing
  //   if (accumulating) guard = ddp.no_sync();  // from here backward() only accumulates
  //   guard = {};                               // ended: the next backward() reduces
  using NoSync = NoSyncGuard;
  NoSync no_sync();

  // Uneven inputs. Runs `train` (this rank's training loop) and then, when it returns (this
  // rank ran out of data), keeps taking part in the other ranks' gradient reductions with
  // zero gradients until every rank's loop has returned. Finally every rank gets the
  // parameters and buffers of the last rank that was still training. Gradients are averaged
  // over the whole world, finished ranks counting as zeros (as PyTorch's Join).
  // Every rank calls join() with its own loop; inside it, use backward() as usual.
  void join(const std::function<void()>& train);

  // Copies rank 0's buffers to every rank now (done after every synchronized backward when
  // broadcast_buffers is on). Collective.
  void broadcast_buffers();

  // After a synchronized backward: its communication figures (above). Not thread-safe
  // against a backward that is running.
  const IterationStats& last_iteration_stats() const;
  // Buckets of `bucket_cap_mb` MiB from the next synchronized backward: the reducer rebuilds
  // them at its end, in the order the gradients became ready, as it does after the first (the
  // planner's online correction, docs/planner.md). Every rank calls it before the same
  // iteration (the rebuild is collective). InvalidArgument for a cap that is not positive.
  void rebucket(double bucket_cap_mb);

  // What this rank holds now (as ZeroDataParallel::memory() and FullyShardedDataParallel's);
  // optimizer: the one that steps this model, for its state.
  MemoryReport memory(const torch::optim::Optimizer* optimizer = nullptr) const;

  // Names of the parameters in each bucket, in reduction order (for tests and tuning).
  std::vector<std::vector<std::string>> bucket_parameter_names() const;

  class Impl;

 private:
  // ZeroDataParallel's: DDP with its reducer changed, and access to that reducer.
  explicit DistributedDataParallel(std::unique_ptr<Impl> impl);
  friend DistributedDataParallel make_sharded_ddp(std::shared_ptr<torch::nn::Module> module,
                                                  std::shared_ptr<Group> group, DdpOptions options,
                                                  const ReducerSharding& sharding);
  friend Reducer& reducer_of(const DistributedDataParallel& ddp);

  std::unique_ptr<Impl> impl_;
};

// Tunes glibc malloc for training loops: large blocks (activations, gradients) come from a
// heap that is never trimmed and stay mapped, instead of being mmapped and faulted in on
// every step (which costs 15-20% of a step here). Called by DistributedDataParallel's
// constructor; idempotent; COHORT_MALLOC_TUNING=0 turns it off, and it leaves alone any
// setting made through glibc's MALLOC_*_ environment variables. Returns whether it applied.
bool tune_malloc_for_training();

}  // namespace cohort
