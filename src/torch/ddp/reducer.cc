#include "ddp/reducer.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "call_sites.h"
#include "cohort/core/check.h"
#include "cohort/core/logging.h"
#include "cohort/torch/tensor_buffer.h"
#include "cohort/torch/tensor_memory.h"
#include "ddp/bucket_plan.h"

namespace cohort {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

size_t cap_bytes(double mebibytes) {
  COHORT_CHECK(std::isfinite(mebibytes) && mebibytes >= 0,
               "DdpOptions: bucket caps must be finite and >= 0 MiB, got ", mebibytes);
  return static_cast<size_t>(mebibytes * kMiB);
}

bool shares_memory(const torch::Tensor& a, const torch::Tensor& b) {
  return a.data_ptr() == b.data_ptr() && a.sizes() == b.sizes() && a.strides() == b.strides();
}

std::string join_names(const std::vector<std::string>& names) {
  std::string joined;
  for (const auto& name : names) joined += (joined.empty() ? "" : ", ") + name;
  return joined;
}

std::string bytes_text(double bytes) {
  std::ostringstream out;
  out.precision(3);
  if (bytes >= kMiB) {
    out << bytes / kMiB << " MiB";
  } else if (bytes >= 1024) {
    out << bytes / 1024 << " KiB";
  } else {
    out << bytes << " B";
  }
  return out.str();
}

}  // namespace

// ---- Note [Gradient memory]

torch::Tensor GradientMemory::allocate(const std::shared_ptr<GradientMemory>& memory, int64_t numel,
                                       const torch::TensorOptions& options) {
  return track(memory, torch::empty({numel}, options.requires_grad(false)));
}

torch::Tensor GradientMemory::track(const std::shared_ptr<GradientMemory>& memory,
                                    torch::Tensor real) {
  if (memory == nullptr) return real;
  const int64_t numel = real.numel();
  const size_t bytes = real.nbytes();
  memory->add(bytes);
  // The returned tensor's storage keeps `real` alive; freeing it frees `real` and counts.
  return torch::from_blob(
      real.data_ptr(), {numel}, [real, memory, bytes](void*) { memory->sub(bytes); },
      real.options());
}

void GradientMemory::set_untracked(std::function<size_t()> untracked) {
  std::lock_guard<std::mutex> lock(mutex_);
  untracked_ = std::move(untracked);
}

void GradientMemory::add(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  held_ += bytes;
  peak_ = std::max(peak_, held_ + (untracked_ ? untracked_() : 0));
}

void GradientMemory::sub(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  held_ -= bytes;
}

size_t GradientMemory::held() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return held_;
}

size_t GradientMemory::peak() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_;
}

// ---- the reducer

Reducer::Reducer(std::shared_ptr<Group> group, std::vector<Parameter> parameters,
                 const DdpOptions& options, std::function<void(int)> sync_buffers,
                 ReducerSharding sharding)
    : group_(std::move(group)),
      parameters_(std::move(parameters)),
      options_(options),
      hook_(options.comm_hook ? options.comm_hook : allreduce_hook()),
      alone_with_default_hook_(group_->size() == 1 && !options.comm_hook),
      sync_buffers_(std::move(sync_buffers)),
      sharding_(std::move(sharding)),
      ready_(parameters_.size(), 0),
      filled_with_zeros_(parameters_.size(), 0),
      join_flag_(torch::zeros({1}, torch::kInt32)),
      used_since_sync_(parameters_.size(), 0),
      rebuilt_(!options.rebuild_buckets) {
  // Buckets live on the parameters' device (Note [Device buckets]); one device per model.
  for (const auto& parameter : parameters_) {
    const auto device = parameter.tensor.device();
    COHORT_CHECK(device.is_cpu() || device.is_cuda(), "DistributedDataParallel: parameter '",
                 parameter.name, "' is on ", device,
                 "; DDP reduces CPU tensors, and CUDA tensors on an NCCL group");
    COHORT_CHECK(device == parameters_.front().tensor.device(),
                 "DistributedDataParallel: parameter '", parameter.name, "' is on ", device,
                 " but parameter '", parameters_.front().name, "' is on ",
                 parameters_.front().tensor.device(),
                 "; DDP needs the whole model on one device (one GPU per rank)");
    to_dtype(parameter.tensor.scalar_type());  // throws for types cohort cannot reduce
  }
  build_buckets(reverse_registration_order());
  log_buckets("built");
  install_hooks();
}

Reducer::~Reducer() {
  for (size_t i = 0; i < accumulators_.size(); ++i) {
    autograd_compat::remove_post_accumulate_hook(*accumulators_[i], hook_keys_[i]);
  }
}

std::vector<size_t> Reducer::reverse_registration_order() const {
  std::vector<size_t> order(parameters_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = order.size() - 1 - i;
  return order;
}

void Reducer::install_hooks() {
  for (size_t i = 0; i < parameters_.size(); ++i) {
    auto accumulator = autograd_compat::gradient_accumulator(parameters_[i].tensor);
    hook_keys_.push_back(autograd_compat::add_post_accumulate_hook(
        *accumulator, [this, i] { on_gradient_accumulated(i); }));
    accumulators_.push_back(std::move(accumulator));
  }
}

// Lays the buckets out in `order` and points every parameter's .grad that already lives in a
// bucket at its place in the new one (copying the values), so a rebuild loses nothing.
void Reducer::build_buckets(const std::vector<size_t>& order) {
  BucketPlanInput plan{
      order, {}, {}, cap_bytes(options_.first_bucket_cap_mb), cap_bytes(options_.bucket_cap_mb)};
  for (const auto& parameter : parameters_) {
    plan.bytes.push_back(parameter.tensor.numel() * parameter.tensor.element_size());
    plan.kind.push_back(static_cast<int>(parameter.tensor.scalar_type()));
  }
  std::vector<Bucket> buckets;
  std::vector<Location> locations(parameters_.size());
  for (auto& members : plan_buckets(plan)) {
    Bucket bucket;
    for (size_t p : members) bucket.numel += parameters_[p].tensor.numel();
    bucket.numel = (bucket.numel + sharding_.pad_to - 1) / sharding_.pad_to * sharding_.pad_to;
    bucket.grads.index = buckets.size();
    for (size_t slot = 0; slot < members.size(); ++slot) {
      bucket.grads.parameters.push_back(parameters_[members[slot]].tensor);
      locations[members[slot]] = Location{buckets.size(), slot};
    }
    bucket.members = std::move(members);
    bucket.pending = bucket.members.size();
    if (!sharding_.transient_buckets) allocate(bucket);
    buckets.push_back(std::move(bucket));
  }
  torch::NoGradGuard no_grad;
  for (size_t p = 0; p < parameters_.size() && !buckets_.empty(); ++p) {
    auto& grad = parameters_[p].tensor.mutable_grad();
    if (!grad.defined() || !shares_memory(grad, alias_of(p))) continue;
    auto& fresh = buckets[locations[p].bucket].grads.gradients[locations[p].slot];
    fresh.copy_(grad);
    grad = fresh;
  }
  buckets_ = std::move(buckets);
  locations_ = std::move(locations);
}

// Gives a bucket its memory and the parameter-shaped views into it. Persistent buckets start
// zeroed (made once); a transient one (ZeRO-2) only has its padding zeroed: bind_gradient
// writes every parameter's part before the bucket is reduced.
void Reducer::allocate(Bucket& bucket) const {
  const auto& first = parameters_[bucket.members.front()].tensor;
  // Transient buckets are made when their first gradient arrives, in an order that differs
  // across ranks: they cannot be a collective's.
  const bool registered =
      options_.registered_buckets && !sharding_.transient_buckets && first.device().is_cpu();
  bucket.shared_memory = false;
  bucket.grads.registered = nullptr;
  if (registered) {
    bucket.grads.buffer =
        GradientMemory::track(sharding_.memory, registered_bucket(bucket, first.options()));
  } else {
    bucket.grads.buffer = GradientMemory::allocate(sharding_.memory, bucket.numel, first.options());
  }
  bucket.grads.gradients.clear();
  int64_t offset = 0;
  for (size_t p : bucket.members) {
    const auto& tensor = parameters_[p].tensor;
    bucket.grads.gradients.push_back(
        autograd_compat::alias_into(bucket.grads.buffer, offset, tensor));
    offset += tensor.numel();
  }
  torch::NoGradGuard no_grad;
  if (sharding_.transient_buckets) {
    bucket.grads.buffer.narrow(0, offset, bucket.numel - offset).zero_();
  } else {
    bucket.grads.buffer.zero_();
  }
}

// Note [Registered buckets]: a bucket in registered memory is allreduced in place through the
// node's shared memory (docs/algorithms.md, "Registered buffers"): each rank reduces its piece
// straight out of the peers' buckets and stores the result into them, instead of copying every
// byte into a staging window and back. Collective: every rank allocates the same buckets in
// the same order (build_buckets). The tensor's storage keeps the memory, and this rank's
// mappings of the peers' buckets, alive; it counts as CPU tensor memory while it lives
// (tensor_memory.h), as the allocator's buckets do.
torch::Tensor Reducer::registered_bucket(Bucket& bucket,
                                         const torch::TensorOptions& options) const {
  const size_t bytes = static_cast<size_t>(bucket.numel) *
                       c10::elementSize(c10::typeMetaToScalarType(options.dtype()));
  std::shared_ptr<RegisteredMemory> memory = group_->allocate_registered(bytes);
  bucket.shared_memory = memory->shared();
  bucket.grads.registered = memory;
  void* data = memory->data();
  auto counted = count_foreign_cpu_tensor_bytes(static_cast<int64_t>(bytes));
  return torch::from_blob(
      data, {bucket.numel}, [memory, counted](void*) {}, options.requires_grad(false));
}

void Reducer::free_memory(Bucket& bucket) {
  bucket.grads.buffer = torch::Tensor();
  bucket.grads.registered = nullptr;
  bucket.grads.gradients.clear();
}

const torch::Tensor& Reducer::alias_of(size_t parameter) {
  const Location& at = locations_[parameter];
  Bucket& bucket = buckets_[at.bucket];
  if (!bucket.grads.buffer.defined()) {
    release_reduced_buckets();
    allocate(bucket);
  }
  return bucket.grads.gradients[at.slot];
}

std::vector<BucketLayout> Reducer::layout() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<BucketLayout> layout;
  for (const auto& bucket : buckets_) {
    BucketLayout entry{bucket.members, {}, bucket.numel};
    int64_t offset = 0;
    for (size_t p : bucket.members) {
      entry.offsets.push_back(offset);
      offset += parameters_[p].tensor.numel();
    }
    layout.push_back(std::move(entry));
  }
  return layout;
}

size_t Reducer::bucket_nbytes(const Bucket& bucket) const {
  const auto& first = parameters_[bucket.members.front()].tensor;
  return static_cast<size_t>(bucket.numel) * first.element_size();
}

size_t Reducer::unbucketed_gradient_bytes() const {
  size_t bytes = 0;
  for (size_t p = 0; p < parameters_.size(); ++p) {
    const auto& grad = parameters_[p].tensor.grad();
    if (!grad.defined()) continue;
    const auto& buffer = buckets_[locations_[p].bucket].grads.buffer;
    if (buffer.defined() && grad.storage().is_alias_of(buffer.storage())) continue;
    bytes += grad.nbytes();
  }
  return bytes;
}

// Note [ZeRO gradients]: once ZeRO took the reduced blocks, a transient bucket holds nothing
// anyone needs. A persistent one holds this rank's reduced block, which the shards' .grad now
// view; the parameters' .grad (views of the whole bucket, this rank's own gradients and the
// reduced block mixed) are released instead of zeroing the bucket, so the next backward
// copies its gradients in (bind_gradient) and nothing is zeroed.
void Reducer::release_after_sharded_reduction() {
  for (auto& bucket : buckets_) {
    if (sharding_.transient_buckets) {
      free_memory(bucket);
      continue;
    }
    bucket.holds_reduced = true;
    for (size_t p : bucket.members) parameters_[p].tensor.mutable_grad() = torch::Tensor();
  }
}

void Reducer::set_no_sync(bool no_sync) {
  std::lock_guard<std::mutex> lock(mutex_);
  no_sync_ = no_sync;
}

bool Reducer::no_sync() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return no_sync_;
}

void Reducer::set_join_mode(bool on) {
  std::lock_guard<std::mutex> lock(mutex_);
  join_mode_ = on;
}

int Reducer::authority() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return authority_;
}

std::vector<std::vector<std::string>> Reducer::bucket_parameter_names() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::vector<std::string>> names;
  for (const auto& bucket : buckets_) {
    names.emplace_back();
    for (size_t p : bucket.members) names.back().push_back(parameters_[p].name);
  }
  return names;
}

// ---- one synchronized iteration, on the autograd thread

void Reducer::on_gradient_accumulated(size_t parameter) {
  std::lock_guard<std::mutex> lock(mutex_);
  used_since_sync_[parameter] = 1;
  if (no_sync_) {
    // The gradient accumulates in .grad; the next sync reduces it. ZeRO-1 keeps it in the
    // bucket, as its .grad did before the last reduction released them.
    if (sharding_.on_reduced && !sharding_.transient_buckets) bind_gradient(parameter);
    return;
  }
  release_reduced_buckets();
  if (!iteration_started_) start_iteration();
  try {
    COHORT_CHECK(!ready_[parameter], "DistributedDataParallel: parameter '",
                 parameters_[parameter].name,
                 "' got a gradient although static_graph found it unused in the first "
                 "iteration. The set of used parameters changes between iterations: turn "
                 "static_graph off and find_unused_parameters on.");
    if (!rebuilt_) ready_order_.push_back(parameter);
    bind_gradient(parameter);
    mark_ready(parameter);
  } catch (const std::exception& e) {
    // Mid-backward, the peers may already be reducing: stop them instead of leaving them
    // waiting for this rank until their deadline.
    group_->abort(e.what());
    throw;
  }
}

void Reducer::start_iteration() {
  iteration_started_ = true;
  autograd_compat::queue_end_of_backward_callback([this] { finish_iteration(); });
  if (join_mode_) {
    join_flag_.fill_(group_->rank());
    CollectiveOptions min;
    min.op = ReduceOp::kMin;
    min.site = call_sites::kDdpJoin;
    join_work_ = group_->allreduce_async(tensor_buffer(join_flag_), min);
  }
  if (static_unused_known_) {
    for (size_t p : static_unused_) mark_locally_unused(p);
  }
}

// Makes the parameter's .grad the bucket's copy of it (or copies it there).
void Reducer::bind_gradient(size_t parameter) {
  if (alone_with_default_hook_) return;  // nothing is sent: .grad may stay where autograd put it
  torch::NoGradGuard no_grad;
  auto& grad = parameters_[parameter].tensor.mutable_grad();
  const auto& alias = alias_of(parameter);
  if (grad.defined() && shares_memory(grad, alias)) return;
  Bucket& bucket = buckets_[locations_[parameter].bucket];
  if (bucket.holds_reduced) {
    bucket.holds_reduced = false;
    if (sharding_.before_rewrite) sharding_.before_rewrite(bucket.grads.index, bucket.grads.buffer);
  }
  if (grad.defined()) {
    COHORT_CHECK(grad.layout() == torch::kStrided, "DistributedDataParallel: parameter '",
                 parameters_[parameter].name,
                 "' has a sparse gradient, which DDP does not reduce (use a dense embedding)");
    alias.copy_(grad);
  } else {
    alias.zero_();
  }
  if (sharding_.transient_buckets) {
    grad = torch::Tensor();  // ZeRO-2: the bucket's copy is the only one
  } else if (options_.gradient_as_bucket_view) {
    grad = alias;
  }
}

void Reducer::mark_ready(size_t parameter) {
  ready_[parameter] = 1;
  Bucket& bucket = buckets_[locations_[parameter].bucket];
  if (--bucket.pending == 0) launch_ready_buckets();
}

// A parameter without a gradient this iteration on this rank contributes what its .grad
// holds (micro-batches accumulated under no_sync) or zeros.
void Reducer::mark_locally_unused(size_t parameter) {
  if (!parameters_[parameter].tensor.grad().defined()) filled_with_zeros_[parameter] = 1;
  bind_gradient(parameter);
  if (filled_with_zeros_[parameter]) parameters_[parameter].tensor.mutable_grad() = torch::Tensor();
  mark_ready(parameter);
}

// ZeRO-2: a transient bucket whose reduction is over gives its memory back at once, so that
// only the buckets still in flight hold gradients.
void Reducer::release_reduced_buckets() {
  if (!sharding_.transient_buckets) return;
  for (size_t b = 0; b < next_to_launch_; ++b) {
    Bucket& bucket = buckets_[b];
    if (bucket.grads.buffer.defined() && bucket.reduction &&
        bucket.reduction->work->is_completed()) {
      free_memory(bucket);
    }
  }
}

void Reducer::launch_ready_buckets() {
  release_reduced_buckets();
  while (next_to_launch_ < buckets_.size() && buckets_[next_to_launch_].pending == 0) {
    Bucket& bucket = buckets_[next_to_launch_++];
    if (alone_with_default_hook_) continue;  // the average over one rank is the gradient
    bucket.launched_at = Clock::now();
    bucket.grads.iteration = synchronized_iterations_;
    bucket.reduction = hook_->start(*group_, bucket.grads);
  }
}

void Reducer::finish_iteration() {
  std::unique_lock<std::mutex> lock(mutex_);
  std::vector<std::string> unexpected_unused;
  pending_stats_ = IterationStats();
  TraceSpan wait_span(options_.timeline.get(), "wait for gradients", "comm", "main");
  const Clock::time_point start = Clock::now();
  try {
    finish_iteration_locked(unexpected_unused);
  } catch (...) {
    reset_iteration();
    throw;
  }
  pending_stats_.exposed_comm_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  stats_ = std::move(pending_stats_);
  ++synchronized_iterations_;
  reset_iteration();
  if (!unexpected_unused.empty()) {
    throw InvalidArgument(detail::concat(
        "DistributedDataParallel: these parameters got no gradient in this iteration: ",
        join_names(unexpected_unused),
        ". If the forward pass skips them on purpose, construct DDP with "
        "find_unused_parameters = true (or static_graph = true if it always skips the same "
        "ones); otherwise make sure the loss depends on them. The gradients of this iteration "
        "were reduced (unused ones as zeros) so the other ranks are not left waiting."));
  }
}

void Reducer::finish_iteration_locked(std::vector<std::string>& unexpected_unused) {
  const bool tolerate_unused = options_.find_unused_parameters || options_.static_graph;
  for (size_t p = 0; p < parameters_.size(); ++p) {
    if (ready_[p]) continue;
    if (!tolerate_unused) unexpected_unused.push_back(parameters_[p].name);
    if (options_.static_graph && !static_unused_known_) static_unused_.push_back(p);
    mark_locally_unused(p);
  }
  static_unused_known_ = options_.static_graph;
  COHORT_INTERNAL_ASSERT(next_to_launch_ == buckets_.size(), "bucket ", next_to_launch_, " of ",
                         buckets_.size(), " was never launched");
  auto used_map_work = start_used_map_allreduce();
  if (join_work_) {
    join_work_->wait();
    authority_ = join_flag_.item<int>();
  }
  if (options_.broadcast_buffers) sync_buffers_(authority_);
  wait_for_reductions();
  if (used_map_work) used_map_work->wait();
  if (sharding_.on_reduced) {
    sharding_.on_reduced(used_somewhere());
    release_after_sharded_reduction();
  } else {
    forget_globally_unused_gradients();
  }
  if (!rebuilt_) rebuild_buckets_from_ready_order();
}

// Which parameters some rank gave a gradient since the last synchronization: the used-map
// where there is one, else every parameter static_graph did not find unused (without either
// option, an unused parameter is an error).
std::vector<char> Reducer::used_somewhere() const {
  std::vector<char> used(parameters_.size(), 1);
  if (used_map_.defined()) {
    const int32_t* used_anywhere = used_map_.data_ptr<int32_t>();
    for (size_t p = 0; p < used.size(); ++p) used[p] = used_anywhere[p] != 0;
  }
  if (options_.static_graph) {
    for (size_t p : static_unused_) used[p] = 0;
  }
  return used;
}

// Note [Bucket timings]: a bucket's latency runs from its launch (its gradients all ready) to
// the end of its collective on the communication thread; the part of it that computation did
// not hide shows up in the end-of-backward wait (IterationStats::exposed_comm_ms).
void Reducer::account(size_t bucket, const PendingReduction& reduction) {
  using Ms = std::chrono::duration<double, std::milli>;
  const Work& work = *reduction.work;
  BucketStats stats;
  stats.shared_memory = buckets_[bucket].shared_memory;
  stats.bytes = bucket_nbytes(buckets_[bucket]);
  if (reduction.reduced.defined()) {
    stats.reduced_dtype = reduction.reduced.scalar_type();
    stats.reduced_bytes = reduction.reduced.nbytes();
  } else {
    stats.reduced_dtype = parameters_[buckets_[bucket].members.front()].tensor.scalar_type();
    stats.reduced_bytes = stats.bytes;
  }
  if (reduction.wire_bytes) stats.reduced_bytes = *reduction.wire_bytes;
  stats.latency_ms = Ms(work.finished_at() - buckets_[bucket].launched_at).count();
  stats.comm_ms = Ms(work.finished_at() - work.started_at()).count();
  pending_stats_.buckets.push_back(stats);
  if (options_.timeline) {
    // A hook of the user's (compression, say) names itself and what it sent.
    const bool own_hook = options_.comm_hook && sharding_.collective == "allreduce";
    const std::string what = own_hook ? options_.comm_hook->name() + ", " +
                                            std::to_string(stats.reduced_bytes) + " bytes"
                                      : sharding_.collective;
    options_.timeline->record({"bucket " + std::to_string(bucket) + " " + what, "comm", "comm",
                               work.started_at(), work.finished_at()});
  }
}

std::shared_ptr<Work> Reducer::start_used_map_allreduce() {
  if (!options_.find_unused_parameters || options_.static_graph) return nullptr;
  used_map_ = torch::empty({static_cast<int64_t>(used_since_sync_.size())}, torch::kInt32);
  std::copy(used_since_sync_.begin(), used_since_sync_.end(), used_map_.data_ptr<int32_t>());
  CollectiveOptions max;
  max.op = ReduceOp::kMax;
  max.site = call_sites::kDdpUnusedParameters;
  return group_->allreduce_async(tensor_buffer(used_map_), max);
}

void Reducer::wait_for_reductions() {
  torch::NoGradGuard no_grad;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    Bucket& bucket = buckets_[b];
    if (!bucket.reduction) continue;  // nothing was sent (a world of one)
    PendingReduction reduction = std::move(*bucket.reduction);
    bucket.reduction.reset();
    reduction.work->wait();
    account(b, reduction);
    if (reduction.finish) reduction.finish();
    if (sharding_.transient_buckets) free_memory(bucket);
    if (options_.gradient_as_bucket_view || sharding_.transient_buckets) continue;
    for (size_t slot = 0; slot < bucket.members.size(); ++slot) {
      auto& grad = parameters_[bucket.members[slot]].tensor.mutable_grad();
      if (grad.defined()) grad.copy_(bucket.grads.gradients[slot]);
    }
  }
}

// A parameter no rank used since the last synchronization keeps an undefined .grad when it
// had none (so optimizers skip it, as they would in one process), instead of a zero.
void Reducer::forget_globally_unused_gradients() {
  // The used-map exists only with find_unused_parameters outside static_graph.
  const int32_t* used_anywhere = used_map_.defined() ? used_map_.data_ptr<int32_t>() : nullptr;
  for (size_t p = 0; p < parameters_.size(); ++p) {
    if (!filled_with_zeros_[p]) continue;
    const bool used_elsewhere = used_anywhere != nullptr && used_anywhere[p] != 0;
    if (used_elsewhere) {
      // Other ranks' gradients arrived in the bucket: this rank needs them in .grad too.
      if (options_.gradient_as_bucket_view) {
        parameters_[p].tensor.mutable_grad() = alias_of(p);
      } else {
        parameters_[p].tensor.mutable_grad() = alias_of(p).clone();
      }
    }
  }
}

void Reducer::rebucket(double bucket_cap_mb) {
  std::lock_guard<std::mutex> lock(mutex_);
  options_.bucket_cap_mb = bucket_cap_mb;
  ready_order_.clear();
  rebuilt_ = false;
}

// Note [Collective order]: the measured order comes from the authority rank so that every
// rank builds the same buckets.
void Reducer::rebuild_buckets_from_ready_order() {
  rebuilt_ = true;
  std::vector<int64_t> order(parameters_.size());
  std::vector<char> seen(parameters_.size(), 0);
  size_t next = 0;
  auto append = [&](size_t p) {
    if (seen[p]) return;
    seen[p] = 1;
    order[next++] = static_cast<int64_t>(p);
  };
  for (size_t p : ready_order_) append(p);
  for (size_t p : reverse_registration_order()) append(p);
  ready_order_.clear();
  CollectiveOptions from_authority;
  from_authority.root = authority_;
  group_->broadcast(make_buffer(order), from_authority);
  build_buckets(std::vector<size_t>(order.begin(), order.end()));
  log_buckets("rebuilt in the order gradients became ready in the last backward");
}

// COHORT_LOG_LEVEL=info: the group's rank 0 says how gradients are bucketed (every rank has
// the same buckets). Long lists are cut: the line is for a glance.
void Reducer::log_buckets(const char* what) const {
  if (group_->rank() != 0 || !log_enabled(LogLevel::kInfo)) return;
  constexpr size_t kBucketsShown = 16, kNamesShown = 4;
  double total = 0;
  for (const auto& bucket : buckets_) total += static_cast<double>(bucket_nbytes(bucket));
  std::ostringstream out;
  out << "DistributedDataParallel on group '" << group_->options().name << "' (" << group_->size()
      << " ranks): " << buckets_.size() << (buckets_.size() == 1 ? " bucket " : " buckets ") << what
      << ", " << parameters_.size() << " parameters, " << bytes_text(total)
      << " of gradients (caps: first " << options_.first_bucket_cap_mb << " MiB, then "
      << options_.bucket_cap_mb << " MiB; hook: " << (options_.comm_hook ? "custom" : "allreduce")
      << ")";
  for (size_t b = 0; b < buckets_.size() && b < kBucketsShown; ++b) {
    const Bucket& bucket = buckets_[b];
    out << "; bucket " << b << ": " << bytes_text(static_cast<double>(bucket_nbytes(bucket)))
        << ", " << bucket.members.size()
        << (bucket.members.size() == 1 ? " parameter (" : " parameters (");
    for (size_t i = 0; i < bucket.members.size() && i < kNamesShown; ++i) {
      out << (i ? ", " : "") << parameters_[bucket.members[i]].name;
    }
    if (bucket.members.size() > kNamesShown)
      out << ", ... " << bucket.members.size() - kNamesShown << " more";
    out << ")";
  }
  if (buckets_.size() > kBucketsShown)
    out << "; ... " << buckets_.size() - kBucketsShown << " more buckets";
  log_message(LogLevel::kInfo, out.str());
}

void Reducer::reset_iteration() {
  iteration_started_ = false;
  next_to_launch_ = 0;
  join_work_.reset();
  used_map_ = torch::Tensor();
  std::fill(ready_.begin(), ready_.end(), 0);
  std::fill(filled_with_zeros_.begin(), filled_with_zeros_.end(), 0);
  std::fill(used_since_sync_.begin(), used_since_sync_.end(), 0);
  for (auto& bucket : buckets_) {
    bucket.pending = bucket.members.size();
    bucket.reduction.reset();
  }
}

// ---- join(): a finished rank mirrors Note [Collective order] with zero gradients

bool Reducer::shadow_iteration() {
  std::lock_guard<std::mutex> lock(mutex_);
  join_flag_.fill_(group_->size());
  CollectiveOptions min;
  min.op = ReduceOp::kMin;
  group_->allreduce(tensor_buffer(join_flag_), min);
  const int lowest_training = join_flag_.item<int>();
  if (lowest_training == group_->size()) return false;
  authority_ = lowest_training;
  std::fill(used_since_sync_.begin(), used_since_sync_.end(), 0);
  for (auto& bucket : buckets_) {
    if (!bucket.grads.buffer.defined()) allocate(bucket);
    bucket.grads.buffer.zero_();
    bucket.grads.iteration = synchronized_iterations_;
    bucket.reduction = hook_->start(*group_, bucket.grads);
  }
  auto used_map_work = start_used_map_allreduce();
  if (options_.broadcast_buffers) sync_buffers_(authority_);
  wait_for_reductions();
  if (used_map_work) used_map_work->wait();
  if (!rebuilt_) rebuild_buckets_from_ready_order();
  ++synchronized_iterations_;
  reset_iteration();
  return true;
}

}  // namespace cohort
