// create_cuda_staged_group's failures that need no GPU: a device one rank lacks fails every
// rank at once with ConfigError naming the call (not by a timeout), the bootstrap group stays
// usable, and a bad COHORT_STAGING_CHUNK_BYTES is refused naming the variable.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "cohort/comm/cuda_staging.h"
#include "cohort/core/error.h"
#include "support/test_support.h"

namespace cohort {
namespace staged_group_errors_test {

using testing::make_inproc_groups;
using testing::run_ranks;

TEST(StagedGroupErrors, MissingDeviceIsAConfigErrorOnEveryRank) {
  auto groups = make_inproc_groups(3, testing::quick_options());
  run_ranks(3, [&](int rank) {
    CudaStagingOptions options;
    options.device = rank == 1 ? 9999 : 0;  // rank 1 asks for a device nobody has
    try {
      create_cuda_staged_group(groups[static_cast<size_t>(rank)], options);
      ADD_FAILURE() << "rank " << rank << " made a staged group although rank 1 has no device";
    } catch (const ConfigError& e) {
      const std::string text = e.what();
      const char* expected = cuda_staging_built() ? "create_cuda_staged_group" : "without CUDA";
      EXPECT_NE(text.find(expected), std::string::npos) << text;
    }
    std::vector<int> v(4, 1);
    groups[static_cast<size_t>(rank)]->allreduce(make_buffer(v));
    EXPECT_EQ(v[0], 3);
  });
}

TEST(StagedGroupErrors, ABadChunkSizeIsRefusedNamingTheVariable) {
  if (!cuda_staging_built()) GTEST_SKIP() << "this cohort was built without CUDA";
  auto groups = make_inproc_groups(1, testing::quick_options());
  ::setenv("COHORT_STAGING_CHUNK_BYTES", "0", 1);
  try {
    create_cuda_staged_group(groups[0]);
    ADD_FAILURE() << "a chunk of 0 bytes was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("COHORT_STAGING_CHUNK_BYTES"), std::string::npos)
        << e.what();
  }
  ::unsetenv("COHORT_STAGING_CHUNK_BYTES");
}

TEST(StagedGroupErrors, NullBootstrapIsRefused) {
  if (!cuda_staging_built()) GTEST_SKIP() << "this cohort was built without CUDA";
  EXPECT_THROW(create_cuda_staged_group(nullptr), InvalidArgument);
}

}  // namespace staged_group_errors_test
}  // namespace cohort
