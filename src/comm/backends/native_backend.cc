#include "backends/native_backend.h"

#include <cstring>
#include <map>
#include <utility>

#include "algorithms/algorithms.h"
#include "cohort/core/check.h"
#include "kernels/reduce_kernels.h"

namespace cohort {

namespace {

using Runner = void (*)(const CollectiveCall&, const Plan&, algo::Context&);
using Table = std::map<std::pair<CollectiveKind, Algorithm>, Runner>;

void average_over_group(const CollectiveCall& call, void* data, size_t count, algo::Context& ctx) {
  if (call.op == ReduceOp::kAvg) kernels::divide(data, count, call.dtype, ctx.size());
}

// ---- allreduce: out of place copies first; the algorithms finish kAvg themselves. The table
// below is the one place that picks an allreduce algorithm (algo::allreduce_with serves only
// the hierarchical allreduce's phase across nodes).
void copy_in(const CollectiveCall& call) {
  if (call.in != call.out && call.bytes() > 0) std::memcpy(call.out, call.in, call.bytes());
}

template <void (*F)(algo::Context&, void*, size_t, DType, ReduceOp)>
void allreduce(const CollectiveCall& call, const Plan&, algo::Context& ctx) {
  copy_in(call);
  F(ctx, call.out, call.count, call.dtype, call.op);
}

void allreduce_hierarchical(const CollectiveCall& call, const Plan& plan, algo::Context& ctx) {
  copy_in(call);
  algo::allreduce_hierarchical(ctx, call.out, call.count, call.dtype, call.op, plan.across);
}

// ---- broadcast
template <void (*F)(algo::Context&, void*, size_t, int)>
void broadcast(const CollectiveCall& call, const Plan&, algo::Context& ctx) {
  F(ctx, call.out, call.bytes(), call.root);
}

// ---- reduce
void reduce_direct(const CollectiveCall& call, const Plan&, algo::Context& ctx) {
  algo::reduce_direct(ctx, call.out, call.count, call.dtype, call.op, call.root);
  if (ctx.rank() == call.root) average_over_group(call, call.out, call.count, ctx);
}

void reduce_tree(const CollectiveCall& call, const Plan&, algo::Context& ctx) {
  // Inner tree nodes accumulate into their buffer: work on a copy there so that the caller's
  // data is left unchanged (the direct variant only sends it).
  void* target = call.out;
  std::vector<uint8_t> copy;
  if (ctx.rank() != call.root && call.bytes() > 0) {
    const auto* begin = static_cast<const uint8_t*>(call.out);
    copy.assign(begin, begin + call.bytes());
    target = copy.data();
  }
  algo::reduce_tree(ctx, target, call.count, call.dtype, call.op, call.root);
  if (ctx.rank() == call.root) average_over_group(call, call.out, call.count, ctx);
}

// ---- allgather, ring_shift, gather, scatter, all_to_all: bytes of one rank's block
template <void (*F)(algo::Context&, const void*, void*, size_t)>
void one_block_each(const CollectiveCall& call, const Plan&, algo::Context& ctx) {
  F(ctx, call.in, call.out, call.bytes());
}

void gather(const CollectiveCall& call, const Plan&, algo::Context& ctx) {
  algo::gather_direct(ctx, call.in, call.out, call.bytes(), call.root);
}

void scatter(const CollectiveCall& call, const Plan&, algo::Context& ctx) {
  algo::scatter_direct(ctx, call.in, call.out, call.bytes(), call.root);
}

void all_to_all(const CollectiveCall& call, const Plan&, algo::Context& ctx) {
  algo::all_to_all_direct(ctx, call.in, call.out, call.bytes() / static_cast<size_t>(ctx.size()));
}

// ---- reduce_scatter: the group divides the block each rank gets
template <void (*F)(algo::Context&, const void*, void*, size_t, DType, ReduceOp)>
void reduce_scatter(const CollectiveCall& call, const Plan&, algo::Context& ctx) {
  F(ctx, call.in, call.out, call.count, call.dtype, call.op);
  average_over_group(call, call.out, call.count, ctx);
}

// ---- barrier
template <void (*F)(algo::Context&)>
void barrier(const CollectiveCall&, const Plan&, algo::Context& ctx) {
  F(ctx);
}

const Table& table() {
  using K = CollectiveKind;
  using A = Algorithm;
  static const Table runners = {
      {{K::kAllreduce, A::kRing}, allreduce<algo::allreduce_ring>},
      {{K::kAllreduce, A::kTree}, allreduce<algo::allreduce_tree>},
      {{K::kAllreduce, A::kHalvingDoubling}, allreduce<algo::allreduce_halving_doubling>},
      {{K::kAllreduce, A::kDirect}, allreduce<algo::allreduce_direct>},
      {{K::kAllreduce, A::kShm}, allreduce<algo::allreduce_shm>},
      {{K::kAllreduce, A::kHierarchical}, allreduce_hierarchical},
      {{K::kBroadcast, A::kDirect}, broadcast<algo::broadcast_direct>},
      {{K::kBroadcast, A::kTree}, broadcast<algo::broadcast_tree>},
      {{K::kBroadcast, A::kRing}, broadcast<algo::broadcast_ring>},
      {{K::kBroadcast, A::kShm}, broadcast<algo::broadcast_shm>},
      {{K::kReduce, A::kDirect}, reduce_direct},
      {{K::kReduce, A::kTree}, reduce_tree},
      {{K::kAllgather, A::kDirect}, one_block_each<algo::allgather_direct>},
      {{K::kAllgather, A::kRing}, one_block_each<algo::allgather_ring>},
      {{K::kAllgather, A::kHalvingDoubling}, one_block_each<algo::allgather_doubling>},
      {{K::kAllgather, A::kShm}, one_block_each<algo::allgather_shm>},
      {{K::kReduceScatter, A::kDirect}, reduce_scatter<algo::reduce_scatter_direct>},
      {{K::kReduceScatter, A::kRing}, reduce_scatter<algo::reduce_scatter_ring>},
      {{K::kReduceScatter, A::kHalvingDoubling}, reduce_scatter<algo::reduce_scatter_halving>},
      {{K::kReduceScatter, A::kShm}, reduce_scatter<algo::reduce_scatter_shm>},
      {{K::kGather, A::kDirect}, gather},
      {{K::kScatter, A::kDirect}, scatter},
      {{K::kAllToAll, A::kDirect}, all_to_all},
      {{K::kRingShift, A::kDirect}, one_block_each<algo::ring_shift_direct>},
      {{K::kRingShift, A::kShm}, one_block_each<algo::ring_shift_shm>},
      {{K::kBarrier, A::kDirect}, barrier<algo::barrier_dissemination>},
      {{K::kBarrier, A::kShm}, barrier<algo::barrier_shm>},
  };
  return runners;
}

std::string algorithm_list(CollectiveKind kind) {
  std::string list;
  for (Algorithm a : NativeBackend::algorithms_for(kind)) {
    list += (list.empty() ? "" : ", ") + std::string(algorithm_name(a));
  }
  return list;
}

}  // namespace

bool NativeBackend::has(CollectiveKind kind, Algorithm algorithm) {
  return table().count({kind, algorithm}) > 0;
}

std::vector<Algorithm> NativeBackend::algorithms_for(CollectiveKind kind) {
  std::vector<Algorithm> algorithms;
  for (const auto& entry : table()) {
    if (entry.first.first == kind) algorithms.push_back(entry.first.second);
  }
  return algorithms;
}

void NativeBackend::run(const CollectiveCall& call, const Plan& plan, algo::Context& ctx) {
  COHORT_CHECK(call.device == kHostMemory, call.describe(),
               ": cohort's own algorithms move host memory only");
  const auto runner = table().find({call.kind, plan.algorithm});
  COHORT_CHECK(runner != table().end(), call.describe(), ": cohort has no ",
               algorithm_name(plan.algorithm),
               " algorithm for it (it has: ", algorithm_list(call.kind), ")");
  ctx.set_registered(call.registered);  // what the shm algorithms run in place on
  runner->second(call, plan, ctx);
}

}  // namespace cohort
