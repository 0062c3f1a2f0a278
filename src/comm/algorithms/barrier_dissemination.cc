// Dissemination barrier (Hensgen, Finkel, Manber): in round k = 0, 1, ..., ceil(log2 n) - 1,
// rank r sends an empty message to r + 2^k and waits for one from r - 2^k. After the last round
// every rank has heard, transitively, from every other. 0 bytes; ceil(log2 n) latency terms.
#include "algorithms/algorithms.h"

namespace cohort::algo {

void barrier_dissemination(Context& ctx) {
  const int n = ctx.size();
  const int me = ctx.rank();
  uint64_t round = 0;
  for (int distance = 1; distance < n; distance *= 2, ++round) {
    auto recv = ctx.irecv((me - distance + n) % n, round, nullptr, 0);
    ctx.send((me + distance) % n, round, nullptr, 0);
    recv->wait();
  }
}

}  // namespace cohort::algo
