// Making a Group on NCCL: every rank checks its device, the ranks agree that all can go on
// (cuda::agree_on_devices), then a subgroup of every rank of the bootstrap group (its own
// transport, store prefix and topology) carries NCCL's unique id and gets the NCCL engine
// beside its transport.
#include <cuda_runtime_api.h>

#include <numeric>
#include <string>
#include <vector>

#include "engines/cuda/cuda_call.h"
#include "engines/nccl/nccl_engine.h"
#include "cohort/comm/nccl.h"
#include "cohort/core/check.h"
#include "cohort/core/error.h"
#include "group/group_access.h"
#include "group/group_host_collectives.h"
#include "group/group_impl.h"

namespace cohort {

std::shared_ptr<Group> create_nccl_group(std::shared_ptr<Group> bootstrap, NcclOptions options) {
  COHORT_CHECK(bootstrap != nullptr, "create_nccl_group needs a bootstrap group");
  GroupOptions group_options = bootstrap->options();
  if (options.timeout.count() > 0) group_options.timeout = options.timeout;
  const Deadline deadline = Deadline::after(group_options.timeout);
  const int device = options.device >= 0 ? options.device : bootstrap->local_rank();
  // Unique among the bootstrap's subgroups: its sequence number before a collective of it.
  const std::string key = "nccl" + std::to_string(bootstrap->sequence_number());
  GroupHostCollectives bootstrap_host(*bootstrap);
  cuda::agree_on_devices(bootstrap_host, cuda::device_problem(device), "create_nccl_group",
                         deadline);

  // A group of its own: the caller keeps using the bootstrap group as it likes, and this one
  // sees only the NCCL group's calls, in its order.
  std::vector<int> everyone(static_cast<size_t>(bootstrap->size()));
  std::iota(everyone.begin(), everyone.end(), 0);
  group_options.name += "/nccl";
  return impl_of(*bootstrap)
      .make_subgroup(everyone, key, std::move(group_options), deadline, [&](HostCollectives& host) {
        return NcclEngine::create(host, device, deadline);
      });
}

}  // namespace cohort
