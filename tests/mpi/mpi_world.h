// The MPI test programs run as every rank under mpirun (tests/mpi/CMakeLists.txt): each rank
// runs the same gtest cases in the same order on one group made by cohort::init(), which
// picks the MPI backend by itself under mpirun.
#pragma once

#include <memory>

#include "cohort/comm/group.h"

namespace cohort::testing {

// The job's group (made at the first call, released before the program exits so that MPI is
// finalized cleanly).
Group& mpi_world();
std::shared_ptr<Group> mpi_world_ptr();
void release_mpi_world();

// Which collectives this run uses: COHORT_MPI_COLLECTIVES, set by the ctest entry.
bool mpi_mode_uses_mpi_collectives();

}  // namespace cohort::testing
