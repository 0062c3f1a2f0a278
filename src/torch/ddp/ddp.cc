#include "cohort/torch/ddp/ddp.h"

#include <sstream>
#include <unordered_set>

#include "call_sites.h"
#include "coalesced_broadcast.h"
#include "cohort/comm/agreement.h"
#include "cohort/core/check.h"
#include "ddp/reducer.h"
#include "model_check.h"

namespace cohort {
namespace {

struct NamedTensor {
  std::string name;
  torch::Tensor tensor;
};

// Each tensor once (a parameter shared by two layers is registered twice), in registration
// order. Parameters that do not require grad are frozen: DDP leaves them alone.
std::vector<NamedTensor> unique_tensors(const torch::OrderedDict<std::string, torch::Tensor>& all,
                                        bool only_requiring_grad) {
  std::vector<NamedTensor> tensors;
  std::unordered_set<const void*> seen;
  for (const auto& item : all) {
    const auto& tensor = item.value();
    if (only_requiring_grad && !tensor.requires_grad()) continue;
    if (!seen.insert(tensor.unsafeGetTensorImpl()).second) continue;
    tensors.push_back({item.key(), tensor});
  }
  return tensors;
}

std::string describe(const std::string& kind, const NamedTensor& named) {
  std::ostringstream out;
  out << kind << " '" << named.name << "' " << c10::toString(named.tensor.scalar_type()) << " "
      << named.tensor.sizes();
  return out.str();
}

std::vector<torch::Tensor> tensors_of(const std::vector<NamedTensor>& named) {
  std::vector<torch::Tensor> tensors;
  for (const auto& n : named) tensors.push_back(n.tensor);
  return tensors;
}

}  // namespace

class DistributedDataParallel::Impl {
 public:
  Impl(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<Group> group, DdpOptions options,
       const ReducerSharding& sharding = {})
      : module_(std::move(module)),
        group_(std::move(group)),
        options_(std::move(options)),
        owner_(sharding.owner),
        constructor_(sharding.constructor) {
    COHORT_CHECK(module_ != nullptr, "DistributedDataParallel: the module is null");
    COHORT_CHECK(group_ != nullptr, "DistributedDataParallel: the group is null");
    tune_malloc_for_training();
    parameters_ = unique_tensors(module_->named_parameters(/*recurse=*/true), true);
    // Frozen parameters are not trained but must start equal too (as PyTorch's DDP does).
    const auto every_parameter = unique_tensors(module_->named_parameters(/*recurse=*/true), false);
    buffers_ = unique_tensors(module_->named_buffers(/*recurse=*/true), false);
    check_same_model(every_parameter);
    check_same_options();
    broadcast_coalesced(*group_, tensors_of(every_parameter), 0, constructor_);
    broadcast_coalesced(*group_, tensors_of(buffers_), 0, constructor_);
    std::vector<Reducer::Parameter> reduced;
    for (const auto& p : parameters_) reduced.push_back({p.name, p.tensor});
    ReducerSharding counted = sharding;
    if (!counted.memory) {  // plain DDP: its buckets are counted here, for memory()
      counted.memory = gradient_memory_ = std::make_shared<GradientMemory>();
    }
    reducer_ = std::make_unique<Reducer>(
        group_, std::move(reduced), options_, [this](int root) { sync_buffers(root); }, counted);
    if (gradient_memory_) {
      const Reducer* reducer = reducer_.get();
      gradient_memory_->set_untracked([reducer] { return reducer->unbucketed_gradient_bytes(); });
    }
  }

  ~Impl() {
    if (gradient_memory_) gradient_memory_->set_untracked(nullptr);  // buckets may outlive us
  }

  MemoryReport memory(const torch::optim::Optimizer* optimizer) const {
    MemoryReport report;
    std::unordered_set<const void*> storages;
    for (const auto& item : module_->named_parameters(/*recurse=*/true)) {
      const auto& storage = item.value().storage();
      if (storages.insert(storage.unsafeGetStorageImpl()).second) {
        report.parameters += storage.nbytes();
      }
    }
    if (gradient_memory_) {
      report.gradients = gradient_memory_->held() + reducer_->unbucketed_gradient_bytes();
      report.peak_gradients = std::max(report.gradients, gradient_memory_->peak());
    }
    if (optimizer != nullptr) report.optimizer_state = optimizer_state_bytes(*optimizer);
    return report;
  }

  void check_same_model(const std::vector<NamedTensor>& every_parameter) {
    std::vector<std::string> entries;
    for (const auto& p : every_parameter) {
      entries.push_back(describe(p.tensor.requires_grad() ? "parameter" : "frozen parameter", p));
    }
    for (const auto& b : buffers_) entries.push_back(describe("buffer", b));
    check_same_on_all_ranks(*group_, entries, "parameter/buffer", constructor_, owner_);
  }

  // Options under which the ranks' gradients, buckets or buffers would differ if the ranks
  // disagreed on them (the collectives would stay in step, so nothing else would say so).
  void check_same_options() {
    const DdpOptions& o = options_;
    const std::vector<std::string> settings = {
        detail::concat("comm_hook=", o.comm_hook ? o.comm_hook->name() : "(default allreduce)"),
        detail::concat("bucket_cap_mb=", o.bucket_cap_mb),
        detail::concat("first_bucket_cap_mb=", o.first_bucket_cap_mb),
        detail::concat("broadcast_buffers=", o.broadcast_buffers),
        detail::concat("find_unused_parameters=", o.find_unused_parameters),
        detail::concat("static_graph=", o.static_graph),
        detail::concat("gradient_as_bucket_view=", o.gradient_as_bucket_view),
        detail::concat("rebuild_buckets=", o.rebuild_buckets),
    };
    CollectiveOptions options;
    options.site = constructor_;
    const std::string difference = first_disagreement(*group_, settings, "option", options);
    if (difference.empty()) return;
    throw ConfigError(detail::concat(owner_, ": the ranks were given different DdpOptions: ",
                                     difference, ". Give every rank the same options"));
  }

  void sync_buffers(int root) {
    broadcast_coalesced(*group_, tensors_of(buffers_), root, call_sites::kDdpBuffers);
  }

  void join(const std::function<void()>& train) {
    reducer_->set_join_mode(true);
    try {
      train();
    } catch (const std::exception& e) {
      reducer_->set_join_mode(false);
      // The other ranks would wait for this one's collectives until their deadline.
      group_->abort(
          detail::concat("rank ", group_->rank(),
                         " left DistributedDataParallel::join with an error: ", e.what()));
      throw;
    }
    reducer_->set_join_mode(false);
    while (reducer_->shadow_iteration()) {
    }
    // Finished ranks skipped optimizer steps: everyone takes the last trainer's state.
    const int root = reducer_->authority();
    broadcast_coalesced(*group_, tensors_of(parameters_), root, call_sites::kDdpJoin);
    sync_buffers(root);
  }

  std::shared_ptr<torch::nn::Module> module_;
  std::shared_ptr<Group> group_;
  DdpOptions options_;
  std::string owner_;     // "DistributedDataParallel", or ZeRO's class (ReducerSharding)
  CallSite constructor_;  // the site of the constructor's collectives
  std::vector<NamedTensor> parameters_;
  std::vector<NamedTensor> buffers_;
  std::shared_ptr<GradientMemory> gradient_memory_;  // plain DDP's; ZeRO counts its own
  std::unique_ptr<Reducer> reducer_;
};

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                                                 std::shared_ptr<Group> group, DdpOptions options)
    : impl_(std::make_unique<Impl>(std::move(module), std::move(group), std::move(options))) {}

DistributedDataParallel::DistributedDataParallel(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

DistributedDataParallel make_sharded_ddp(std::shared_ptr<torch::nn::Module> module,
                                         std::shared_ptr<Group> group, DdpOptions options,
                                         const ReducerSharding& sharding) {
  return DistributedDataParallel(std::make_unique<DistributedDataParallel::Impl>(
      std::move(module), std::move(group), std::move(options), sharding));
}

MemoryReport DistributedDataParallel::memory(const torch::optim::Optimizer* optimizer) const {
  return impl_->memory(optimizer);
}

Reducer& reducer_of(const DistributedDataParallel& ddp) {
  return *ddp.impl_->reducer_;
}

DistributedDataParallel::~DistributedDataParallel() = default;
DistributedDataParallel::DistributedDataParallel(DistributedDataParallel&&) noexcept = default;
DistributedDataParallel& DistributedDataParallel::operator=(DistributedDataParallel&&) noexcept =
    default;

torch::nn::Module& DistributedDataParallel::module() const {
  return *impl_->module_;
}
Group& DistributedDataParallel::group() const {
  return *impl_->group_;
}
const DdpOptions& DistributedDataParallel::options() const {
  return impl_->options_;
}

NoSyncGuard::NoSyncGuard(Reducer* reducer, const char* owner) : reducer_(reducer) {
  COHORT_CHECK(!reducer_->no_sync(), owner, "::no_sync: already inside a no_sync() guard");
  reducer_->set_no_sync(true);
}
NoSyncGuard::NoSyncGuard(NoSyncGuard&& other) noexcept : reducer_(other.reducer_) {
  other.reducer_ = nullptr;
}
NoSyncGuard& NoSyncGuard::operator=(NoSyncGuard&& other) noexcept {
  if (this != &other) {
    release();  // the guard this one held ends here
    reducer_ = other.reducer_;
    other.reducer_ = nullptr;
  }
  return *this;
}
NoSyncGuard::~NoSyncGuard() {
  release();
}
void NoSyncGuard::release() noexcept {
  if (reducer_ != nullptr) reducer_->set_no_sync(false);
  reducer_ = nullptr;
}
DistributedDataParallel::NoSync DistributedDataParallel::no_sync() {
  return NoSync(impl_->reducer_.get(), "DistributedDataParallel");
}

void DistributedDataParallel::join(const std::function<void()>& train) {
  impl_->join(train);
}

void DistributedDataParallel::broadcast_buffers() {
  impl_->sync_buffers(0);
}

const IterationStats& DistributedDataParallel::last_iteration_stats() const {
  return impl_->reducer_->last_iteration_stats();
}

void DistributedDataParallel::rebucket(double bucket_cap_mb) {
  COHORT_CHECK(bucket_cap_mb > 0, "DistributedDataParallel::rebucket: the cap must be positive, got ",
               bucket_cap_mb);
  impl_->reducer_->rebucket(bucket_cap_mb);
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_parameter_names() const {
  return impl_->reducer_->bucket_parameter_names();
}

}  // namespace cohort
