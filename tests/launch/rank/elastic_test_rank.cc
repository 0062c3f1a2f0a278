// A rank for the elastic cohortrun tests (tests/launch/elastic_launch_test.cc), comm only: it
// joins the job with cohort::init_elastic() and runs committed steps, each an allreduce (sum)
// of 1.0 over the current generation, whose result must be the generation's size.
//
//   elastic_test_rank [--steps N] [--kill-at-step S (--kill-slot R | --kill-node R)]
//                     [--join-after-generation G] [--grow-back-by-step S [--grow-to N]]
//
// It prints its pid and the elastic variables cohortrun set ("elastic env: ..."). Each
// committed step prints "step <s> size <W> gen <g>"; each join, recover and grow prints
// "membership: <Membership::describe()>". A PeerError or TimeoutError in a step makes it
// recover (the step is redone by the next generation). At each step rank 0 asks whether
// members wait to join and shares the answer in the step's allreduce, so that every member
// grows at the same step boundary. After N committed steps it calls finish() and exits 0; an
// ElasticError is printed ("ElasticError: ...") and exits 4.
//
// --kill-at-step S --kill-slot R: the first process of launch slot R (RANK=R,
// COHORT_ELASTIC_RESTART=0) raises SIGKILL on itself at the start of step S.
// --kill-at-step S --kill-node R: the first process of each rank on node R (GROUP_RANK=R,
// COHORT_ELASTIC_RESTART=0) kills its cohortrun (its parent) with SIGKILL, then itself, at the
// start of step S: the node is lost with all its ranks, as when its host goes away.
// --join-after-generation G: a restarted process (COHORT_ELASTIC_RESTART > 0) waits until
// generation G has formed before it joins, so that a test sees the job shrink before it grows
// again (otherwise the survivors' next generation may already take it in).
// --grow-back-by-step S: at step S, members of a job smaller than N (--grow-to, default
// WORLD_SIZE) wait until enough new members have arrived to make it N again, so that they join
// by then (otherwise the survivors may finish first).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cohort/comm/elastic.h"
#include "cohort/comm/job_store.h"
#include "cohort/comm/launch_env.h"

namespace {

struct Args {
  int64_t steps = 30;
  int64_t kill_at_step = -1;
  int kill_slot = -1;
  int kill_node = -1;
  int grow_to = 0;
  int join_after_generation = 0;
  int64_t grow_back_by_step = -1;
};

Args parse(int argc, char** argv) {
  Args args;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const long long value = std::atoll(argv[i + 1]);
    if (flag == "--steps") args.steps = value;
    if (flag == "--kill-at-step") args.kill_at_step = value;
    if (flag == "--kill-slot") args.kill_slot = static_cast<int>(value);
    if (flag == "--kill-node") args.kill_node = static_cast<int>(value);
    if (flag == "--grow-to") args.grow_to = static_cast<int>(value);
    if (flag == "--join-after-generation") args.join_after_generation = static_cast<int>(value);
    if (flag == "--grow-back-by-step") args.grow_back_by_step = value;
  }
  return args;
}

int env_int(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::atoi(value) : 0;
}

// Prints a new membership; returns the step its members go on from.
int64_t changed(const cohort::Membership& membership) {
  std::printf("membership: %s\n", membership.describe().c_str());
  std::fflush(stdout);
  return membership.committed_step();
}

// Waits until `name` of generation `generation` exists in the job's store (the keys of Note
// [Elastic rendezvous]): "closed" once it has formed.
void wait_for_key(uint64_t generation, const std::string& name) {
  const auto store = cohort::connect_job_store(cohort::read_launch_env(),
                                               cohort::GroupOptions{}.resolved(), false);
  store->wait({"elastic/g" + std::to_string(generation) + "/" + name}, cohort::Milliseconds(60000));
}

// One step: the allreduce of 1.0 (the size) and of rank 0's "members wait to join" (> 0: grow
// after this step). Throws what the collective throws.
bool run_step(cohort::ElasticGroup& elastic, int64_t step) {
  std::vector<float> data = {1.0f, 0.0f};
  if (elastic.membership().rank == 0 && elastic.joiners_waiting()) data[1] = 1.0f;
  elastic.group().allreduce(cohort::make_buffer(data));
  const int size = elastic.membership().size;
  if (data[0] != static_cast<float>(size)) {
    std::fprintf(stderr, "step %lld: the sum is %g, not the size %d\n",
                 static_cast<long long>(step), data[0], size);
    std::exit(3);
  }
  std::printf("step %lld size %d gen %llu\n", static_cast<long long>(step), size,
              static_cast<unsigned long long>(elastic.membership().generation));
  std::fflush(stdout);
  return data[1] > 0.0f;
}

void train(const Args& args) {
  const bool first_process = env_int("COHORT_ELASTIC_RESTART") == 0;
  const bool doomed = env_int("RANK") == args.kill_slot && first_process;
  const bool node_doomed =
      args.kill_node >= 0 && env_int("GROUP_RANK") == args.kill_node && first_process;
  const int grow_to = args.grow_to > 0 ? args.grow_to : env_int("WORLD_SIZE");
  if (env_int("COHORT_ELASTIC_RESTART") > 0 && args.join_after_generation > 0) {
    wait_for_key(static_cast<uint64_t>(args.join_after_generation), "closed");
  }
  auto elastic = cohort::init_elastic();
  // A member that joins a running job takes up its step (a trainer would heal from rank 0).
  int64_t committed = changed(elastic->join());
  while (committed + 1 < args.steps) {
    const int64_t step = committed + 1;
    if (doomed && step == args.kill_at_step) ::raise(SIGKILL);
    if (node_doomed && step == args.kill_at_step) {
      ::kill(::getppid(), SIGKILL);  // its cohortrun
      ::raise(SIGKILL);
    }
    const cohort::Membership& now = elastic->membership();
    if (step == args.grow_back_by_step && now.size < grow_to) {
      // Then rank 0 sees them, and they are all in by the close.
      if (!elastic->wait_for_joiners(grow_to - now.size, cohort::Milliseconds(60000))) {
        std::printf("no joiners came\n");
        std::exit(5);
      }
    }
    // After a grow or a recover, every member goes on from the newest committed step.
    try {
      const bool grow = run_step(*elastic, step);
      committed = step;
      if (grow) committed = changed(elastic->grow(committed));
    } catch (const cohort::PeerError& e) {
      committed = changed(elastic->recover(e, committed));
    } catch (const cohort::TimeoutError& e) {
      committed = changed(elastic->recover(e, committed));
    }
  }
  elastic->finish();
}

// What cohortrun --min-ranks set, in one line.
void print_elastic_env() {
  std::printf("elastic env:");
  for (const char* name : {"COHORT_ELASTIC", "COHORT_ELASTIC_MIN_RANKS", "COHORT_ELASTIC_MAX_RANKS",
                           "COHORT_ELASTIC_RESTART", "COHORT_STORE_HOSTED"}) {
    const char* value = std::getenv(name);
    std::printf(" %s=%s", name, value != nullptr ? value : "<unset>");
  }
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::printf("pid %d\n", static_cast<int>(::getpid()));
  print_elastic_env();
  std::fflush(stdout);
  try {
    train(parse(argc, argv));
  } catch (const cohort::ElasticError& e) {
    std::fprintf(stderr, "ElasticError: %s\n", e.what());
    return 4;
  }
  return 0;
}
