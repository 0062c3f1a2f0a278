// Group::split: a collective over the whole group that makes the subgroups, each with its own
// transport (and, on an engine, its own communicator) and the parent's topology restricted.
#include <algorithm>

#include "backends/collective_engine.h"
#include "cohort/comm/group.h"
#include "cohort/comm/prefix_store.h"
#include "cohort/core/check.h"
#include "group/group_impl.h"

namespace cohort {

std::shared_ptr<Group> Group::split(int color, int key, const CollectiveOptions& opts) {
  // Everyone learns everyone's (color, key); members of a color are ordered by (key, rank).
  const int n = size();
  std::vector<int64_t> mine{color, key};
  std::vector<int64_t> all(2 * static_cast<size_t>(n));
  const uint64_t split_id = sequence_number();
  allgather(make_buffer(mine), make_buffer(all), opts);
  CollectiveEngine* engine = impl_->transport().engine();
  // An engine's split (MPI_Comm_split) is collective over every rank, members or not.
  std::unique_ptr<Transport> engine_transport =
      engine != nullptr
          ? engine->split_communicator(color, key, Deadline::after(impl_->timeout_for(opts)))
          : nullptr;
  if (color < 0) return nullptr;

  std::vector<std::pair<int64_t, int>> members;  // (key, old rank)
  for (int r = 0; r < n; ++r) {
    if (all[2 * r] == color) members.emplace_back(all[2 * r + 1], r);
  }
  std::sort(members.begin(), members.end());
  int new_rank = -1;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i].second == rank()) new_rank = static_cast<int>(i);
  }
  COHORT_INTERNAL_ASSERT(new_rank >= 0, "rank ", rank(), " missing from its own split color");

  const std::string subgroup = "split" + std::to_string(split_id) + "/c" + std::to_string(color);
  // A group without a store (MPI) splits its engine's communicator instead.
  std::shared_ptr<Store> store;
  if (impl_->store()) store = std::make_shared<PrefixStore>(subgroup, impl_->store());
  auto transport =
      engine_transport
          ? std::move(engine_transport)
          : impl_->transport().split(subgroup, new_rank, static_cast<int>(members.size()), store);
  GroupOptions child = options();
  child.name = options().name + "/" + subgroup;
  auto group = std::make_shared<Group>(std::move(transport), store, child);
  std::vector<int> member_ranks;
  for (const auto& member : members) member_ranks.push_back(member.second);
  group->impl_->inherit(impl_->topology().restricted_to(member_ranks, new_rank),
                        impl_->cost_model());
  return group;
}

}  // namespace cohort
