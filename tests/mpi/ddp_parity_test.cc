// DDP over MPI must train exactly what one process trains on the whole batch: each rank of the
// mpirun job trains its slice through DistributedDataParallel on the MPI world group and
// compares, after every step, with the reference it trains itself (tests/torch/ddp_harness.h).
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "cohort/comm/mpi.h"
#include "cohort/core/error.h"
#include "mpi_world.h"
#include "torch/ddp_harness.h"

namespace cohort {
namespace {

testing::ParityCase mpi_case() {
  testing::ParityCase c;
  c.world = testing::mpi_world().size();
  c.steps = 12;
  return c;
}

// DistributedDataParallel's constructor is collective; a program that constructs it on rank 0
// only, while the others go on to their own allreduce, gets MismatchError on every rank that
// names the constructor (Note [Call stamps]), not a truncation or OpenMPI's fatal handler.
TEST(MpiDdpMistakes, ConstructedOnRankZeroOnlyIsAMismatchOnEveryRank) {
  GroupOptions options;
  options.timeout = std::chrono::seconds(20);
  auto group = create_mpi_group(options);  // a spare group: this test breaks it
  group->barrier();
  try {
    if (group->rank() == 0) {
      auto model = torch::nn::Linear(10, 4);
      DistributedDataParallel ddp(model.ptr(), group);
    } else {
      std::vector<float> loss(1, 1.0f);
      group->allreduce(make_buffer(loss));
    }
    ADD_FAILURE() << "DDP constructed on rank 0 only and nothing was said";
  } catch (const MismatchError& e) {
    EXPECT_NE(std::string(e.what()).find("in DistributedDataParallel's constructor"),
              std::string::npos)
        << e.what();
  }
  testing::mpi_world().barrier();
}

TEST(MpiDdpParity, MlpWithSmallBuckets) {
  testing::ParityCase c = mpi_case();
  c.options.bucket_cap_mb = 0.001;  // several buckets in flight on the communication thread
  c.options.first_bucket_cap_mb = 0.001;
  testing::expect_parity_as_rank(c, testing::mpi_world_ptr());
}

TEST(MpiDdpParity, NoSyncAccumulation) {
  testing::ParityCase c = mpi_case();
  c.micro_batches = 3;
  testing::expect_parity_as_rank(c, testing::mpi_world_ptr());
}

TEST(MpiDdpParity, ConvBatchNormWithBufferBroadcast) {
  testing::ParityCase c = mpi_case();
  c.make_model = testing::conv_batchnorm();
  c.image_inputs = true;
  c.reference_per_slice = true;
  testing::expect_parity_as_rank(c, testing::mpi_world_ptr());
}

TEST(MpiDdpParity, UnevenInputsUnderJoin) {
  testing::ParityCase c = mpi_case();
  c.steps_of_rank = [](int rank) { return 12 - 3 * rank; };
  testing::expect_parity_as_rank(c, testing::mpi_world_ptr());
}

}  // namespace
}  // namespace cohort
