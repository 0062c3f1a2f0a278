#include "model_check.h"

#include "cohort/comm/agreement.h"
#include "cohort/core/check.h"

namespace cohort {

void check_same_on_all_ranks(Group& group, const std::vector<std::string>& entries,
                             const std::string& what, CallSite site, const std::string& who) {
  CollectiveOptions options;
  options.site = site;
  const std::string difference = first_disagreement(group, entries, what, options);
  if (difference.empty()) return;
  throw InvalidArgument(detail::concat(
      who, ": the ranks wrap different models: ", difference,
      ". Build the same model (same layers, shapes and dtypes, in the same order) on every "
      "rank."));
}

}  // namespace cohort
