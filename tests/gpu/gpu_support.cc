#include "gpu/gpu_support.h"

#include <stdexcept>

#include "cohort/comm/nccl.h"
#include "support/process.h"
#include "support/test_support.h"

namespace cohort::testing {

int visible_gpus() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count;
}

void cuda_ok(cudaError_t rc, const char* call) {
  if (rc != cudaSuccess) {
    throw std::runtime_error(std::string(call) + ": " + cudaGetErrorString(rc));
  }
}

void run_rank_processes(int world, const std::string& filter,
                        const std::vector<std::string>& env) {
  const std::string port = std::to_string(testing::free_port());
  std::vector<ChildProcess> ranks;
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> rank_env{"RANK=" + std::to_string(r),
                                      "WORLD_SIZE=" + std::to_string(world),
                                      "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port};
    rank_env.insert(rank_env.end(), env.begin(), env.end());
    ranks.emplace_back(std::vector<std::string>{"/proc/self/exe", "--gtest_also_run_disabled_tests",
                                                "--gtest_filter=" + filter},
                       rank_env);
  }
  for (int r = 0; r < world; ++r) {
    const int status = ranks[r].wait(std::chrono::seconds(120));
    EXPECT_EQ(status, 0) << "rank " << r << " of " << world << " (" << filter << "):\n"
                         << ranks[r].output();
  }
}

void with_nccl_groups(int world, const std::function<void(int, Group&)>& fn) {
  auto bootstraps = make_inproc_groups(world, quick_options());
  run_ranks(world, [&](int rank) {
    cuda_ok(cudaSetDevice(rank), "cudaSetDevice");
    NcclOptions options;
    options.device = rank;
    auto group = create_nccl_group(bootstraps[static_cast<size_t>(rank)], options);
    fn(rank, *group);
  });
}

}  // namespace cohort::testing
