#include "cohort/torch/ddp/comm_hook.h"

#include "call_sites.h"
#include "cohort/torch/tensor_buffer.h"

namespace cohort {

Buffer bucket_buffer(const GradBucket& bucket) {
  Buffer buffer = tensor_buffer(bucket.buffer);
  buffer.registered = bucket.registered.get();
  return buffer;
}

namespace {

class AllreduceHook final : public CommHook {
 public:
  PendingReduction start(Group& group, GradBucket& bucket) override {
    CollectiveOptions options;
    options.op = ReduceOp::kAvg;
    options.site = call_sites::kDdpGradients;
    options.stream = current_stream(bucket.buffer);
    return {group.allreduce_async(bucket_buffer(bucket), options), nullptr, {}, std::nullopt};
  }
  std::string name() const override { return "allreduce"; }
};

// Allreduces `copy` (the bucket in another dtype) and copies the result back into the bucket
// when it has ended; `copy` lives in the closure until then.
PendingReduction reduce_copy(Group& group, const torch::Tensor& bucket, torch::Tensor copy,
                             ReduceOp op) {
  CollectiveOptions options;
  options.op = op;
  options.site = call_sites::kDdpGradients;
  options.stream = current_stream(copy);
  auto work = group.allreduce_async(tensor_buffer(copy), options);
  auto target = bucket;
  return {std::move(work), [copy, target]() mutable { target.copy_(copy); }, copy, std::nullopt};
}

// Compression to a 16-bit type. The division comes first, in float32, so that the sum of the
// world's gradients fits the narrow type where their average does.
class CompressHook final : public CommHook {
 public:
  explicit CompressHook(torch::ScalarType wire_type) : wire_type_(wire_type) {}

  PendingReduction start(Group& group, GradBucket& bucket) override {
    return reduce_copy(group, bucket.buffer, (bucket.buffer / group.size()).to(wire_type_),
                       ReduceOp::kSum);
  }
  std::string name() const override {
    return wire_type_ == torch::kFloat16 ? "fp16_compress" : "bf16_compress";
  }

 private:
  torch::ScalarType wire_type_;
};

// Widening for 16-bit buckets: the ring's partial sums and the average are float32, and the
// only rounding to 16 bits is the final copy back.
class Float32ReductionHook final : public CommHook {
 public:
  PendingReduction start(Group& group, GradBucket& bucket) override {
    const auto dtype = bucket.buffer.scalar_type();
    if (dtype != torch::kFloat16 && dtype != torch::kBFloat16) {
      return AllreduceHook().start(group, bucket);  // already at least float32
    }
    return reduce_copy(group, bucket.buffer, bucket.buffer.to(torch::kFloat32), ReduceOp::kAvg);
  }
  std::string name() const override { return "float32_reduction"; }
};

}  // namespace

std::shared_ptr<CommHook> allreduce_hook() {
  return std::make_shared<AllreduceHook>();
}
std::shared_ptr<CommHook> fp16_compress_hook() {
  return std::make_shared<CompressHook>(torch::kFloat16);
}
std::shared_ptr<CommHook> bf16_compress_hook() {
  return std::make_shared<CompressHook>(torch::kBFloat16);
}
std::shared_ptr<CommHook> float32_reduction_hook() {
  return std::make_shared<Float32ReductionHook>();
}

}  // namespace cohort
