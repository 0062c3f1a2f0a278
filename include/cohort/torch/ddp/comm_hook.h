// Communication hooks: replace how DistributedDataParallel reduces a bucket of gradients.
//
//   ddp_options.comm_hook = cohort::fp16_compress_hook();   // halve the bytes on the wire
//
// A hook is called on the autograd thread as soon as a bucket's gradients are all ready, in
// the same bucket order on every rank. It starts a collective on the group and returns it with
// an optional finishing step; DDP waits for the collective at the end of backward, then runs
// the finishing step. After it, the bucket's buffer must hold the average over all ranks of
// every rank's gradients. Every rank must issue the same collectives for the same bucket.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cohort/comm/group.h"
#include "cohort/comm/work.h"

namespace cohort {

// The gradients of one bucket, handed to a hook.
struct GradBucket {
  size_t index = 0;
  // How many synchronized backwards came before this one (0 in the first): the same on every
  // rank, for hooks that change with time (PowerSGD's start_iter) or draw shared random numbers.
  // Buckets are rebuilt once, after iteration 0 (DdpOptions::rebuild_buckets): a hook keeping
  // state per bucket index must expect a bucket's size to change then.
  int64_t iteration = 0;
  // The bucket's gradients back to back: one contiguous 1-D tensor of one dtype.
  torch::Tensor buffer;
  // Tensors shaped like the parameters, sharing buffer's memory, in bucket order.
  std::vector<torch::Tensor> gradients;
  std::vector<torch::Tensor> parameters;
  // The registered memory buffer lies in (DdpOptions::registered_buckets), else null.
  std::shared_ptr<const RegisteredMemory> registered;
};

// bucket.buffer as a comm Buffer that says where it lies (Buffer::registered): a collective on
// it runs in place on the node's shared memory where the bucket is registered.
Buffer bucket_buffer(const GradBucket& bucket);

// A reduction a hook has started.
struct PendingReduction {
  std::shared_ptr<Work> work;
  // Runs after work completed without error, on the thread that ends backward. May be empty.
  std::function<void()> finish;
  // The tensor the collective reduced, for the statistics (BucketStats::reduced_dtype and
  // reduced_bytes): a compressed copy, say. Undefined: the bucket's buffer itself.
  torch::Tensor reduced;
  // Bytes this rank handed to collectives for the bucket (BucketStats::reduced_bytes), for hooks
  // that send more than one tensor or several rounds (compression: packed codes, PowerSGD's P
  // and Q), or nothing (0: local SGD's steps). Unset: reduced's bytes (the bucket's when
  // reduced is undefined).
  std::optional<size_t> wire_bytes;
};

class CommHook {
 public:
  virtual ~CommHook() = default;
  virtual PendingReduction start(Group& group, GradBucket& bucket) = 0;
  // For messages and logs.
  virtual std::string name() const = 0;
  // The group changes from the next bucket on (ElasticTrainer's next generation, which may hold
  // members that never ran this hook): drop the state the ranks must hold alike, so that every
  // member starts it afresh together. State that is each rank's own (error feedback's residual)
  // may stay. Called between steps, on every rank. The default holds no shared state.
  virtual void on_new_group() {}
};

// The default: an in-place allreduce whose reduction averages (the division by the world size
// is folded into the reduction, no second pass over the gradients).
std::shared_ptr<CommHook> allreduce_hook();
// Divide by the world size, cast to float16 (bfloat16), allreduce the half-size copy with
// float32 accumulation, and cast back into the gradients. Halves the bytes sent; costs the
// precision of the 16-bit type (relative error about 1e-3 for float16, 1e-2 for bfloat16).
// float16 overflows above 65504: keep per-rank gradients below that (or use bfloat16).
std::shared_ptr<CommHook> fp16_compress_hook();
std::shared_ptr<CommHook> bf16_compress_hook();
// For a model held in 16-bit (amp::MasterWeights): cast a float16 or bfloat16 bucket up to
// float32, allreduce that copy with averaging, and round the average back into the bucket once
// (apex's allreduce_always_fp32). Twice the bytes of the 16-bit bucket on the wire; the sum is
// never rounded to 16 bits on the way, only the final average. A float32 or float64 bucket is
// reduced in place as allreduce_hook() does (there is nothing to widen), so a model mixing
// 16-bit and float32 parameters can use it. docs/amp.md.
std::shared_ptr<CommHook> float32_reduction_hook();

}  // namespace cohort
