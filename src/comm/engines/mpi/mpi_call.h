// Small pieces every part of the MPI backend uses: turning MPI's return codes into cohort
// errors that name the call, cohort's dtypes and ops as MPI's, and the process-wide MPI
// runtime (initialized once, finalized at exit when cohort initialized it).
#pragma once

#include <mpi.h>

#include "cohort/core/dtype.h"

namespace cohort::mpi {

// Throws a cohort error naming `call` and MPI's own message when rc is not MPI_SUCCESS:
// ProtocolError for a truncated message, Error otherwise.
void check(int rc, const char* call);

// MPI_DATATYPE_NULL for the dtypes MPI has no type for (float16, bfloat16).
MPI_Datatype datatype(DType dtype);
// MPI_OP_NULL for kAvg, which MPI does not have (the Group sums and divides).
MPI_Op reduction(ReduceOp op);

// Initializes MPI with MPI_THREAD_MULTIPLE unless the program already did, and checks the
// thread level either way: a Group calls MPI from its worker thread (async collectives, DDP's
// communication thread) while the program may call it too. Throws ConfigError when MPI cannot
// give that level or was already finalized.
void ensure_initialized();

// Bookkeeping for MPI_Finalize at exit: it runs only when cohort initialized MPI and no MPI
// group is still open (its worker thread may still be calling MPI).
void group_opened();
void group_closed();

}  // namespace cohort::mpi
