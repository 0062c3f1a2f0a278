// cohort::init: the default Group of a process, built from what its launcher says
// (launch_env.h, docs/launch.md). The same program runs alone, under cohortrun or torchrun,
// under mpirun and under srun:
//
//   auto group = cohort::init();
//   cohort::DistributedDataParallel model(net, group);
#pragma once

#include <memory>

#include "cohort/comm/group.h"
#include "cohort/comm/launch_env.h"
#include "cohort/comm/mpi.h"

namespace cohort {

// Backend (options.h) names what carries a job's data; init() makes kNative and kMpi groups.
// "auto", "native" or "mpi"; throws ConfigError otherwise ("nccl" too: an NCCL group is made
// over a host group by create_nccl_group, nccl.h).
Backend parse_backend(const std::string& text);

struct InitOptions {
  GroupOptions group;  // timeout, algorithm, shared memory, ... (each with its env override)
  Backend backend = Backend::kAuto;
  MpiOptions mpi;  // the MPI backend's collectives (COHORT_MPI_COLLECTIVES)
};

// Collective over the job. Under the MPI backend, create_mpi_group(). Otherwise rank 0 hosts the
// store at MASTER_ADDR:MASTER_PORT (unless the launcher hosts it: COHORT_STORE_HOSTED=1), every
// rank joins it and the group is made with Group::create (TCP between hosts, shared memory inside
// one). With no launcher variables, a group of one rank. Throws ConfigError for a bad environment,
// StoreError or TimeoutError when the store or a rank cannot be reached by the group's timeout.
std::shared_ptr<Group> init(InitOptions options = {});
// The same from an environment already read.
std::shared_ptr<Group> init(const LaunchEnv& env, InitOptions options = {});

}  // namespace cohort
