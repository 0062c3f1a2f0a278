#include "shard/flat_unit.h"

#include <sstream>

#include "autograd_compat.h"
#include "cohort/core/check.h"
#include "cohort/torch/tensor_buffer.h"

namespace cohort {
namespace {

void check_parameters(const UnitPlan& plan) {
  const torch::Tensor& first = plan.parameters.front().tensor;
  for (const UnitParameter& p : plan.parameters) {
    COHORT_CHECK(p.tensor.is_contiguous(), "FullyShardedDataParallel: parameter '", p.name,
                 "' is not contiguous; make it contiguous before wrapping the model");
    COHORT_CHECK(
        p.tensor.scalar_type() == first.scalar_type() && p.tensor.device() == first.device(),
        "FullyShardedDataParallel: unit '", plan.name, "' mixes parameters of dtype/device ",
        c10::toString(first.scalar_type()), "/", first.device(), " ('",
        plan.parameters.front().name, "') and ", c10::toString(p.tensor.scalar_type()), "/",
        p.tensor.device(), " ('", p.name,
        "'); a unit is one flat tensor: put them in separate units (FsdpOptions::units)");
  }
}

}  // namespace

FlatUnit::FlatUnit(UnitPlan plan, int world, int rank, torch::Dtype compute_dtype, bool offload)
    : plan_(std::move(plan)), rank_(rank), compute_dtype_(compute_dtype) {
  check_parameters(plan_);
  torch::NoGradGuard no_grad;
  int64_t total = 0;
  for (size_t i = 0; i < plan_.parameters.size(); ++i) {
    offsets_.push_back(total);
    total += plan_.parameters[i].tensor.numel();
    if (plan_.parameters[i].tensor.requires_grad()) trainable_.push_back(i);
  }
  padded_ = std::max<int64_t>(1, (total + world - 1) / world) * world;
  const auto options = plan_.parameters.front().tensor.options().requires_grad(false);
  auto whole = torch::zeros({padded_}, options);
  for (size_t i = 0; i < plan_.parameters.size(); ++i) {
    const auto& p = plan_.parameters[i].tensor;
    whole.narrow(0, offsets_[i], p.numel()).copy_(p.detach().reshape({-1}));
  }
  const auto block = whole.narrow(0, rank * (padded_ / world), padded_ / world);
  // Note [FSDP CPU offload]: the shard in page-locked host memory.
  shard_ = offload ? block.to(torch::kCPU).pin_memory() : block.clone();
  flat_ = torch::empty({padded_}, options.dtype(compute_dtype));
  alias_parameters();
  autograd_compat::release_storage(flat_);
  cut_shard(world, rank);
}

void FlatUnit::alias_parameters() {
  for (size_t i = 0; i < plan_.parameters.size(); ++i) {
    const auto& p = plan_.parameters[i].tensor;
    p.set_data(autograd_compat::alias_into(flat_, offsets_[i], p));
  }
}

void FlatUnit::set_full_precision(bool full) {
  COHORT_CHECK(state_ == State::kFreed, "FlatUnit::set_full_precision: unit '", name(),
               "' is not freed");
  const torch::Dtype dtype = full ? shard_dtype() : compute_dtype_;
  if (dtype == flat_.scalar_type()) return;
  torch::NoGradGuard no_grad;
  // Views of padded_ elements of the new size need that many bytes behind them to be made.
  autograd_compat::allocate_storage(flat_, padded_ * c10::elementSize(dtype));
  flat_ = torch::empty({0}, flat_.options().dtype(dtype)).set_(flat_.storage(), 0, {padded_}, {1});
  alias_parameters();
  autograd_compat::release_storage(flat_);
}

ShardPart FlatUnit::cut_part(size_t p, int world, int rank) const {
  ShardPart part;
  part.parameter = p;
  part.range = shard_of(offsets_[p], plan_.parameters[p].tensor.numel(), padded_, world, rank);
  part.tensor = autograd_compat::alias_range(shard_, part.range.block_offset, part.range.length);
  return part;
}

void FlatUnit::cut_shard(int world, int rank) {
  for (size_t p : trainable_) parts_.push_back(cut_part(p, world, rank));
}

ShardPart FlatUnit::part_of(size_t p) const {
  for (const ShardPart& part : parts_) {
    if (part.parameter == p) return part;
  }
  return cut_part(p, static_cast<int>(padded_ / shard_.numel()), rank_);
}

void FlatUnit::start_gather(Group& group, const CollectiveOptions& options) {
  COHORT_CHECK(state_ == State::kFreed, "FlatUnit::start_gather: unit '", name(), "' is not freed");
  autograd_compat::allocate_storage(flat_, gathered_bytes());
  torch::NoGradGuard no_grad;
  if (group.size() == 1) {  // the shard is the whole unit: a copy (a cast), no collective
    flat_.copy_(shard_);
    state_ = State::kGathered;
    return;
  }
  state_ = State::kGathering;
  // A copy to the device under offload: asynchronous from page-locked memory, on the current
  // stream, which the all-gather is ordered after.
  staging_ = shard_.to(flat_.device(), flat_.scalar_type(), /*non_blocking=*/true);
  CollectiveOptions on_stream = options;
  on_stream.stream = current_stream(flat_);
  gather_ = group.allgather_async(tensor_buffer(staging_), tensor_buffer(flat_), on_stream);
}

void FlatUnit::wait_gathered() {
  if (state_ == State::kGathering) {
    gather_->wait();
    gather_.reset();
    staging_ = torch::Tensor();
  }
  COHORT_CHECK(state_ != State::kFreed, "FlatUnit::wait_gathered: unit '", name(),
               "' was not gathered");
  state_ = State::kGathered;
}

void FlatUnit::release() {
  if (state_ == State::kFreed) return;
  if (gather_) {
    try {
      gather_->wait();
    } catch (...) {  // the error reached whoever waited for the gather; the memory goes anyway
    }
    gather_.reset();
    staging_ = torch::Tensor();
  }
  autograd_compat::release_storage(flat_);
  state_ = State::kFreed;
}

void FlatUnit::fill_with_zeros() {
  release();
  autograd_compat::allocate_storage(flat_, gathered_bytes());
  torch::NoGradGuard no_grad;
  flat_.zero_();
  state_ = State::kGathered;
}

void FlatUnit::write_back_shard() {
  COHORT_CHECK(state_ == State::kGathered, "FlatUnit::write_back_shard: unit '", name(),
               "' is not gathered");
  torch::NoGradGuard no_grad;
  shard_.copy_(flat_.narrow(0, rank_ * shard_.numel(), shard_.numel()));
}

torch::Tensor FlatUnit::flatten_gradients(const std::vector<torch::Tensor>& gradients,
                                          torch::Dtype dtype) const {
  torch::NoGradGuard no_grad;
  auto out = torch::empty({padded_}, flat_.options().dtype(dtype));
  int64_t filled = 0;  // everything before this is written
  for (size_t i = 0; i < trainable_.size(); ++i) {
    const size_t p = trainable_[i];
    const int64_t offset = offsets_[p];
    const int64_t numel = plan_.parameters[p].tensor.numel();
    if (offset > filled) out.narrow(0, filled, offset - filled).zero_();  // frozen parameters
    auto slot = out.narrow(0, offset, numel);
    if (gradients[i].defined()) {
      slot.copy_(gradients[i].reshape({-1}));
    } else {
      slot.zero_();
    }
    filled = offset + numel;
  }
  if (padded_ > filled) out.narrow(0, filled, padded_ - filled).zero_();
  return out;
}

}  // namespace cohort
