// A rank for the cohortrun tests (tests/launch/cohortrun_test.cc): joins the job with
// cohort::init(), prints its pid, meets the others, then does what the test asks:
//
//   launch_test_rank ok                  allreduce, print "sum <total>", exit 0
//   launch_test_rank exit R CODE         rank R exits with CODE, the others sleep
//   launch_test_rank all-exit CODE       every rank exits with CODE
//   launch_test_rank kill R              rank R kills itself (SIGKILL), the others sleep
//   launch_test_rank kill-alone R        rank R kills itself (SIGKILL), the others exit 0
//   launch_test_rank stop-alone R        rank R stops itself (SIGSTOP), the others exit 0
//   launch_test_rank nodes               print "node N of M, local rank L of S", allreduce, exit 0
//   launch_test_rank sleep               every rank sleeps (to be stopped by a signal)
//   launch_test_rank fail-once R         rank R exits 3 unless COHORT_RESTART_COUNT > 0
//   launch_test_rank stop R              rank R stops itself (SIGSTOP), the others wait for it
//                                        in a barrier until COHORT_TIMEOUT_S and abort
//   launch_test_rank hang R              rank R sleeps instead of joining the others' barrier
//   launch_test_rank leave-shm R         every rank creates a shared-memory segment under the
//                                        job's name and prints "segment <name>", then rank R
//                                        kills itself (SIGKILL), the others sleep
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "cohort/comm/init.h"
#include "transport/shm/shm_names.h"

namespace {

// A rank that keeps running until cohortrun ends it: what the modes that call this test (the
// launcher stopping the others), not a wait for another process to get somewhere. The 60 s only
// bound a rank that the launcher failed to end, so that it does not outlive the test for long.
void sleep_long() {
  std::this_thread::sleep_for(std::chrono::seconds(60));
}

int all_reduce_ranks(cohort::Group& group) {
  std::vector<int32_t> data(1000, group.rank() + 1);
  group.allreduce(cohort::make_buffer(data));
  return data.back();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "ok";
  const int target = argc > 2 ? std::atoi(argv[2]) : -1;
  auto group = cohort::init();
  std::printf("pid %d\n", static_cast<int>(::getpid()));
  std::printf("restart %s\n", std::getenv("COHORT_RESTART_COUNT"));
  std::fflush(stdout);
  group->barrier();  // every pid is printed before anyone fails
  const bool me = group->rank() == target;
  if (mode == "ok") {
    std::printf("sum %d\n", all_reduce_ranks(*group));
    group->barrier();
  } else if (mode == "exit") {
    if (me) return std::atoi(argv[3]);
    sleep_long();
  } else if (mode == "all-exit") {  // every rank exits with the code given in place of a rank
    return target;
  } else if (mode == "kill-alone") {
    if (me) ::raise(SIGKILL);
  } else if (mode == "nodes") {
    std::printf("node %d of %d, local rank %d of %d\n", group->node_rank(), group->num_nodes(),
                group->local_rank(), group->local_size());
    std::printf("sum %d\n", all_reduce_ranks(*group));
  } else if (mode == "stop-alone") {
    if (me) ::raise(SIGSTOP);
  } else if (mode == "kill") {
    if (me) ::raise(SIGKILL);
    sleep_long();
  } else if (mode == "sleep") {
    sleep_long();
  } else if (mode == "stop" || mode == "hang") {
    if (me) {
      if (mode == "stop") ::raise(SIGSTOP);
      sleep_long();
    }
    group->barrier();  // times out: the uncaught error names the missing rank
  } else if (mode == "leave-shm") {
    // What a rank killed while its group's segment still has a name leaves behind.
    const std::string name =
        cohort::shm_segment_name(std::getenv("COHORT_JOB_TOKEN"), ::getpid(), 1);
    if (::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600) < 0) return 5;
    std::printf("segment %s\n", name.c_str());
    std::fflush(stdout);
    group->barrier();  // every segment exists before rank R dies
    if (me) ::raise(SIGKILL);
    sleep_long();
  } else if (mode == "fail-once") {
    if (me && std::atoi(std::getenv("COHORT_RESTART_COUNT")) == 0) return 3;
    std::printf("sum %d\n", all_reduce_ranks(*group));
    group->barrier();
  }
  return 0;
}
