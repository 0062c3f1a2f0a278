#include "backends/collective_engine.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "cohort/core/check.h"
#include "kernels/reduce_kernels.h"

namespace cohort {

namespace {

// kAvg reaches the engine for device memory (NCCL averages natively); for host memory it sums
// and run() divides (MPI has no average).
ReduceOp engine_op(const CollectiveCall& call) {
  return call.device == kHostMemory ? kernels::combine_op(call.op) : call.op;
}

void finish_host_average(const CollectiveCall& call, void* data, size_t count, int size) {
  if (call.device == kHostMemory && call.op == ReduceOp::kAvg) {
    kernels::divide(data, count, call.dtype, size);
  }
}

}  // namespace

void CollectiveEngine::run(const CollectiveCall& call, const Plan& plan, algo::Context& ctx) {
  COHORT_CHECK(plan.algorithm == Algorithm::kEngine, call.describe(), ": ", engine_name(),
               " runs its own collectives, not cohort's ", algorithm_name(plan.algorithm));
  const EngineCall on{ctx.deadline(), call.device, call.stream};
  const ReduceOp op = engine_op(call);
  switch (call.kind) {
    case CollectiveKind::kAllreduce:
      allreduce(call.in, call.out, call.count, call.dtype, op, on);
      finish_host_average(call, call.out, call.count, ctx.size());
      return;
    case CollectiveKind::kBroadcast:
      broadcast(call.out, call.count, call.dtype, call.root, on);
      return;
    case CollectiveKind::kReduce:
      reduce(call.out, call.count, call.dtype, op, call.root, on);
      if (ctx.rank() == call.root) finish_host_average(call, call.out, call.count, ctx.size());
      return;
    case CollectiveKind::kAllgather:
      allgather(call.in, call.out, call.count, call.dtype, on);
      return;
    case CollectiveKind::kReduceScatter:
      reduce_scatter(call.in, call.out, call.count, call.dtype, op, on);
      finish_host_average(call, call.out, call.count, ctx.size());
      return;
    case CollectiveKind::kGather:
      gather(call.in, call.out, call.count, call.dtype, call.root, on);
      return;
    case CollectiveKind::kScatter:
      scatter(call.in, call.out, call.count, call.dtype, call.root, on);
      return;
    case CollectiveKind::kAllToAll:
      all_to_all(call.in, call.out, call.count / static_cast<size_t>(ctx.size()), call.dtype, on);
      return;
    case CollectiveKind::kBarrier: barrier(on); return;
    case CollectiveKind::kRingShift:  // no engine offers it (supports() says so)
    case CollectiveKind::kSend:
    case CollectiveKind::kRecv: break;
  }
  COHORT_CHECK(false, call.describe(), ": not a collective ", engine_name(), " runs");
}

// The Group calls these only for device buffers, so only engines that handle device memory
// (NCCL) override them.
void CollectiveEngine::send(const void*, size_t, DType, int, const EngineCall&) {
  COHORT_INTERNAL_ASSERT(false, engine_name(), " has no send of its own");
}

void CollectiveEngine::recv(void*, size_t, DType, int, const EngineCall&) {
  COHORT_INTERNAL_ASSERT(false, engine_name(), " has no recv of its own");
}

std::vector<std::string> CollectiveEngine::node_keys(Deadline deadline) {
  constexpr size_t kNameBytes = 256;  // HOST_NAME_MAX is 64 on Linux; room to spare
  std::vector<char> mine(kNameBytes, '\0');
  COHORT_CHECK(::gethostname(mine.data(), mine.size() - 1) == 0,
               "gethostname failed: ", std::strerror(errno));
  const auto ranks = static_cast<size_t>(size());
  std::vector<char> all(kNameBytes * ranks, '\0');
  allgather(mine.data(), all.data(), kNameBytes, DType::kUInt8, deadline);
  std::vector<std::string> keys;
  for (size_t r = 0; r < ranks; ++r) keys.emplace_back(all.data() + r * kNameBytes);
  return keys;
}

}  // namespace cohort
