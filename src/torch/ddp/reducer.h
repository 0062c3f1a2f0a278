// The gradient reducer behind DistributedDataParallel: buckets, readiness, launch order,
// the end-of-backward wait, unused parameters and the shadow side of join().
//
// Note [Collective order]
// Every rank must issue the same collectives in the same order. Per synchronized iteration
// that is, on every rank:
//   (join mode) one int32 MIN allreduce: the lowest rank still training, or world size if none
//   one reduction per bucket, in bucket index order (whatever order gradients arrive in: a
//     bucket is launched only once it and every bucket before it are full)
//   (find_unused_parameters, not static_graph) one int32 MAX allreduce of the used-map
//   (broadcast_buffers) the buffers, from the authority rank
//   any collectives of the hooks' finishing steps (PendingReduction::finish: PowerSGD's second
//     round), bucket by bucket in index order
//   (first iteration, rebuild_buckets) the measured gradient order, from the authority rank
// The authority is rank 0, or in join mode the lowest rank still training. A rank that has
// finished in join() issues the same list with zero gradients (shadow_iteration).
//
// Note [Device buckets]
// Buckets are made with their parameters' tensor options, so the buckets of a CUDA model live on
// its GPU and are reduced as device buffers (Buffer::device): only an NCCL group takes those,
// any other group refuses them with InvalidArgument. The join flag, the used-map and the bucket
// order stay in host memory; an NCCL group moves them through its host-memory group. A bucket's
// reduction is ordered after torch's current stream at launch (current_stream()), and the copies
// back into .grad at the end of backward run on the current stream then, which waited for it.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "autograd_compat.h"
#include "call_sites.h"
#include "cohort/comm/group.h"
#include "cohort/torch/ddp/comm_hook.h"
#include "cohort/torch/ddp/ddp.h"

namespace cohort {

// Note [Gradient memory]
// ZeRO reports the gradient memory it holds, and the most it held at once, from the memory it
// allocates itself (buckets, reduced blocks, the shards' .grad): each such tensor counts from
// its allocation until its memory is freed, by whoever drops the last reference to it (the
// deleter of the tensor's storage subtracts it). The parameters' own .grad that autograd makes
// outside the buckets (accumulated under no_sync at stage 2, or a gradient about to be copied
// into its bucket) are added by a callback, at every allocation and whenever asked: the peak is
// taken at the moments memory is allocated, which is when it can grow.
class GradientMemory {
 public:
  // An uninitialized 1-D tensor of numel elements that counts here until its memory is freed.
  // Thread-safe; the tensor may outlive this object's owner (it keeps the counter alive).
  static torch::Tensor allocate(const std::shared_ptr<GradientMemory>& memory, int64_t numel,
                                const torch::TensorOptions& options);
  // The same for a 1-D tensor made elsewhere (registered memory): it counts from now.
  static torch::Tensor track(const std::shared_ptr<GradientMemory>& memory, torch::Tensor real);
  // Bytes of gradients held outside the allocations above, called at each allocation.
  void set_untracked(std::function<size_t()> untracked);
  size_t held() const;  // the allocations alive now (without the untracked bytes)
  size_t peak() const;  // the most of held() + untracked() seen at once

 private:
  void add(size_t bytes);
  void sub(size_t bytes);

  mutable std::mutex mutex_;
  size_t held_ = 0;
  size_t peak_ = 0;
  std::function<size_t()> untracked_;
};

// What ZeRO (src/torch/shard/zero.cc, Note [ZeRO gradients]) changes in the reducer. The
// default is plain DDP.
struct ReducerSharding {
  // Bucket lengths are padded (with zeros) to a multiple of this: the world size, so that a
  // bucket splits into equal blocks for a reduce-scatter.
  int64_t pad_to = 1;
  // ZeRO-2: a bucket's memory exists only from its first gradient of an iteration to the end
  // of its reduction; .grad of the parameters is copied into it and released. Only the
  // padding is zeroed when it is allocated: every parameter's part is written before the
  // bucket is reduced.
  bool transient_buckets = false;
  // Called at the end of every synchronized backward, after the reductions, with used[p] = 1
  // where some rank gave parameter p a gradient since the last synchronization. Then transient
  // buckets are freed; persistent ones (ZeRO-1) keep what on_reduced left in them, and the
  // parameters' .grad (views into them) are released instead of the buckets being zeroed.
  std::function<void(const std::vector<char>& used)> on_reduced;
  // ZeRO-1: called before a persistent bucket that on_reduced left as it was is written again
  // (its first gradient of a later backward, under no_sync too), with its index and buffer, so
  // that what still points into it can move out. Every parameter's part of the bucket is then
  // overwritten (copied into, or zeroed) before the bucket is next reduced.
  std::function<void(size_t bucket, const torch::Tensor& buffer)> before_rewrite;
  // The name of a bucket's collective on the timeline: "bucket k <collective>".
  std::string collective = "allreduce";
  // Where the buckets' memory is counted (Note [Gradient memory]); null: not counted.
  std::shared_ptr<GradientMemory> memory;
  // The class the user constructed, which errors and the constructor's collectives name.
  std::string owner = "DistributedDataParallel";
  CallSite constructor = call_sites::kDdpConstructor;
};

// One bucket's place in the parameters, for ZeRO's shards (Reducer::layout()).
struct BucketLayout {
  std::vector<size_t> members;   // parameter indices, in buffer order
  std::vector<int64_t> offsets;  // of each member in the buffer, in elements
  int64_t numel = 0;             // with the padding
};

class Reducer {
 public:
  struct Parameter {
    std::string name;
    torch::Tensor tensor;
  };
  // sync_buffers(root): the buffer broadcast of Note [Collective order].
  Reducer(std::shared_ptr<Group> group, std::vector<Parameter> parameters,
          const DdpOptions& options, std::function<void(int root)> sync_buffers,
          ReducerSharding sharding = {});
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  void set_no_sync(bool no_sync);
  bool no_sync() const;

  // join(): while on, each synchronized iteration starts with the join allreduce.
  void set_join_mode(bool on);
  // A finished rank's part in one iteration of the others. False once every rank finished.
  bool shadow_iteration();
  // The rank whose state counts: rank 0, or in join mode the lowest rank that still trained
  // in the last iteration.
  int authority() const;

  std::vector<std::vector<std::string>> bucket_parameter_names() const;
  const IterationStats& last_iteration_stats() const { return stats_; }
  // The next synchronized backward records the ready order, and its end rebuilds the buckets
  // with this cap (DistributedDataParallel::rebucket).
  void rebucket(double bucket_cap_mb);
  std::vector<BucketLayout> layout() const;
  const std::vector<Parameter>& parameters() const { return parameters_; }
  // Bytes of the parameters' .grad that are not views into a bucket (Note [Gradient memory]).
  // Takes no lock: call it on the autograd thread, or when no backward runs.
  size_t unbucketed_gradient_bytes() const;

 private:
  struct Bucket {
    GradBucket grads;             // buffer undefined while a transient bucket has no memory
    int64_t numel = 0;            // of buffer, with the padding
    std::vector<size_t> members;  // parameter indices, in buffer order
    size_t pending = 0;           // members not yet ready this iteration
    std::optional<PendingReduction> reduction;
    Clock::time_point launched_at;
    // ZeRO-1: on_reduced left the bucket as it was; before_rewrite runs before the next write.
    bool holds_reduced = false;
    bool shared_memory = false;  // buffer is registered memory the node shares
  };
  struct Location {
    size_t bucket = 0;
    size_t slot = 0;
  };

  void install_hooks();
  void build_buckets(const std::vector<size_t>& order);
  torch::Tensor registered_bucket(Bucket& bucket, const torch::TensorOptions& options) const;
  void log_buckets(const char* what) const;  // at COHORT_LOG_LEVEL=info, on rank 0
  std::vector<size_t> reverse_registration_order() const;

  // Hook and end-of-backward callback (autograd thread).
  void on_gradient_accumulated(size_t parameter);
  void start_iteration();
  void finish_iteration();
  void finish_iteration_locked(std::vector<std::string>& unexpected_unused);

  void allocate(Bucket& bucket) const;
  static void free_memory(Bucket& bucket);
  void release_after_sharded_reduction();
  const torch::Tensor& alias_of(size_t parameter);
  void bind_gradient(size_t parameter);
  void mark_ready(size_t parameter);
  void mark_locally_unused(size_t parameter);
  void launch_ready_buckets();
  void release_reduced_buckets();
  void wait_for_reductions();
  void account(size_t bucket, const PendingReduction& reduction);
  std::shared_ptr<Work> start_used_map_allreduce();
  void forget_globally_unused_gradients();
  std::vector<char> used_somewhere() const;
  size_t bucket_nbytes(const Bucket& bucket) const;
  void rebuild_buckets_from_ready_order();
  void reset_iteration();

  std::shared_ptr<Group> group_;
  std::vector<Parameter> parameters_;
  DdpOptions options_;
  std::shared_ptr<CommHook> hook_;
  // A world of one with the averaging allreduce: buckets need no communication at all.
  bool alone_with_default_hook_;
  std::function<void(int)> sync_buffers_;
  ReducerSharding sharding_;

  std::vector<Bucket> buckets_;
  std::vector<Location> locations_;
  std::vector<std::shared_ptr<autograd_compat::Node>> accumulators_;
  std::vector<autograd_compat::HookKey> hook_keys_;

  mutable std::mutex mutex_;
  bool no_sync_ = false;
  bool join_mode_ = false;
  int authority_ = 0;
  // Per iteration.
  bool iteration_started_ = false;
  size_t next_to_launch_ = 0;
  std::vector<char> ready_;
  std::vector<char> filled_with_zeros_;  // locally unused and .grad was undefined
  torch::Tensor join_flag_;
  std::shared_ptr<Work> join_work_;
  torch::Tensor used_map_;
  // Since the last synchronized backward (no_sync micro-steps included).
  std::vector<char> used_since_sync_;
  // Bucket rebuild and static graph, settled by the first synchronized iteration.
  bool rebuilt_ = false;
  int64_t synchronized_iterations_ = 0;  // completed ones (GradBucket::iteration)
  std::vector<size_t> ready_order_;
  bool static_unused_known_ = false;
  std::vector<size_t> static_unused_;
  // Of the last synchronized iteration, and of the one in progress.
  IterationStats stats_;
  IterationStats pending_stats_;
};

// DistributedDataParallel with its reducer changed for ZeRO, and its reducer (ddp.cc).
DistributedDataParallel make_sharded_ddp(std::shared_ptr<torch::nn::Module> module,
                                         std::shared_ptr<Group> group, DdpOptions options,
                                         const ReducerSharding& sharding);
Reducer& reducer_of(const DistributedDataParallel& ddp);

}  // namespace cohort
