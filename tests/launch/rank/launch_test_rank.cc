// A rank for the cohortrun tests (tests/launch/cohortrun_test.cc): joins the job with
// cohort::init(), prints its pid, meets the others, then does what the test asks:
//
//   launch_test_rank ok                  allreduce, print "sum <total>", exit 0
//   launch_test_rank exit R CODE         rank R exits with CODE, the others sleep
//   launch_test_rank kill R              rank R kills itself (SIGKILL), the others sleep
//   launch_test_rank sleep               every rank sleeps (to be stopped by a signal)
//   launch_test_rank fail-once R         rank R exits 3 unless COHORT_RESTART_COUNT > 0
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "cohort/comm/init.h"

namespace {

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
  } else if (mode == "kill") {
    if (me) ::raise(SIGKILL);
    sleep_long();
  } else if (mode == "sleep") {
    sleep_long();
  } else if (mode == "fail-once") {
    if (me && std::atoi(std::getenv("COHORT_RESTART_COUNT")) == 0) return 3;
    std::printf("sum %d\n", all_reduce_ranks(*group));
    group->barrier();
  }
  return 0;
}
