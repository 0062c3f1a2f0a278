// The public collectives of cohort::Group: validate arguments on the caller's thread, then
// queue an Operation whose body picks the algorithm and runs it (group_impl.cc runs it).
#include "cohort/comm/group.h"

#include <algorithm>
#include <cstring>

#include "algorithms/algorithms.h"
#include "backends/collective_engine.h"
#include "cohort/comm/inproc_transport.h"
#include "cohort/comm/prefix_store.h"
#include "cohort/core/check.h"
#include "group_impl.h"
#include "reduce_kernels.h"

namespace cohort {

namespace {

void check_same_dtype(ConstBuffer in, Buffer out, const char* what) {
  COHORT_CHECK(in.dtype == out.dtype, what, ": input is ", dtype_name(in.dtype),
               " but output is ", dtype_name(out.dtype));
}

void check_pointer(const void* data, size_t count, const char* what) {
  COHORT_CHECK(data != nullptr || count == 0, what, ": buffer of ", count,
               " elements has a null data pointer");
}

void finish_average(void* data, size_t count, DType dtype, ReduceOp op, int size) {
  if (op == ReduceOp::kAvg) kernels::divide(data, count, dtype, size);
}

// Only reached when the group chose Algorithm::kEngine, which needs an engine.
CollectiveEngine& engine_of(algo::Context& ctx) { return *ctx.transport().engine(); }

std::string place_name(int device) {
  return device == kHostMemory ? "host memory" : "CUDA device " + std::to_string(device);
}

void check_same_device(int in, int out, const char* what) {
  COHORT_CHECK(in == out, what, ": input is in ", place_name(in), " but output is in ",
               place_name(out));
}

// Note [Device buffers]: only an engine that handles device memory (NCCL) takes buffers on a
// CUDA device. cohort's own algorithms read and write buffers with the CPU (memcpy, reduce
// kernels), which would fault on device pointers, so they refuse them up front.
void check_device(int device, Algorithm algorithm, CollectiveEngine* engine, const char* what) {
  if (device == kHostMemory) return;
  COHORT_CHECK(device >= 0, what, ": buffer device ", device,
               " is neither kHostMemory (-1) nor a CUDA device index");
  const bool engine_takes_it =
      algorithm == Algorithm::kEngine && engine != nullptr && engine->handles_device_memory();
  COHORT_CHECK(engine_takes_it, what, ": the buffer is on CUDA device ", device,
               ", but this group moves host memory only (",
               engine != nullptr ? engine->engine_name() : "cohort's own algorithms",
               "): run it on an NCCL group (cohort::create_nccl_group, cohort/comm/nccl.h) or "
               "copy the data to the host first");
  engine->check_device(device, what);
}

// kAvg reaches the engine for device memory (NCCL averages natively); for host memory the
// Group sums and divides (MPI has no average).
ReduceOp engine_op(ReduceOp op, int device) {
  return device == kHostMemory ? kernels::combine_op(op) : op;
}

void finish_host_average(void* data, size_t count, DType dtype, ReduceOp op, int size, int device) {
  if (device == kHostMemory) finish_average(data, count, dtype, op, size);
}

}  // namespace

// ---------------------------------------------------------------- construction

Group::Group(std::unique_ptr<Transport> transport, std::shared_ptr<Store> store,
             GroupOptions options) {
  COHORT_CHECK(transport != nullptr, "Group needs a transport");
  COHORT_CHECK(store != nullptr || transport->engine() != nullptr,
               "Group needs a store shared by all ranks (only a transport on an engine such as "
               "MPI can do without one)");
  const bool storeless = store == nullptr;
  impl_ = std::make_unique<Impl>(std::move(transport), std::move(store), options.resolved());
  if (storeless) impl_->discover_topology_through_engine();
}

Group::~Group() = default;

std::shared_ptr<Group> Group::create_inproc(std::shared_ptr<InprocFabric> fabric, int rank,
                                            GroupOptions options) {
  COHORT_CHECK(fabric != nullptr, "create_inproc needs a fabric");
  auto store = std::make_shared<PrefixStore>("g/" + options.name, fabric->store());
  auto group = std::make_shared<Group>(std::make_unique<InprocTransport>(fabric, rank), store,
                                       std::move(options));
  group->impl_->share_one_process();
  return group;
}

int Group::rank() const { return impl_->rank(); }
int Group::size() const { return impl_->size(); }
int Group::local_rank() const { return impl_->topology().local_rank(); }
int Group::local_size() const { return impl_->topology().local_size(); }
int Group::node_rank() const { return impl_->topology().node_rank(); }
int Group::num_nodes() const { return impl_->topology().num_nodes(); }

bool Group::takes_device_buffers() const {
  const CollectiveEngine* engine = impl_->transport().engine();
  return engine != nullptr && engine->handles_device_memory();
}

Algorithm Group::algorithm_for(CollectiveKind kind, size_t bytes,
                               const CollectiveOptions& opts) const {
  return impl_->algorithm_for(kind, bytes, opts);
}
const GroupOptions& Group::options() const { return impl_->options(); }
uint64_t Group::sequence_number() const { return impl_->sequence_number(); }

void Group::abort(const std::string& reason) noexcept {
  impl_->abort(std::make_exception_ptr(Error(reason)));
}

// ---------------------------------------------------------------- helpers

namespace {

Operation collective(Signature signature, CallSite site, Milliseconds timeout,
                     std::function<void(algo::Context&)> body) {
  Operation op;
  op.signature = signature;
  op.signature.site = site;
  op.timeout = timeout;
  op.body = std::move(body);
  return op;
}

}  // namespace

// ---------------------------------------------------------------- allreduce

// One operation for both forms: validated on the caller's thread, copied in when out of place.
Operation Group::allreduce_operation(ConstBuffer in, Buffer out,
                                     const CollectiveOptions& opts) const {
  check_pointer(in.data, in.count, "allreduce");
  check_pointer(out.data, out.count, "allreduce");
  check_same_dtype(in, out, "allreduce");
  COHORT_CHECK_EQ(in.count, out.count, "allreduce: input and output counts differ");
  check_same_device(in.device, out.device, "allreduce");
  const Signature call{CollectiveKind::kAllreduce, out.count, out.dtype, opts.op};
  const Algorithm algorithm = impl_->algorithm_for(call, out.bytes(), opts);
  check_device(out.device, algorithm, impl_->transport().engine(), "allreduce");
  const Algorithm across = algorithm == Algorithm::kHierarchical
                               ? impl_->algorithm_across_nodes(out.bytes())
                               : Algorithm::kRing;
  return collective(call, opts.site, impl_->timeout_for(opts), [=](algo::Context& ctx) {
    if (algorithm == Algorithm::kEngine) {
      engine_of(ctx).allreduce(in.data, out.data, out.count, out.dtype,
                               engine_op(opts.op, out.device),
                               {ctx.deadline(), out.device, opts.stream});
      finish_host_average(out.data, out.count, out.dtype, opts.op, ctx.size(), out.device);
      return;
    }
    if (in.data != out.data && out.bytes() > 0) std::memcpy(out.data, in.data, out.bytes());
    algo::allreduce_with(algorithm, ctx, out.data, out.count, out.dtype, opts.op, across);
  });
}

std::shared_ptr<Work> Group::allreduce_async(Buffer data, const CollectiveOptions& opts) {
  return impl_->submit(allreduce_operation(data, data, opts));
}

void Group::allreduce(Buffer data, const CollectiveOptions& opts) {
  impl_->run_blocking(allreduce_operation(data, data, opts));
}

void Group::allreduce(ConstBuffer in, Buffer out, const CollectiveOptions& opts) {
  impl_->run_blocking(allreduce_operation(in, out, opts));
}

// ---------------------------------------------------------------- broadcast

std::shared_ptr<Work> Group::broadcast_async(Buffer data, const CollectiveOptions& opts) {
  check_pointer(data.data, data.count, "broadcast");
  COHORT_CHECK(opts.root >= 0 && opts.root < size(), "broadcast: root ", opts.root,
               " is not a rank of this group of size ", size());
  const Signature call{CollectiveKind::kBroadcast, data.count, data.dtype, opts.op, opts.root};
  const Algorithm algorithm = impl_->algorithm_for(call, data.bytes(), opts);
  check_device(data.device, algorithm, impl_->transport().engine(), "broadcast");
  return impl_->submit(collective(
      call, opts.site, impl_->timeout_for(opts), [=](algo::Context& ctx) {
        switch (algorithm) {
          case Algorithm::kEngine:
            engine_of(ctx).broadcast(data.data, data.bytes(), opts.root,
                                     {ctx.deadline(), data.device, opts.stream});
            break;
          case Algorithm::kTree: algo::broadcast_tree(ctx, data.data, data.bytes(), opts.root); break;
          case Algorithm::kRing: algo::broadcast_ring(ctx, data.data, data.bytes(), opts.root); break;
          case Algorithm::kShm: algo::broadcast_shm(ctx, data.data, data.bytes(), opts.root); break;
          default: algo::broadcast_direct(ctx, data.data, data.bytes(), opts.root); break;
        }
      }));
}

void Group::broadcast(Buffer data, const CollectiveOptions& opts) {
  broadcast_async(data, opts)->wait();
}

// ---------------------------------------------------------------- reduce

std::shared_ptr<Work> Group::reduce_async(Buffer data, const CollectiveOptions& opts) {
  check_pointer(data.data, data.count, "reduce");
  COHORT_CHECK(opts.root >= 0 && opts.root < size(), "reduce: root ", opts.root,
               " is not a rank of this group of size ", size());
  const Signature call{CollectiveKind::kReduce, data.count, data.dtype, opts.op, opts.root};
  const Algorithm algorithm = impl_->algorithm_for(call, data.bytes(), opts);
  check_device(data.device, algorithm, impl_->transport().engine(), "reduce");
  return impl_->submit(collective(
      call, opts.site, impl_->timeout_for(opts), [=](algo::Context& ctx) {
        if (algorithm == Algorithm::kEngine) {
          engine_of(ctx).reduce(data.data, data.count, data.dtype, engine_op(opts.op, data.device),
                                opts.root, {ctx.deadline(), data.device, opts.stream});
        } else if (algorithm != Algorithm::kTree) {
          algo::reduce_direct(ctx, data.data, data.count, data.dtype, opts.op, opts.root);
        } else {
          // Inner tree nodes accumulate into their buffer: work on a copy there so that the
          // caller's data is left unchanged (the direct variant only sends it).
          void* target = data.data;
          std::vector<uint8_t> copy;
          if (ctx.rank() != opts.root && data.bytes() > 0) {
            copy.assign(static_cast<uint8_t*>(data.data),
                        static_cast<uint8_t*>(data.data) + data.bytes());
            target = copy.data();
          }
          algo::reduce_tree(ctx, target, data.count, data.dtype, opts.op, opts.root);
        }
        if (ctx.rank() == opts.root) {
          finish_host_average(data.data, data.count, data.dtype, opts.op, ctx.size(), data.device);
        }
      }));
}

void Group::reduce(Buffer data, const CollectiveOptions& opts) { reduce_async(data, opts)->wait(); }

// ---------------------------------------------------------------- allgather

std::shared_ptr<Work> Group::allgather_async(ConstBuffer in, Buffer out,
                                             const CollectiveOptions& opts) {
  check_pointer(in.data, in.count, "allgather");
  check_pointer(out.data, out.count, "allgather");
  check_same_dtype(in, out, "allgather");
  COHORT_CHECK_EQ(out.count, in.count * static_cast<size_t>(size()),
                  "allgather: the output must hold size() blocks of the input's count");
  check_same_device(in.device, out.device, "allgather");
  const Signature call{CollectiveKind::kAllgather, in.count, in.dtype};
  const Algorithm algorithm = impl_->algorithm_for(call, out.bytes(), opts);
  check_device(out.device, algorithm, impl_->transport().engine(), "allgather");
  return impl_->submit(collective(
      call, opts.site, impl_->timeout_for(opts),
      [=](algo::Context& ctx) {
        switch (algorithm) {
          case Algorithm::kEngine:
            engine_of(ctx).allgather(in.data, out.data, in.bytes(),
                                     {ctx.deadline(), out.device, opts.stream});
            break;
          case Algorithm::kRing: algo::allgather_ring(ctx, in.data, out.data, in.bytes()); break;
          case Algorithm::kHalvingDoubling:
            algo::allgather_doubling(ctx, in.data, out.data, in.bytes());
            break;
          case Algorithm::kShm: algo::allgather_shm(ctx, in.data, out.data, in.bytes()); break;
          default: algo::allgather_direct(ctx, in.data, out.data, in.bytes()); break;
        }
      }));
}

void Group::allgather(ConstBuffer in, Buffer out, const CollectiveOptions& opts) {
  allgather_async(in, out, opts)->wait();
}

// ---------------------------------------------------------------- reduce_scatter

std::shared_ptr<Work> Group::reduce_scatter_async(ConstBuffer in, Buffer out,
                                                  const CollectiveOptions& opts) {
  check_pointer(in.data, in.count, "reduce_scatter");
  check_pointer(out.data, out.count, "reduce_scatter");
  check_same_dtype(in, out, "reduce_scatter");
  COHORT_CHECK_EQ(in.count, out.count * static_cast<size_t>(size()),
                  "reduce_scatter: the input must hold size() blocks of the output's count");
  check_same_device(in.device, out.device, "reduce_scatter");
  const Signature call{CollectiveKind::kReduceScatter, out.count, out.dtype, opts.op};
  const Algorithm algorithm = impl_->algorithm_for(call, in.bytes(), opts);
  check_device(out.device, algorithm, impl_->transport().engine(), "reduce_scatter");
  return impl_->submit(collective(
      call, opts.site, impl_->timeout_for(opts),
      [=](algo::Context& ctx) {
        switch (algorithm) {
          case Algorithm::kEngine:
            engine_of(ctx).reduce_scatter(in.data, out.data, out.count, out.dtype,
                                          engine_op(opts.op, out.device),
                                          {ctx.deadline(), out.device, opts.stream});
            break;
          case Algorithm::kRing:
            algo::reduce_scatter_ring(ctx, in.data, out.data, out.count, out.dtype, opts.op);
            break;
          case Algorithm::kHalvingDoubling:
            algo::reduce_scatter_halving(ctx, in.data, out.data, out.count, out.dtype, opts.op);
            break;
          case Algorithm::kShm:
            algo::reduce_scatter_shm(ctx, in.data, out.data, out.count, out.dtype, opts.op);
            break;
          default:
            algo::reduce_scatter_direct(ctx, in.data, out.data, out.count, out.dtype, opts.op);
            break;
        }
        finish_host_average(out.data, out.count, out.dtype, opts.op, ctx.size(), out.device);
      }));
}

void Group::reduce_scatter(ConstBuffer in, Buffer out, const CollectiveOptions& opts) {
  reduce_scatter_async(in, out, opts)->wait();
}

// ---------------------------------------------------------------- gather / scatter / all_to_all

std::shared_ptr<Work> Group::gather_async(ConstBuffer in, Buffer out,
                                          const CollectiveOptions& opts) {
  check_pointer(in.data, in.count, "gather");
  COHORT_CHECK(opts.root >= 0 && opts.root < size(), "gather: root ", opts.root,
               " is not a rank of this group of size ", size());
  if (rank() == opts.root) {
    check_same_dtype(in, out, "gather");
    check_same_device(in.device, out.device, "gather");
    COHORT_CHECK_EQ(out.count, in.count * static_cast<size_t>(size()),
                    "gather: the root's output must hold size() blocks of the input's count");
  }
  const Signature call{CollectiveKind::kGather, in.count, in.dtype, opts.op, opts.root};
  const Algorithm algorithm = impl_->algorithm_for(call, in.bytes(), opts);
  check_device(in.device, algorithm, impl_->transport().engine(), "gather");
  return impl_->submit(collective(call, opts.site, impl_->timeout_for(opts), [=](algo::Context& ctx) {
    if (algorithm == Algorithm::kEngine) {
      engine_of(ctx).gather(in.data, out.data, in.bytes(), opts.root,
                            {ctx.deadline(), in.device, opts.stream});
    } else {
      algo::gather_direct(ctx, in.data, out.data, in.bytes(), opts.root);
    }
  }));
}

void Group::gather(ConstBuffer in, Buffer out, const CollectiveOptions& opts) {
  gather_async(in, out, opts)->wait();
}

std::shared_ptr<Work> Group::scatter_async(ConstBuffer in, Buffer out,
                                           const CollectiveOptions& opts) {
  check_pointer(out.data, out.count, "scatter");
  COHORT_CHECK(opts.root >= 0 && opts.root < size(), "scatter: root ", opts.root,
               " is not a rank of this group of size ", size());
  if (rank() == opts.root) {
    check_same_dtype(in, out, "scatter");
    check_same_device(in.device, out.device, "scatter");
    COHORT_CHECK_EQ(in.count, out.count * static_cast<size_t>(size()),
                    "scatter: the root's input must hold size() blocks of the output's count");
  }
  const Signature call{CollectiveKind::kScatter, out.count, out.dtype, opts.op, opts.root};
  const Algorithm algorithm = impl_->algorithm_for(call, out.bytes(), opts);
  check_device(out.device, algorithm, impl_->transport().engine(), "scatter");
  return impl_->submit(collective(call, opts.site, impl_->timeout_for(opts), [=](algo::Context& ctx) {
    if (algorithm == Algorithm::kEngine) {
      engine_of(ctx).scatter(in.data, out.data, out.bytes(), opts.root,
                             {ctx.deadline(), out.device, opts.stream});
    } else {
      algo::scatter_direct(ctx, in.data, out.data, out.bytes(), opts.root);
    }
  }));
}

void Group::scatter(ConstBuffer in, Buffer out, const CollectiveOptions& opts) {
  scatter_async(in, out, opts)->wait();
}

std::shared_ptr<Work> Group::all_to_all_async(ConstBuffer in, Buffer out,
                                              const CollectiveOptions& opts) {
  check_pointer(in.data, in.count, "all_to_all");
  check_pointer(out.data, out.count, "all_to_all");
  check_same_dtype(in, out, "all_to_all");
  COHORT_CHECK_EQ(in.count, out.count, "all_to_all: input and output counts differ");
  check_same_device(in.device, out.device, "all_to_all");
  COHORT_CHECK(in.count % static_cast<size_t>(size()) == 0, "all_to_all: count ", in.count,
               " is not divisible by the group size ", size());
  const auto* in_begin = static_cast<const uint8_t*>(in.data);
  const auto* out_begin = static_cast<const uint8_t*>(out.data);
  COHORT_CHECK(in.bytes() == 0 || in_begin + in.bytes() <= out_begin ||
                   out_begin + out.bytes() <= in_begin,
               "all_to_all: input and output overlap; it cannot run in place");
  const size_t block_bytes = in.bytes() / static_cast<size_t>(size());
  const Signature call{CollectiveKind::kAllToAll, in.count, in.dtype};
  const Algorithm algorithm = impl_->algorithm_for(call, in.bytes(), opts);
  check_device(in.device, algorithm, impl_->transport().engine(), "all_to_all");
  return impl_->submit(collective(call, opts.site, impl_->timeout_for(opts), [=](algo::Context& ctx) {
    if (algorithm == Algorithm::kEngine) {
      engine_of(ctx).all_to_all(in.data, out.data, block_bytes,
                                {ctx.deadline(), in.device, opts.stream});
    } else {
      algo::all_to_all_direct(ctx, in.data, out.data, block_bytes);
    }
  }));
}

void Group::all_to_all(ConstBuffer in, Buffer out, const CollectiveOptions& opts) {
  all_to_all_async(in, out, opts)->wait();
}

// ---------------------------------------------------------------- barrier

Operation Group::barrier_operation(const CollectiveOptions& opts) const {
  const Algorithm algorithm = impl_->algorithm_for(CollectiveKind::kBarrier, 0, opts);
  return collective({CollectiveKind::kBarrier}, opts.site, impl_->timeout_for(opts),
                    [algorithm, stream = opts.stream](algo::Context& ctx) {
                      switch (algorithm) {
                        case Algorithm::kEngine:
                          engine_of(ctx).barrier({ctx.deadline(), kHostMemory, stream});
                          break;
                        case Algorithm::kShm: algo::barrier_shm(ctx); break;
                        default: algo::barrier_dissemination(ctx); break;
                      }
                    });
}

std::shared_ptr<Work> Group::barrier_async(const CollectiveOptions& opts) {
  return impl_->submit(barrier_operation(opts));
}

void Group::barrier(const CollectiveOptions& opts) { impl_->run_blocking(barrier_operation(opts)); }

// ---------------------------------------------------------------- send / recv

std::shared_ptr<Work> Group::send_async(ConstBuffer data, int peer, const CollectiveOptions& opts) {
  check_pointer(data.data, data.count, "send");
  COHORT_CHECK(peer >= 0 && peer < size() && peer != rank(), "send: peer ", peer,
               " must be another rank of this group of size ", size());
  CollectiveEngine* engine = impl_->transport().engine();
  if (engine != nullptr && engine->engine_only()) {
    check_device(data.device, Algorithm::kEngine, engine, "send");
    return impl_->submit_p2p(
        CollectiveKind::kSend, data.count, data.dtype, peer, opts,
        [=](algo::Context& ctx, uint64_t) {
          engine->send(data.data, data.bytes(), peer, {ctx.deadline(), data.device, opts.stream});
        });
  }
  check_device(data.device, Algorithm::kDirect, engine, "send");
  return impl_->submit_p2p(CollectiveKind::kSend, data.count, data.dtype, peer, opts,
                           [=](algo::Context& ctx, uint64_t index) {
                             ctx.send(peer, index, data.data, data.bytes());
                           });
}

std::shared_ptr<Work> Group::recv_async(Buffer data, int peer, const CollectiveOptions& opts) {
  check_pointer(data.data, data.count, "recv");
  COHORT_CHECK(peer >= 0 && peer < size() && peer != rank(), "recv: peer ", peer,
               " must be another rank of this group of size ", size());
  CollectiveEngine* engine = impl_->transport().engine();
  if (engine != nullptr && engine->engine_only()) {
    check_device(data.device, Algorithm::kEngine, engine, "recv");
    return impl_->submit_p2p(
        CollectiveKind::kRecv, data.count, data.dtype, peer, opts,
        [=](algo::Context& ctx, uint64_t) {
          engine->recv(data.data, data.bytes(), peer, {ctx.deadline(), data.device, opts.stream});
        });
  }
  check_device(data.device, Algorithm::kDirect, engine, "recv");
  return impl_->submit_p2p(CollectiveKind::kRecv, data.count, data.dtype, peer, opts,
                           [=](algo::Context& ctx, uint64_t index) {
                             ctx.recv(peer, index, data.data, data.bytes());
                           });
}

void Group::send(ConstBuffer data, int peer, const CollectiveOptions& opts) {
  send_async(data, peer, opts)->wait();
}

void Group::recv(Buffer data, int peer, const CollectiveOptions& opts) {
  recv_async(data, peer, opts)->wait();
}

}  // namespace cohort

// ---------------------------------------------------------------- split

namespace cohort {

std::shared_ptr<Group> Group::split(int color, int key, const CollectiveOptions& opts) {
  // Everyone learns everyone's (color, key); members of a color are ordered by (key, rank).
  const int n = size();
  std::vector<int64_t> mine{color, key};
  std::vector<int64_t> all(2 * static_cast<size_t>(n));
  const uint64_t split_id = sequence_number();
  allgather(make_buffer(mine), make_buffer(all), opts);
  CollectiveEngine* engine = impl_->transport().engine();
  // An engine's split (MPI_Comm_split) is collective over every rank, members or not.
  std::unique_ptr<Transport> engine_transport =
      engine != nullptr
          ? engine->split_communicator(color, key, Deadline::after(impl_->timeout_for(opts)))
          : nullptr;
  if (color < 0) return nullptr;

  std::vector<std::pair<int64_t, int>> members;  // (key, old rank)
  for (int r = 0; r < n; ++r) {
    if (all[2 * r] == color) members.emplace_back(all[2 * r + 1], r);
  }
  std::sort(members.begin(), members.end());
  int new_rank = -1;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i].second == rank()) new_rank = static_cast<int>(i);
  }
  COHORT_INTERNAL_ASSERT(new_rank >= 0, "rank ", rank(), " missing from its own split color");

  const std::string subgroup = "split" + std::to_string(split_id) + "/c" + std::to_string(color);
  // A group without a store (MPI) splits its engine's communicator instead.
  std::shared_ptr<Store> store;
  if (impl_->store()) store = std::make_shared<PrefixStore>(subgroup, impl_->store());
  auto transport = engine_transport ? std::move(engine_transport)
                                    : impl_->transport().split(subgroup, new_rank,
                                                               static_cast<int>(members.size()),
                                                               store);
  GroupOptions child = options();
  child.name = options().name + "/" + subgroup;
  auto group = std::make_shared<Group>(std::move(transport), store, child);
  std::vector<int> member_ranks;
  for (const auto& member : members) member_ranks.push_back(member.second);
  group->impl_->inherit(impl_->topology().restricted_to(member_ranks, new_rank),
                        impl_->cost_model());
  return group;
}

}  // namespace cohort
