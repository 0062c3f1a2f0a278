#include <algorithm>

#include "cohort/comm/transport.h"
#include "cohort/core/check.h"

namespace cohort {

int SplitSpec::new_rank(int parent_rank) const {
  const auto found = std::find(members.begin(), members.end(), parent_rank);
  COHORT_INTERNAL_ASSERT(found != members.end(), "rank ", parent_rank,
                         " split into a subgroup it is not a member of");
  return static_cast<int>(found - members.begin());
}

}  // namespace cohort
