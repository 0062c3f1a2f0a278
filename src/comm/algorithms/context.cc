#include "algorithms/context.h"

#include "transport/shm/shm_window.h"

namespace cohort::algo {

void Context::post_shm_round(uint64_t round, const char* what) {
  shm_->post_and_wait(round, ShmRoundCall{sequence_, stamp_}, deadline_, what);
}

void Context::post_shm_round(uint64_t round, const char* what, const ShmPlace& place) {
  shm_->post_and_wait(round, ShmRoundCall{sequence_, stamp_}, deadline_, what, place);
}

}  // namespace cohort::algo
