// DDP over MPI must train exactly what one process trains on the whole batch: each rank of the
// mpirun job trains its slice through DistributedDataParallel on the MPI world group and
// compares, after every step, with the reference it trains itself (tests/torch/ddp_harness.h).
#include <gtest/gtest.h>

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
