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
#include "cohort/comm/group.h"
#include "cohort/torch/comm_hook.h"
#include "cohort/torch/ddp.h"

namespace cohort {

// What ZeRO (src/torch/shard/zero.cc, Note [ZeRO gradients]) changes in the reducer. The
// default is plain DDP.
struct ReducerSharding {
  // Bucket lengths are padded (with zeros) to a multiple of this: the world size, so that a
  // bucket splits into equal blocks for a reduce-scatter.
  int64_t pad_to = 1;
  // ZeRO-2: a bucket's memory exists only from its first gradient of an iteration to the end
  // of its reduction; .grad of the parameters is copied into it and released.
  bool transient_buckets = false;
  // Called at the end of every synchronized backward, after the reductions, with used[p] = 1
  // where some rank gave parameter p a gradient since the last synchronization. Then the
  // buckets are zeroed (persistent) or freed (transient): they hold each rank's own gradients
  // since the last synchronization, which this call has consumed.
  std::function<void(const std::vector<char>& used)> on_reduced;
  // The name of a bucket's collective on the timeline: "bucket k <collective>".
  std::string collective = "allreduce";
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
  std::vector<BucketLayout> layout() const;
  const std::vector<Parameter>& parameters() const { return parameters_; }
  // Bytes of gradients the buckets hold now, and at most since construction.
  size_t bucket_bytes() const;
  size_t peak_bucket_bytes() const;

 private:
  struct Bucket {
    GradBucket grads;             // buffer undefined while a transient bucket has no memory
    int64_t numel = 0;            // of buffer, with the padding
    std::vector<size_t> members;  // parameter indices, in buffer order
    size_t pending = 0;           // members not yet ready this iteration
    std::optional<PendingReduction> reduction;
    Clock::time_point launched_at;
  };
  struct Location {
    size_t bucket = 0;
    size_t slot = 0;
  };

  void install_hooks();
  void build_buckets(const std::vector<size_t>& order);
  void log_buckets(const char* what) const;  // at COHORT_LOG_LEVEL=info, on rank 0
  std::vector<size_t> reverse_registration_order() const;

  // Hook and end-of-backward callback (autograd thread).
  void on_gradient_accumulated(size_t parameter);
  void start_iteration();
  void finish_iteration();
  void finish_iteration_locked(std::vector<std::string>& unexpected_unused);

  void allocate(Bucket& bucket) const;
  static void free_memory(Bucket& bucket);
  void release_or_zero_buckets();
  const torch::Tensor& alias_of(size_t parameter);
  void bind_gradient(size_t parameter);
  void mark_ready(size_t parameter);
  void mark_locally_unused(size_t parameter);
  void launch_ready_buckets();
  void release_reduced_buckets();
  void wait_for_reductions();
  void account(size_t bucket, const Work& work);
  std::shared_ptr<Work> start_used_map_allreduce();
  void forget_globally_unused_gradients();
  std::vector<char> used_somewhere() const;
  size_t bucket_nbytes(const Bucket& bucket) const;
  size_t held_bucket_bytes() const;
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
  size_t peak_bucket_bytes_ = 0;

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
