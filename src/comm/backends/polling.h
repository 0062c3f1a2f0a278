// Note [Engine polling]: engines advance their work only while they are polled (MPI moves a
// nonblocking collective on only inside MPI calls; a nonblocking NCCL communicator answers
// ncclInProgress until asked again), so a wait keeps polling, as MPI_Wait would. It spins for
// the first microseconds (a small message is back within them), then yields the core between
// polls, so that ranks sharing cores (mpirun --oversubscribe, DDP's compute threads) still run;
// only a wait that has lasted 100 ms (a straggling peer or a connection set-up, not a transfer)
// sleeps between polls.
#pragma once

#include <chrono>
#include <thread>

#include "cohort/core/deadline.h"

namespace cohort {

// Call between two polls of a wait that began at `start`.
inline void pause_between_polls(Clock::time_point start) {
  const auto waited = Clock::now() - start;
  if (waited < std::chrono::microseconds(20)) return;
  if (waited < std::chrono::milliseconds(100)) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

}  // namespace cohort
