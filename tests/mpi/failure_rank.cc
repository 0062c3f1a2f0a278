// A rank program for failure_test.cc, run under mpirun:
//   failure_rank kill          rank 1 SIGKILLs itself after one allreduce; the others go on
//                              calling allreduce (mpirun must end the job, not let it hang)
//   failure_rank thread-level  initializes MPI with MPI_THREAD_SERIALIZED, then asks cohort for
//                              a group: exits 0 when that is the ConfigError it must be
#include <mpi.h>

#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include "cohort/comm/init.h"
#include "cohort/comm/mpi.h"
#include "cohort/core/error.h"

namespace {

int kill_one_rank() {
  auto group = cohort::init();
  std::vector<float> data(1024, 1.0f);
  group->allreduce(cohort::make_buffer(data));
  if (group->rank() == 1) std::raise(SIGKILL);
  for (int i = 0; i < 1000; ++i) group->allreduce(cohort::make_buffer(data));
  std::printf("rank %d: every allreduce passed although rank 1 was killed\n", group->rank());
  return 3;
}

int thread_level_too_low() {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  int status = 1;
  try {
    cohort::create_mpi_group();
    std::printf("a group was made on MPI_THREAD_SERIALIZED\n");
  } catch (const cohort::ConfigError& e) {
    std::printf("ConfigError: %s\n", e.what());
    status = 0;
  }
  MPI_Finalize();
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "kill") return kill_one_rank();
  if (mode == "thread-level") return thread_level_too_low();
  std::fprintf(stderr, "usage: failure_rank kill|thread-level\n");
  return 2;
}
