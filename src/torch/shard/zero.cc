// ZeroDataParallel (cohort/torch/shard/zero.h): ZeRO stages 1 and 2 on top of the DDP reducer.
//
// Note [ZeRO gradients]
// The reducer's buckets hold each rank's own gradients since the last synchronization (the
// parameters' .grad are copied in and then are views into them under stage 1; copied in and
// released under stage 2). At each bucket's turn the hook reduce-scatters it (average): under
// stage 1 in place, into this rank's block of the bucket itself; under stage 2 into a
// block-sized tensor of its own, since the bucket is freed right after. At the end of backward
// every shard's .grad gets its part of that block: as a view of it when the shard had no
// .grad, added to it otherwise. So a shard's .grad accumulates over synchronized backward calls
// until the optimizer zeroes it, exactly as .grad does in one process, and a parameter no rank
// used keeps an undefined .grad (the optimizer skips it, as in one process). Then the reducer
// frees the buckets (stage 2), or (stage 1) releases the parameters' .grad and leaves the
// buckets as they are: the shards' .grad view them. Before a stage-1 bucket is written again
// (its first gradient of the next backward), the shards' .grad that still view it are moved to
// memory of their own (Reducer's before_rewrite); when the optimizer's zero_grad set them to
// none, as libtorch 2's does by default, nothing moves and stage 1 holds no gradient memory
// beyond its buckets.
//
// Note [Flat parameters]
// At construction the trainable parameters of each bucket move into one flat tensor per bucket
// (Tensor::set_data onto views of it), laid out as the bucket: the same offsets and padding. A
// rank's block of the flat tensor is its shards, so the all-gather of step() runs in place
// (input: this rank's block of the flat tensor; output: the flat tensor) and lands straight in
// the parameters: no packing, no gathered copy, no unpacking.
//
// Note [ZeRO step]
// The optimizer is run once per bucket, on that bucket's shards only (its param groups are
// narrowed for the call: the optimizers ZeRO takes update each element from its own state, so
// stepping in pieces is the same as stepping at once). As soon as a bucket's shards are
// updated, its flat tensor is all-gathered in place on the communication thread while the next
// bucket steps. step() returns once every all-gather has ended.
#include "cohort/torch/shard/zero.h"

#include <unordered_map>
#include <unordered_set>

#include "autograd_compat.h"
#include "call_sites.h"
#include "cohort/comm/agreement.h"
#include "cohort/comm/timeline.h"
#include "cohort/core/check.h"
#include "cohort/torch/tensor_buffer.h"
#include "ddp/reducer.h"
#include "grad_norm.h"
#include "optim/optimizer_check.h"
#include "shard/shard_holdings.h"
#include "shard/shard_layout.h"

namespace cohort {
namespace {

struct Shard {
  size_t parameter = 0;  // index in the reducer's parameters
  size_t bucket = 0;
  ShardRange range;
  torch::Tensor tensor;  // a 1-D view of the parameter's memory, what the optimizer holds
};

// Reduce-scatters a bucket into the block that block_of(bucket) gives, which the owner picks
// up at the end of backward (Note [ZeRO gradients]).
class ReduceScatterHook final : public CommHook {
 public:
  explicit ReduceScatterHook(std::function<torch::Tensor(const GradBucket&)> block_of)
      : block_of_(std::move(block_of)) {}

  PendingReduction start(Group& group, GradBucket& bucket) override {
    const torch::Tensor block = block_of_(bucket);
    CollectiveOptions options;
    options.op = ReduceOp::kAvg;
    options.site = call_sites::kZeroGradients;
    options.stream = current_stream(bucket.buffer);
    return {group.reduce_scatter_async(bucket_buffer(bucket), tensor_buffer(block), options),
            nullptr,
            {},  // reduced: the bucket itself
            std::nullopt};
  }
  std::string name() const override { return "zero_reduce_scatter"; }

 private:
  std::function<torch::Tensor(const GradBucket&)> block_of_;
};

void check_options(const ZeroOptions& options) {
  COHORT_CHECK(options.stage == 1 || options.stage == 2, "ZeroDataParallel: stage ", options.stage,
               " is not one this class runs: it runs ZeRO stages 1 (optimizer state sharded) "
               "and 2 (gradients too)");
  COHORT_CHECK(options.ddp.comm_hook == nullptr,
               "ZeroDataParallel: ZeroOptions::ddp.comm_hook must be null; ZeRO reduces each "
               "bucket with its own reduce-scatter");
}

// Ranks of different stages would keep different buckets and run different collectives; say
// so at once, in ZeRO's words (issue 35: the mismatch surfaced in "DistributedDataParallel's
// constructor").
void check_same_stage(Group& group, int stage) {
  CollectiveOptions options;
  options.site = call_sites::kZeroConstructor;
  const std::string difference =
      first_disagreement(group, {detail::concat("stage=", stage)}, "option", options);
  if (difference.empty()) return;
  throw ConfigError(detail::concat("ZeroDataParallel: the ranks were given different ZeroOptions: ",
                                   difference, ". Give every rank the same options"));
}

}  // namespace

class ZeroDataParallel::Impl {
 public:
  Impl(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<Group> group, ZeroOptions options)
      : group_(group),
        stage_(options.stage),
        timeline_(options.ddp.timeline),
        gradient_memory_(std::make_shared<GradientMemory>()) {
    check_options(options);
    COHORT_CHECK(group != nullptr, "ZeroDataParallel: the group is null");
    check_same_stage(*group, stage_);
    DdpOptions ddp = options.ddp;
    ddp.comm_hook = std::make_shared<ReduceScatterHook>(
        [this](const GradBucket& bucket) { return reduced_block_of(bucket); });
    ddp.rebuild_buckets = false;
    ddp.gradient_as_bucket_view = true;
    ReducerSharding sharding;
    sharding.pad_to = group->size();
    sharding.transient_buckets = stage_ == 2;
    sharding.on_reduced = [this](const std::vector<char>& used) { take_reduced_blocks(used); };
    if (stage_ == 1) {
      sharding.before_rewrite = [this](size_t b, const torch::Tensor& buffer) {
        move_grads_out_of_bucket(b, buffer);
      };
    }
    sharding.collective = "reduce_scatter";
    sharding.memory = gradient_memory_;
    sharding.owner = "ZeroDataParallel";
    sharding.constructor = call_sites::kZeroConstructor;
    ddp_ = std::make_unique<DistributedDataParallel>(
        make_sharded_ddp(std::move(module), std::move(group), std::move(ddp), sharding));
    const Reducer* reducer = &reducer_of(*ddp_);
    gradient_memory_->set_untracked([reducer] { return reducer->unbucketed_gradient_bytes(); });
    layout_ = reducer->layout();
    blocks_.resize(layout_.size());
    flatten_parameters();
    cut_shards();
  }

  ~Impl() { gradient_memory_->set_untracked(nullptr); }  // tensors it counts may outlive us

  // Note [Flat parameters].
  void flatten_parameters() {
    torch::NoGradGuard no_grad;
    const auto& parameters = reducer_of(*ddp_).parameters();
    for (const BucketLayout& bucket : layout_) {
      for (size_t p : bucket.members) {
        COHORT_CHECK(parameters[p].tensor.is_contiguous(), "ZeroDataParallel: parameter '",
                     parameters[p].name,
                     "' is not contiguous; ZeRO keeps the parameters in one flat tensor per "
                     "bucket (make it contiguous before wrapping the model)");
      }
      const auto& first = parameters[bucket.members.front()].tensor;
      auto flat = torch::empty({bucket.numel}, first.options().requires_grad(false));
      const int64_t used = bucket.offsets.back() + parameters[bucket.members.back()].tensor.numel();
      flat.narrow(0, used, bucket.numel - used).zero_();  // the padding
      for (size_t i = 0; i < bucket.members.size(); ++i) {
        const auto& tensor = parameters[bucket.members[i]].tensor;
        auto place = autograd_compat::alias_into(flat, bucket.offsets[i], tensor);
        place.copy_(tensor.detach());
        tensor.set_data(place);
      }
      flat_.push_back(std::move(flat));
    }
  }

  // Note [Shard layout]: a shard is the part of its bucket's flat tensor in this rank's block.
  void cut_shards() {
    const auto& parameters = reducer_of(*ddp_).parameters();
    shards_.resize(parameters.size());
    for (size_t b = 0; b < layout_.size(); ++b) {
      const BucketLayout& bucket = layout_[b];
      for (size_t i = 0; i < bucket.members.size(); ++i) {
        const size_t p = bucket.members[i];
        const auto& parameter = parameters[p];
        Shard& shard = shards_[p];
        shard.parameter = p;
        shard.bucket = b;
        shard.range = shard_of(bucket.offsets[i], parameter.tensor.numel(), bucket.numel,
                               group_->size(), group_->rank());
        shard.tensor = autograd_compat::alias_range(parameter.tensor, shard.range.parameter_offset,
                                                    shard.range.length);
        shard_index_[shard.tensor.unsafeGetTensorImpl()] = p;
      }
    }
  }

  // Where bucket b's reduce-scatter puts this rank's block (Note [ZeRO gradients]): stage 1 in
  // place, stage 2 a tensor of its own (counted: Note [Gradient memory]).
  torch::Tensor reduced_block_of(const GradBucket& bucket) {
    const int64_t block = bucket.buffer.numel() / group_->size();
    auto& reduced = blocks_[bucket.index];
    if (stage_ == 1) {
      reduced = bucket.buffer.narrow(0, block * group_->rank(), block);
    } else {
      reduced = GradientMemory::allocate(gradient_memory_, block, bucket.buffer.options());
    }
    return reduced;
  }

  // Stage 1, before bucket b is written again: the shards' .grad that still view its reduced
  // block (zeroed in place by zero_grad(), or kept to accumulate over synchronized backward
  // calls) move to memory of their own.
  void move_grads_out_of_bucket(size_t b, const torch::Tensor& buffer) {
    torch::NoGradGuard no_grad;
    for (size_t p : layout_[b].members) {
      auto& grad = shards_[p].tensor.mutable_grad();
      if (!grad.defined() || !grad.storage().is_alias_of(buffer.storage())) continue;
      auto own = GradientMemory::allocate(gradient_memory_, grad.numel(), grad.options());
      own.copy_(grad);
      grad = own;
    }
  }

  // Note [ZeRO gradients]; the reducer's on_reduced, at the end of a synchronized backward.
  void take_reduced_blocks(const std::vector<char>& used) {
    torch::NoGradGuard no_grad;
    for (Shard& shard : shards_) {
      if (!used[shard.parameter] || shard.range.length == 0) continue;
      auto part = autograd_compat::alias_range(blocks_[shard.bucket], shard.range.block_offset,
                                               shard.range.length);
      auto& grad = shard.tensor.mutable_grad();
      if (grad.defined()) {
        grad.add_(part);
      } else {
        grad = part;
      }
    }
    for (auto& block : blocks_) block = torch::Tensor();
  }

  std::vector<torch::Tensor> shard_tensors() const {
    std::vector<torch::Tensor> tensors;
    for (const Shard& shard : shards_) tensors.push_back(shard.tensor);
    return tensors;
  }

  // Note [ZeRO step].
  void step(torch::optim::Optimizer& optimizer) {
    check_optimizer(optimizer);
    agree_on_optimizer(*group_, optimizer, "ZeroDataParallel", agreed_optimizer_);
    torch::NoGradGuard no_grad;
    if (group_->size() == 1) {  // the shards are the whole parameters
      optimizer.step();
      return;
    }
    std::vector<std::shared_ptr<Work>> works;
    try {
      for (size_t b = 0; b < layout_.size(); ++b) {
        step_bucket(optimizer, b);
        works.push_back(gather_bucket(b));
      }
    } catch (const std::exception& e) {
      // The peers would wait for this rank's all-gathers until their deadline. The ones in
      // flight write into the parameters: let them end before the error leaves.
      group_->abort(
          detail::concat("ZeroDataParallel::step failed on rank ", group_->rank(), ": ", e.what()));
      for (auto& work : works) {
        try {
          work->wait();
        } catch (...) {  // the abort's own error; the step's is the one to report
        }
      }
      throw;
    }
    {
      TraceSpan wait(timeline_.get(), "wait for parameters", "comm", "main");
      for (size_t b = 0; b < works.size(); ++b) {
        works[b]->wait();
        if (timeline_) {
          timeline_->record({"bucket " + std::to_string(b) + " allgather", "comm", "comm",
                             works[b]->started_at(), works[b]->finished_at()});
        }
      }
    }
    // The all-gathers wrote the parameters behind autograd's back: count it as an in-place
    // change, so that a backward through a graph built before this step fails as it would in
    // one process after optimizer.step().
    for (const auto& parameter : reducer_of(*ddp_).parameters()) {
      parameter.tensor.unsafeGetTensorImpl()->bump_version();
    }
  }

  // All-gathers bucket b's flat tensor in place (Note [Flat parameters]).
  std::shared_ptr<Work> gather_bucket(size_t b) {
    const torch::Tensor& flat = flat_[b];
    const int64_t block = layout_[b].numel / group_->size();
    CollectiveOptions options;
    options.site = call_sites::kZeroParameters;
    options.stream = current_stream(flat);
    return group_->allgather_async(tensor_buffer(flat.narrow(0, block * group_->rank(), block)),
                                   tensor_buffer(flat), options);
  }

  // Runs the optimizer with its param groups narrowed to bucket b's shards.
  void step_bucket(torch::optim::Optimizer& optimizer, size_t b) {
    std::vector<std::vector<torch::Tensor>> all;
    for (auto& group : optimizer.param_groups()) {
      all.push_back(group.params());
      std::vector<torch::Tensor> mine;
      for (const auto& tensor : group.params()) {
        if (shards_[shard_index_.at(tensor.unsafeGetTensorImpl())].bucket == b) {
          mine.push_back(tensor);
        }
      }
      group.params() = std::move(mine);
    }
    auto restore = [&] {
      for (size_t g = 0; g < all.size(); ++g) optimizer.param_groups()[g].params() = all[g];
    };
    try {
      optimizer.step();
    } catch (...) {
      restore();
      throw;
    }
    restore();
  }

  // The optimizer must update elementwise and hold only this object's shards.
  void check_optimizer(const torch::optim::Optimizer& optimizer) const {
    check_sharded_optimizer(optimizer, "ZeroDataParallel", "zero", group_->size(),
                            [this](const torch::Tensor& t) {
                              return shard_index_.count(t.unsafeGetTensorImpl()) != 0;
                            });
  }

  // Note [Gradient memory]: parameters and gradients as allocated (with the padding).
  MemoryReport memory(const torch::optim::Optimizer* optimizer) const {
    MemoryReport report;
    for (const auto& flat : flat_) report.parameters += flat.nbytes();
    report.gradients = gradient_memory_->held() + reducer_of(*ddp_).unbucketed_gradient_bytes();
    report.peak_gradients = std::max(report.gradients, gradient_memory_->peak());
    if (optimizer != nullptr) report.optimizer_state = optimizer_state_bytes(*optimizer);
    return report;
  }

  std::shared_ptr<Group> group_;
  int stage_;
  std::shared_ptr<Timeline> timeline_;
  std::shared_ptr<GradientMemory> gradient_memory_;
  std::unique_ptr<DistributedDataParallel> ddp_;
  std::vector<BucketLayout> layout_;
  std::vector<torch::Tensor> flat_;  // per bucket: the parameters' memory (Note [Flat parameters])
  std::vector<Shard> shards_;        // by parameter index
  std::unordered_map<const void*, size_t> shard_index_;
  std::vector<torch::Tensor> blocks_;       // per bucket, between its reduce-scatter and its pickup
  const void* agreed_optimizer_ = nullptr;  // the optimizer every rank was found to share
};

ZeroDataParallel::ZeroDataParallel(std::shared_ptr<torch::nn::Module> module,
                                   std::shared_ptr<Group> group, ZeroOptions options)
    : impl_(std::make_unique<Impl>(std::move(module), std::move(group), std::move(options))) {}
ZeroDataParallel::~ZeroDataParallel() = default;
ZeroDataParallel::ZeroDataParallel(ZeroDataParallel&&) noexcept = default;
ZeroDataParallel& ZeroDataParallel::operator=(ZeroDataParallel&&) noexcept = default;

std::vector<torch::Tensor> ZeroDataParallel::parameters() const {
  return impl_->shard_tensors();
}

torch::OrderedDict<std::string, torch::Tensor> ZeroDataParallel::named_parameters() const {
  torch::OrderedDict<std::string, torch::Tensor> named;
  const auto& parameters = reducer_of(*impl_->ddp_).parameters();
  for (size_t p = 0; p < parameters.size(); ++p) {
    named.insert(parameters[p].name, impl_->shards_[p].tensor);
  }
  return named;
}

void ZeroDataParallel::step(torch::optim::Optimizer& optimizer) {
  impl_->step(optimizer);
}

DistributedDataParallel::NoSync ZeroDataParallel::no_sync() {
  return impl_->ddp_->no_sync();
}

MemoryReport ZeroDataParallel::memory(const torch::optim::Optimizer* optimizer) const {
  return impl_->memory(optimizer);
}

torch::nn::Module& ZeroDataParallel::module() const {
  return impl_->ddp_->module();
}
Group& ZeroDataParallel::group() const {
  return *impl_->group_;
}
int ZeroDataParallel::stage() const {
  return impl_->stage_;
}
const IterationStats& ZeroDataParallel::last_iteration_stats() const {
  return impl_->ddp_->last_iteration_stats();
}

ShardedParameters ZeroDataParallel::sharded_parameters() {
  ShardedParameters view;
  view.shards = parameters();
  view.group = &group();
  view.norm_group = &group();
  view.flag_group = group().size() > 1 ? &group() : nullptr;
  view.module = &module();
  view.step = [this](torch::optim::Optimizer& optimizer) { step(optimizer); };
  view.holdings = [this] { return detail::zero_holdings(*this); };
  return view;
}

}  // namespace cohort
