// create_nccl_group's failures that need no GPU: a device no rank has fails every rank at once
// with ConfigError (not only the ranks that lack it, and not by a timeout), and the bootstrap
// group stays usable. Builds without NCCL throw ConfigError from the stand-in.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cohort/comm/nccl.h"
#include "cohort/core/error.h"
#include "support/test_support.h"

namespace cohort {
namespace nccl_group_errors_test {

using testing::make_inproc_groups;
using testing::run_ranks;

TEST(NcclGroupErrors, MissingDeviceIsAConfigErrorOnEveryRank) {
  auto groups = make_inproc_groups(3, testing::quick_options());
  run_ranks(3, [&](int rank) {
    NcclOptions options;
    options.device = rank == 1 ? 9999 : rank;  // rank 1 asks for a device nobody has
    if (!nccl_backend_built()) options.device = 9999;
    try {
      create_nccl_group(groups[static_cast<size_t>(rank)], options);
      // With GPUs 0 and 2 present, ranks 0 and 2 must still fail because rank 1 did.
      ADD_FAILURE() << "rank " << rank << " made an NCCL group although rank 1 has no device";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(nccl_backend_built() ? "create_nccl_group" : "NCCL"),
                std::string::npos)
          << e.what();
    }
    std::vector<int> v(4, 1);
    groups[static_cast<size_t>(rank)]->allreduce(make_buffer(v));
    EXPECT_EQ(v[0], 3);
  });
}

TEST(NcclGroupErrors, NullBootstrapIsRefused) {
  if (nccl_backend_built()) {
    EXPECT_THROW(create_nccl_group(nullptr), InvalidArgument);
  } else {
    EXPECT_THROW(create_nccl_group(nullptr), ConfigError);
  }
}

}  // namespace nccl_group_errors_test
}  // namespace cohort
