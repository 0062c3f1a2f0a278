// Making a Group on NCCL: every rank checks its device, the ranks agree that all can go on
// (so one rank without a GPU fails them all at once instead of leaving them waiting), then a
// subgroup of every rank of the bootstrap group (its own transport, store prefix and topology)
// carries NCCL's unique id and gets the NCCL engine beside its transport.
#include <cuda_runtime_api.h>

#include <numeric>
#include <string>
#include <vector>

#include "backends/nccl/nccl_call.h"
#include "backends/nccl/nccl_engine.h"
#include "cohort/comm/nccl.h"
#include "cohort/core/check.h"
#include "cohort/core/error.h"
#include "group/group_impl.h"

namespace cohort {

namespace {

// Empty when this rank can use `device`, else why not.
std::string device_problem(int device) {
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) {
    return std::string("no usable CUDA device (cudaGetDeviceCount: ") + cudaGetErrorName(rc) +
           ": " + cudaGetErrorString(rc) + ")";
  }
  if (device < 0 || device >= count) {
    return "CUDA device " + std::to_string(device) + " does not exist (this process sees " +
           std::to_string(count) + "; CUDA_VISIBLE_DEVICES narrows that)";
  }
  return "";
}

// Collective over `group`: throws ConfigError on every rank when any rank has a problem.
void agree_on_devices(Group& group, const std::string& problem, Deadline deadline) {
  int32_t ok = problem.empty() ? 1 : 0;
  std::vector<int32_t> all(static_cast<size_t>(group.size()));
  CollectiveOptions opts;
  opts.timeout = std::chrono::duration_cast<Milliseconds>(deadline.remaining());
  if (opts.timeout.count() <= 0) opts.timeout = Milliseconds(1);
  group.allgather(ConstBuffer{&ok, 1, DType::kInt32}, Buffer{all.data(), all.size(), DType::kInt32},
                  opts);
  std::string failed;
  for (size_t r = 0; r < all.size(); ++r) {
    if (!all[r]) failed += (failed.empty() ? "" : ", ") + std::to_string(r);
  }
  if (failed.empty()) return;
  if (!problem.empty())
    throw ConfigError("create_nccl_group: rank " + std::to_string(group.rank()) + ": " + problem);
  throw ConfigError("create_nccl_group: ranks " + failed +
                    " have no usable CUDA device (their errors say why)");
}

}  // namespace

std::shared_ptr<Group> create_nccl_group(std::shared_ptr<Group> bootstrap, NcclOptions options) {
  COHORT_CHECK(bootstrap != nullptr, "create_nccl_group needs a bootstrap group");
  GroupOptions group_options = bootstrap->options();
  if (options.timeout.count() > 0) group_options.timeout = options.timeout;
  const Deadline deadline = Deadline::after(group_options.timeout);
  const int device = options.device >= 0 ? options.device : bootstrap->local_rank();
  // Unique among the bootstrap's subgroups: its sequence number before a collective of it.
  const std::string key = "nccl" + std::to_string(bootstrap->sequence_number());
  agree_on_devices(*bootstrap, device_problem(device), deadline);

  // A group of its own: the caller keeps using the bootstrap group as it likes, and this one
  // sees only the NCCL group's calls, in its order.
  std::vector<int> everyone(static_cast<size_t>(bootstrap->size()));
  std::iota(everyone.begin(), everyone.end(), 0);
  group_options.name += "/nccl";
  return bootstrap->impl().make_subgroup(
      everyone, key, std::move(group_options), deadline,
      [&](Group& host) { return NcclEngine::create(host, device, deadline); });
}

}  // namespace cohort
