// Making a staged group (cohort/comm/cuda_staging.h): every rank checks its device, the ranks
// agree that all can go on (cuda::agree_on_devices), then a subgroup of every rank of the
// bootstrap group (its own transport, store prefix and topology) stages its device buffers
// through host memory (Note [Staged device buffers]).
#include <numeric>
#include <string>
#include <vector>

#include "engines/cuda/cuda_call.h"
#include "engines/cuda/cuda_device_staging.h"
#include "cohort/comm/cuda_staging.h"
#include "cohort/core/check.h"
#include "cohort/core/env.h"
#include "group/group_access.h"
#include "group/group_host_collectives.h"
#include "group/group_impl.h"

namespace cohort {

namespace {

// Env knob (docs/backends.md): bytes per staged chunk when CudaStagingOptions leaves it 0.
constexpr const char* kChunkBytesEnv = "COHORT_STAGING_CHUNK_BYTES";
constexpr size_t kDefaultChunkBytes = size_t{4} << 20;

size_t chunk_bytes(const CudaStagingOptions& options) {
  if (options.chunk_bytes > 0) return options.chunk_bytes;
  const auto from_env = env_int(kChunkBytesEnv);
  if (!from_env) return kDefaultChunkBytes;
  COHORT_CHECK(*from_env > 0, kChunkBytesEnv, " must be a positive number of bytes, not ",
               *from_env);
  return static_cast<size_t>(*from_env);
}

}  // namespace

std::shared_ptr<Group> create_cuda_staged_group(std::shared_ptr<Group> bootstrap,
                                                CudaStagingOptions options) {
  COHORT_CHECK(bootstrap != nullptr, "create_cuda_staged_group needs a bootstrap group");
  GroupOptions group_options = bootstrap->options();
  if (options.timeout.count() > 0) group_options.timeout = options.timeout;
  const Deadline deadline = Deadline::after(group_options.timeout);
  const size_t chunk = chunk_bytes(options);
  const int devices = cuda::device_count();
  const int device = options.device >= 0 ? options.device
                     : devices > 0       ? bootstrap->local_rank() % devices
                                         : 0;
  // Unique among the bootstrap's subgroups: its sequence number before a collective of it.
  const std::string key = "staged" + std::to_string(bootstrap->sequence_number());
  GroupHostCollectives bootstrap_host(*bootstrap);
  cuda::agree_on_devices(bootstrap_host, cuda::device_problem(device), "create_cuda_staged_group",
                         deadline);

  // A group of its own: the caller keeps using the bootstrap group for host buffers as it
  // likes, and this one sees only the staged group's calls, in its order.
  std::vector<int> everyone(static_cast<size_t>(bootstrap->size()));
  std::iota(everyone.begin(), everyone.end(), 0);
  group_options.name += "/staged";
  auto group = impl_of(*bootstrap).make_subgroup(everyone, key, std::move(group_options), deadline);
  impl_of(*group).attach_staging(std::make_shared<CudaDeviceStaging>(device, chunk));
  return group;
}

}  // namespace cohort
