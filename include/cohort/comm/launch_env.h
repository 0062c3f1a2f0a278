// Where this process sits in a job, as the launcher that started it says (docs/launch.md):
// torchrun's variables (also set by cohortrun, cohort-bench and Kubernetes PyTorchJob-style
// operators), OpenMPI's mpirun, or Slurm's srun. With none of them, a world of one.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace cohort {

struct LaunchEnv {
  std::string launcher = "none";  // "torchrun", "openmpi", "mpich", "slurm" or "none"
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;        // index among the ranks on this machine
  int local_world_size = 1;  // ranks on this machine
  std::string master_addr = "127.0.0.1";  // where rank 0 (or the launcher) hosts the store
  uint16_t master_port = 0;
  bool store_hosted = false;  // COHORT_STORE_HOSTED=1: the launcher runs the store, not rank 0
  // COHORT_STORE_PREFIX: the job's keys live under this prefix of the store. cohortrun gives
  // each restart of a job its own, so a restarted group never reads the last one's keys.
  std::string store_prefix;
  // COHORT_RDZV_BACKEND: where the job's store is. "tcp" (the default): cohort's TCP store at
  // master_addr:master_port. "etcd": an etcd cluster at COHORT_RDZV_ENDPOINTS (`rdzv_endpoints`,
  // host:port[,host:port...]), the job's keys under /cohort/<COHORT_JOB_ID>/ (`job_id`, which
  // it then requires); MASTER_ADDR is not needed (docs/store.md, "etcd").
  std::string rdzv_backend = "tcp";
  std::string rdzv_endpoints;
  std::string job_id;
};

// Looks a variable up; nullopt when unset or empty.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

// Reads the launcher's variables, first match wins:
//   torchrun  RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//   openmpi   OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE (+ MASTER_ADDR/_PORT)
//   mpich     PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS (Hydra's mpiexec; the
//             local ones default to every rank on this machine) (+ MASTER_ADDR/_PORT)
//   slurm     SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID, SLURM_TASKS_PER_NODE,
//             the first host of SLURM_JOB_NODELIST (+ MASTER_ADDR/_PORT override)
// MASTER_ADDR may be left out when every rank runs on this machine (127.0.0.1); MASTER_PORT
// defaults to 29500 under mpirun and Slurm, which have no port of their own. Under torchrun
// (TORCHELASTIC_USE_AGENT_STORE=True) its agent serves PyTorch's store on MASTER_PORT, so
// cohort's store takes MASTER_PORT + 1. Throws ConfigError
// naming the variable and what was expected when a value is missing, malformed or inconsistent.
LaunchEnv read_launch_env(const EnvLookup& lookup);
// The same over this process's environment.
LaunchEnv read_launch_env();

// A fresh secret for a job (COHORT_JOB_TOKEN): 128 bits from the system's random source, in hex.
// Launchers (cohortrun, cohort-bench) give one to the ranks they start.
std::string random_job_token();

// The first host of a Slurm host list: "node[01-04,07],gpu5" -> "node01".
std::string first_slurm_host(const std::string& host_list);

}  // namespace cohort
