// Every launcher convention cohort::init reads (launch_env.h), and the bad cases: each error
// names the variable and what was expected.
#include "cohort/comm/launch_env.h"

#include <gtest/gtest.h>

#include <map>

#include "cohort/core/error.h"

namespace cohort {
namespace {

using Vars = std::map<std::string, std::string>;

LaunchEnv read(const Vars& vars) {
  return read_launch_env([&](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end() || it->second.empty()) return std::nullopt;
    return it->second;
  });
}

void expect_error(const Vars& vars, const std::string& fragment) {
  try {
    read(vars);
    FAIL() << "accepted an environment that should fail with '" << fragment << "'";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(LaunchEnv, NoLauncherIsAWorldOfOne) {
  const LaunchEnv e = read({});
  EXPECT_EQ(e.launcher, "none");
  EXPECT_EQ(e.world_size, 1);
  EXPECT_EQ(e.rank, 0);
  EXPECT_FALSE(e.store_hosted);
  EXPECT_EQ(e.store_prefix, "");
}

TEST(LaunchEnv, Torchrun) {
  const LaunchEnv e = read({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"},
                            {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.7"},
                            {"MASTER_PORT", "29400"}, {"COHORT_STORE_HOSTED", "1"},
                            {"COHORT_STORE_PREFIX", "attempt2/"}});
  EXPECT_EQ(e.launcher, "torchrun");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.master_addr, "10.0.0.7");
  EXPECT_EQ(e.master_port, 29400);
  EXPECT_TRUE(e.store_hosted);
  EXPECT_EQ(e.store_prefix, "attempt2/");
}

TEST(LaunchEnv, UnderTorchrunsAgentCohortsStoreTakesTheNextPort) {
  const LaunchEnv e = read({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "2"},
                            {"MASTER_PORT", "29500"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"}});
  EXPECT_EQ(e.master_port, 29501);
  EXPECT_FALSE(e.store_hosted);  // rank 0 hosts cohort's store there
}

TEST(LaunchEnv, KubernetesOperatorSetsNoLocalVariables) {
  const LaunchEnv e = read({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "job-master-0"},
                            {"MASTER_PORT", "23456"}});
  EXPECT_EQ(e.local_rank, 0);
  EXPECT_EQ(e.local_world_size, 1);
  EXPECT_EQ(e.master_addr, "job-master-0");
}

TEST(LaunchEnv, TorchrunBadCases) {
  expect_error({{"RANK", "0"}}, "WORLD_SIZE");
  expect_error({{"WORLD_SIZE", "2"}}, "RANK");
  expect_error({{"RANK", "two"}, {"WORLD_SIZE", "2"}}, "RANK='two' is not an integer");
  expect_error({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}, "below the world size");
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "0"}}, "WORLD_SIZE='0'");
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "2"}}, "MASTER_PORT");
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29500"}}, "MASTER_ADDR");
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "2"},
                {"MASTER_PORT", "70000"}},
               "MASTER_PORT='70000'");
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "2"},
                {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_PORT", "29500"}},
               "LOCAL_RANK=2");
}

TEST(LaunchEnv, OneMachineNeedsNoMasterAddress) {
  const LaunchEnv e = read({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"},
                            {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_PORT", "29500"}});
  EXPECT_EQ(e.master_addr, "127.0.0.1");
}

// COHORT_RDZV_BACKEND=etcd: the store is etcd's, so ranks on several machines need neither
// MASTER_ADDR nor MASTER_PORT, but the endpoints and the job id that names the keys.
TEST(LaunchEnv, OnEtcdNoMasterIsNeeded) {
  const LaunchEnv e =
      read({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_WORLD_SIZE", "4"},
            {"COHORT_RDZV_BACKEND", "etcd"}, {"COHORT_RDZV_ENDPOINTS", "e1:2379,e2:2379"},
            {"COHORT_JOB_ID", "job7"}});
  EXPECT_EQ(e.rdzv_backend, "etcd");
  EXPECT_EQ(e.rdzv_endpoints, "e1:2379,e2:2379");
  EXPECT_EQ(e.job_id, "job7");
  EXPECT_EQ(read({}).rdzv_backend, "tcp");
  const Vars etcd = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"COHORT_RDZV_BACKEND", "etcd"}};
  expect_error(etcd, "needs COHORT_RDZV_ENDPOINTS");
  Vars no_job = etcd;
  no_job["COHORT_RDZV_ENDPOINTS"] = "e1:2379";
  expect_error(no_job, "needs COHORT_JOB_ID");
  expect_error({{"COHORT_RDZV_BACKEND", "zookeeper"}}, "expected tcp or etcd");
}

TEST(LaunchEnv, OpenMpi) {
  const LaunchEnv e = read({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                            {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                            {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  EXPECT_EQ(e.launcher, "openmpi");
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.master_addr, "127.0.0.1");
  EXPECT_EQ(e.master_port, 29500);  // mpirun has no port of its own
  expect_error({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}},
               "MASTER_ADDR is not set");
  expect_error({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}},
               "OMPI_COMM_WORLD_LOCAL_SIZE is not set");
}

TEST(LaunchEnv, MpichHydra) {
  const LaunchEnv e = read({{"PMI_RANK", "2"}, {"PMI_SIZE", "4"}, {"MPI_LOCALRANKID", "0"},
                            {"MPI_LOCALNRANKS", "2"}, {"MASTER_ADDR", "node1"}});
  EXPECT_EQ(e.launcher, "mpich");
  EXPECT_EQ(e.rank, 2);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 0);
  EXPECT_EQ(e.local_world_size, 2);
  // Without the local variables: every rank on this machine.
  const LaunchEnv alone = read({{"PMI_RANK", "1"}, {"PMI_SIZE", "3"}});
  EXPECT_EQ(alone.local_rank, 1);
  EXPECT_EQ(alone.local_world_size, 3);
  expect_error({{"PMI_RANK", "3"}, {"PMI_SIZE", "3"}}, "PMI_RANK=3 must be below");
}

TEST(LaunchEnv, Slurm) {
  const LaunchEnv e = read({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "7"}, {"SLURM_LOCALID", "1"},
                            {"SLURM_NODEID", "2"}, {"SLURM_TASKS_PER_NODE", "2(x3),1"},
                            {"SLURM_JOB_NODELIST", "gpu[07-10,12],cpu3"}});
  EXPECT_EQ(e.launcher, "slurm");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 7);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.master_addr, "gpu07");
  EXPECT_EQ(e.master_port, 29500);
  const LaunchEnv last = read({{"SLURM_PROCID", "6"}, {"SLURM_NTASKS", "7"},
                               {"SLURM_LOCALID", "0"}, {"SLURM_NODEID", "3"},
                               {"SLURM_TASKS_PER_NODE", "2(x3),1"},
                               {"SLURM_NODELIST", "a,b,c,d"}, {"MASTER_PORT", "1234"}});
  EXPECT_EQ(last.local_world_size, 1);
  EXPECT_EQ(last.master_addr, "a");
  EXPECT_EQ(last.master_port, 1234);
  expect_error({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "0"},
                {"SLURM_NODEID", "5"}, {"SLURM_TASKS_PER_NODE", "2(x2)"},
                {"SLURM_JOB_NODELIST", "n[1-2]"}},
               "SLURM_TASKS_PER_NODE='2(x2)'");
}

TEST(LaunchEnv, FirstSlurmHost) {
  EXPECT_EQ(first_slurm_host("node01"), "node01");
  EXPECT_EQ(first_slurm_host("node[01-04,07],gpu5"), "node01");
  EXPECT_EQ(first_slurm_host("n[3,5]-ib,m1"), "n3-ib");
  EXPECT_EQ(first_slurm_host("a,b"), "a");
  EXPECT_THROW(first_slurm_host("node[01-04"), ConfigError);
}

}  // namespace
}  // namespace cohort
