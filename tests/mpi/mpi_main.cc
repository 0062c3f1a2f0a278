// main() of the MPI test programs: gtest on every rank, then the world group is released so
// that cohort finalizes MPI at exit. Any rank failing makes mpirun exit non-zero.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "cohort/comm/init.h"
#include "mpi_world.h"

namespace cohort::testing {

namespace {
std::shared_ptr<Group>& world_slot() {
  static std::shared_ptr<Group> world;
  return world;
}
}  // namespace

std::shared_ptr<Group> mpi_world_ptr() {
  if (!world_slot()) {
    InitOptions options;
    options.group.timeout = std::chrono::seconds(30);
    world_slot() = init(options);
  }
  return world_slot();
}

Group& mpi_world() {
  return *mpi_world_ptr();
}

void release_mpi_world() {
  world_slot().reset();
}

bool mpi_mode_uses_mpi_collectives() {
  const char* mode = std::getenv("COHORT_MPI_COLLECTIVES");
  return mode == nullptr || std::string(mode) == "mpi";
}

}  // namespace cohort::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int failed = RUN_ALL_TESTS();
  cohort::testing::release_mpi_world();
  return failed;
}
