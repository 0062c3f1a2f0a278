// The parts of cohort/comm/mpi.h every build has, and the stand-ins of a build without MPI.
#include "cohort/comm/mpi.h"
#include "cohort/core/error.h"

namespace cohort {

MpiCollectives parse_mpi_collectives(const std::string& text) {
  if (text == "mpi") return MpiCollectives::kMpi;
  if (text == "cohort") return MpiCollectives::kCohort;
  throw ConfigError("COHORT_MPI_COLLECTIVES='" + text +
                    "': use mpi (MPI's own collectives) or cohort (cohort's algorithms over MPI "
                    "point-to-point)");
}

#ifndef COHORT_HAVE_MPI
bool mpi_backend_built() {
  return false;
}

std::shared_ptr<Group> create_mpi_group(GroupOptions, MpiOptions) {
  throw ConfigError(
      "this cohort was built without the MPI backend: install an MPI (Debian: "
      "apt-get install libopenmpi-dev openmpi-bin) and configure with "
      "-DCOHORT_WITH_MPI=ON");
}
#endif

}  // namespace cohort
