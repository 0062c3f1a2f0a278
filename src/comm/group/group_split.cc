// Group::split: a collective over the whole group that makes the subgroups, each with its own
// transport, its own engine where the group has one, and the parent's topology restricted.
#include <algorithm>

#include "backends/collective_engine.h"
#include "cohort/comm/group.h"
#include "cohort/comm/prefix_store.h"
#include "cohort/core/check.h"
#include "group/group_access.h"
#include "group/group_host_collectives.h"
#include "group/group_impl.h"

namespace cohort {

std::shared_ptr<Group> Group::split(int color, int key, const CollectiveOptions& opts) {
  // Everyone learns everyone's (color, key); members of a color are ordered by (key, rank).
  const int n = size();
  std::vector<int64_t> mine{color, key};
  std::vector<int64_t> all(2 * static_cast<size_t>(n));
  const uint64_t split_id = sequence_number();
  allgather(make_buffer(mine), make_buffer(all), opts);
  if (color < 0) return nullptr;

  std::vector<std::pair<int64_t, int>> ordered;  // (key, old rank)
  for (int r = 0; r < n; ++r) {
    if (all[2 * r] == color) ordered.emplace_back(all[2 * r + 1], r);
  }
  std::sort(ordered.begin(), ordered.end());
  std::vector<int> members;
  for (const auto& member : ordered) members.push_back(member.second);

  const std::string subgroup = "split" + std::to_string(split_id) + "/c" + std::to_string(color);
  GroupOptions child = options();
  child.name = options().name + "/" + subgroup;
  return impl_->make_subgroup(members, subgroup, std::move(child),
                              Deadline::after(impl_->timeout_for(opts)));
}

std::shared_ptr<Group> Group::Impl::make_subgroup(const std::vector<int>& members,
                                                  const std::string& key, GroupOptions options,
                                                  Deadline deadline, const EngineMaker& engine) {
  SplitSpec spec{members, key, nullptr, deadline};
  // A group without a store (MPI) splits its communicator instead of exchanging addresses.
  if (store_) spec.store = std::make_shared<PrefixStore>(key, store_);
  auto impl = std::make_unique<Impl>(transport_->split(spec), spec.store, std::move(options));
  impl->inherit(*this, members, deadline);
  auto group = std::make_shared<Group>(std::move(impl));
  GroupHostCollectives host(*group);  // an engine sees only the subgroup's host collectives
  if (engine) {
    impl_of(*group).attach_engine(engine(host));
  } else if (this->engine() != nullptr) {
    impl_of(*group).attach_engine(this->engine()->for_subgroup(host, deadline));
  }
  if (dispatcher_.staging() != nullptr) {
    impl_of(*group).attach_staging(dispatcher_.staging()->staging().for_subgroup());
  }
  impl_of(*group).report_creation();
  return group;
}

}  // namespace cohort
