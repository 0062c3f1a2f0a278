// Making a Group on MPI: the transport on duplicates of the communicator, no store, and the
// group's default algorithm set by the collectives mode.
#include "engines/mpi/mpi_call.h"
#include "engines/mpi/mpi_transport.h"
#include "cohort/comm/mpi_comm.h"
#include "cohort/core/env.h"
#include "group/group_impl.h"

namespace cohort {

bool mpi_backend_built() {
  return true;
}

std::shared_ptr<Group> create_mpi_group(MPI_Comm comm, GroupOptions options, MpiOptions mpi) {
  mpi::ensure_initialized();
  options = options.resolved();
  MpiCollectives mode = mpi.collectives;
  if (mode == MpiCollectives::kDefault) {
    // Declared here, read here (docs/env.md).
    mode = parse_mpi_collectives(env_string("COHORT_MPI_COLLECTIVES").value_or("mpi"));
  }
  // An algorithm asked for explicitly (options or COHORT_ALGO) still wins.
  if (mode == MpiCollectives::kMpi && options.algorithm == Algorithm::kAuto) {
    options.algorithm = Algorithm::kEngine;
  }
  options.shared_memory = false;  // MPI moves the bytes between the ranks of a host itself
  std::shared_ptr<MpiTransport> transport =
      MpiTransport::create(comm, Deadline::after(options.timeout));
  // No store: the engine tells which ranks share a host, and carries the rank 0's cost model.
  auto impl = std::make_unique<Group::Impl>(transport, nullptr, std::move(options));
  impl->attach_engine(transport);
  impl->discover_topology_through_engine();
  return std::make_shared<Group>(std::move(impl));
}

std::shared_ptr<Group> create_mpi_group(GroupOptions options, MpiOptions mpi) {
  return create_mpi_group(MPI_COMM_WORLD, std::move(options), mpi);
}

}  // namespace cohort
