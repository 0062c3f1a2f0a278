// cohort::Group's construction, its accessors and abort. Its collectives are in
// group_collectives.cc, split in group_split.cc, Group::create (TCP) in group_create.cc, the
// machinery behind them in group_impl.{h,cc} (docs/architecture.md).
#include "cohort/comm/group.h"

#include "backends/collective_engine.h"
#include "cohort/comm/inproc_transport.h"
#include "cohort/comm/prefix_store.h"
#include "cohort/core/check.h"
#include "group/group_impl.h"

namespace cohort {

Group::Group(std::unique_ptr<Transport> transport, std::shared_ptr<Store> store,
             GroupOptions options) {
  COHORT_CHECK(transport != nullptr, "Group needs a transport");
  COHORT_CHECK(store != nullptr, "Group needs a store shared by all ranks");
  impl_ = std::make_unique<Impl>(std::move(transport), std::move(store), options.resolved());
}

Group::Group(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  COHORT_INTERNAL_ASSERT(impl_ != nullptr, "a Group needs its machinery");
}

Group::~Group() = default;

std::shared_ptr<Group> Group::create_inproc(std::shared_ptr<InprocFabric> fabric, int rank,
                                            GroupOptions options) {
  COHORT_CHECK(fabric != nullptr, "create_inproc needs a fabric");
  auto store = std::make_shared<PrefixStore>("g/" + options.name, fabric->store());
  auto group = std::make_shared<Group>(std::make_unique<InprocTransport>(fabric, rank), store,
                                       std::move(options));
  group->impl_->share_one_process();
  return group;
}

int Group::rank() const {
  return impl_->rank();
}
int Group::size() const {
  return impl_->size();
}
int Group::local_rank() const {
  return impl_->topology().local_rank();
}
int Group::local_size() const {
  return impl_->topology().local_size();
}
int Group::node_rank() const {
  return impl_->topology().node_rank();
}
int Group::num_nodes() const {
  return impl_->topology().num_nodes();
}

Backend Group::backend() const {
  const CollectiveEngine* engine = impl_->engine();
  return engine != nullptr ? engine->kind() : Backend::kNative;
}

bool Group::takes_device_buffers() const {
  return impl_->takes_device_buffers();
}

Algorithm Group::algorithm_for(CollectiveKind kind, size_t bytes,
                               const CollectiveOptions& opts) const {
  return impl_->algorithm_for(kind, bytes, opts);
}
const GroupOptions& Group::options() const {
  return impl_->options();
}
uint64_t Group::sequence_number() const {
  return impl_->sequence_number();
}

void Group::abort(const std::string& reason) noexcept {
  impl_->abort(std::make_exception_ptr(Error(reason)));
}

std::exception_ptr Group::error() const noexcept {
  return impl_->failure();
}

void Group::abort(std::exception_ptr error) noexcept {
  impl_->abort(std::move(error));
}

}  // namespace cohort
