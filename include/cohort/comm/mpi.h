// The MPI backend (docs/backends.md): a Group on MPI_COMM_WORLD, for programs started by
// mpirun, mpiexec or srun with an MPI, with no store, no MASTER_ADDR and no cohortrun.
// cohort::init() makes one by itself under mpirun (COHORT_BACKEND); this is the direct way.
//
//   auto group = cohort::create_mpi_group();          // MPI_Init_thread if nobody did
//   group->allreduce(cohort::make_buffer(grads));     // MPI_Iallreduce underneath
//
// A program that has its own communicator passes it through cohort/comm/mpi_comm.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cohort/comm/group.h"

namespace cohort {

// Which collectives a group on MPI runs.
enum class MpiCollectives : uint8_t {
  kDefault,  // COHORT_MPI_COLLECTIVES=mpi|cohort, else kMpi
  // MPI's own (MPI_Iallreduce, MPI_Ireduce_scatter_block, MPI_Iallgather, MPI_Ibcast, ...)
  // where MPI has the dtype and op; cohort's algorithms over MPI point-to-point otherwise
  // (float16 and bfloat16 reductions). A per-call CollectiveOptions::algorithm, or COHORT_ALGO,
  // still picks one of cohort's algorithms.
  kMpi,
  // cohort's algorithms (ring, tree, halving-doubling, ...) over MPI_Isend/MPI_Irecv.
  kCohort,
};

struct MpiOptions {
  MpiCollectives collectives = MpiCollectives::kDefault;
};

// "mpi" or "cohort" (COHORT_MPI_COLLECTIVES); throws ConfigError otherwise.
MpiCollectives parse_mpi_collectives(const std::string& text);

// Whether this build of cohort has the MPI backend (CMake option COHORT_WITH_MPI).
bool mpi_backend_built();

// Collective over MPI_COMM_WORLD. Initializes MPI with MPI_THREAD_MULTIPLE unless the program
// did (then it checks that the program asked for that level), and finalizes it at exit if it
// initialized it. GroupOptions' timeout, algorithm and debug_checks apply; host, job_token,
// shared_memory and node_id do not (MPI moves the bytes). Throws ConfigError when cohort was
// built without MPI or MPI cannot give MPI_THREAD_MULTIPLE, TimeoutError when a rank does not
// join by the timeout.
std::shared_ptr<Group> create_mpi_group(GroupOptions options = {}, MpiOptions mpi = {});

}  // namespace cohort
