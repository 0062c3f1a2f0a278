// A cohort Group on a communicator of the program's own (needs <mpi.h>, so it is apart from
// mpi.h): collective over `comm`, which cohort duplicates, so the program's messages and
// cohort's never match each other. Only in builds with the MPI backend (COHORT_WITH_MPI).
#pragma once

#include <mpi.h>

#include "cohort/comm/mpi.h"

namespace cohort {

std::shared_ptr<Group> create_mpi_group(MPI_Comm comm, GroupOptions options = {},
                                        MpiOptions mpi = {});

}  // namespace cohort
