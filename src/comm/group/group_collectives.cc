// The public collectives of cohort::Group. Each checks its arguments on the caller's thread and
// describes itself as a CollectiveCall; the group's Dispatcher (dispatcher.cc) chooses the
// backend and algorithm that run it, its Scheduler (scheduler.cc) queues it, and group_impl.cc
// runs it.
#include <cstring>

#include "backends/collective_engine.h"
#include "cohort/comm/group.h"
#include "cohort/core/check.h"
#include "group/group_impl.h"

namespace cohort {

namespace {

void check_same_dtype(ConstBuffer in, Buffer out, const char* what) {
  COHORT_CHECK(in.dtype == out.dtype, what, ": input is ", dtype_name(in.dtype), " but output is ",
               dtype_name(out.dtype));
}

void check_pointer(const void* data, size_t count, const char* what) {
  COHORT_CHECK(data != nullptr || count == 0, what, ": buffer of ", count,
               " elements has a null data pointer");
}

void check_same_device(int in, int out, const char* what) {
  COHORT_CHECK(in == out, what, ": input is in ", place_name(in), " but output is in ",
               place_name(out));
}

void check_root(int root, int size, const char* what) {
  COHORT_CHECK(root >= 0 && root < size, what, ": root ", root,
               " is not a rank of this group of size ", size);
}

// A call with an input and an output of the same dtype and place, where `blocks_in` input
// elements match `blocks_out` output elements (1:1 for allreduce, 1:size for allgather, ...).
void check_in_out(ConstBuffer in, Buffer out, size_t blocks_in, size_t blocks_out, const char* what,
                  const char* shape) {
  check_pointer(in.data, in.count, what);
  check_pointer(out.data, out.count, what);
  check_same_dtype(in, out, what);
  check_same_device(in.device, out.device, what);
  COHORT_CHECK_EQ(in.count * blocks_in, out.count * blocks_out, what, ": ", shape);
}

// For the calls that cannot run in place (a rank's output is written while its input is read).
void check_apart(ConstBuffer in, Buffer out, const char* what) {
  const auto* in_begin = static_cast<const uint8_t*>(in.data);
  const auto* out_begin = static_cast<const uint8_t*>(out.data);
  COHORT_CHECK(
      in.bytes() == 0 || in_begin + in.bytes() <= out_begin || out_begin + out.bytes() <= in_begin,
      what, ": input and output overlap; it cannot run in place");
}

CollectiveCall call_of(CollectiveKind kind, const void* in, void* out, size_t count, DType dtype,
                       int device, const CollectiveOptions& opts) {
  CollectiveCall call;
  call.kind = kind;
  call.in = in;
  call.out = out;
  call.count = count;
  call.dtype = dtype;
  call.device = device;
  call.stream = opts.stream;
  return call;
}

// The call runs in place on registered memory where its buffers say they lie in some.
CollectiveCall on_registered(CollectiveCall call, const ConstBuffer& in, const Buffer& out) {
  call.registered = {in.registered, out.registered};
  return call;
}

CollectiveCall reduction(CollectiveCall call, const CollectiveOptions& opts) {
  call.op = opts.op;
  return call;
}

CollectiveCall rooted(CollectiveCall call, const CollectiveOptions& opts) {
  call.root = opts.root;
  return call;
}

CollectiveCall send_call(const Group& group, ConstBuffer data, int peer,
                         const CollectiveOptions& opts) {
  check_pointer(data.data, data.count, "send");
  COHORT_CHECK(peer >= 0 && peer < group.size() && peer != group.rank(), "send: peer ", peer,
               " must be another rank of this group of size ", group.size());
  return call_of(CollectiveKind::kSend, data.data, nullptr, data.count, data.dtype, data.device,
                 opts);
}

CollectiveCall recv_call(const Group& group, Buffer data, int peer, const CollectiveOptions& opts) {
  check_pointer(data.data, data.count, "recv");
  COHORT_CHECK(peer >= 0 && peer < group.size() && peer != group.rank(), "recv: peer ", peer,
               " must be another rank of this group of size ", group.size());
  return call_of(CollectiveKind::kRecv, nullptr, data.data, data.count, data.dtype, data.device,
                 opts);
}

}  // namespace

// ---------------------------------------------------------------- allreduce

// One operation for both forms, copied in when out of place.
Operation Group::allreduce_operation(ConstBuffer in, Buffer out,
                                     const CollectiveOptions& opts) const {
  check_in_out(in, out, 1, 1, "allreduce", "input and output counts differ");
  return impl_->collective_operation(
      reduction(on_registered(call_of(CollectiveKind::kAllreduce, in.data, out.data, out.count,
                                      out.dtype, out.device, opts),
                              in, out),
                opts),
      opts);
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

// ---------------------------------------------------------------- broadcast, reduce

std::shared_ptr<Work> Group::broadcast_async(Buffer data, const CollectiveOptions& opts) {
  check_pointer(data.data, data.count, "broadcast");
  check_root(opts.root, size(), "broadcast");
  return impl_->submit(impl_->collective_operation(
      rooted(on_registered(call_of(CollectiveKind::kBroadcast, data.data, data.data, data.count,
                                   data.dtype, data.device, opts),
                           data, data),
             opts),
      opts));
}

void Group::broadcast(Buffer data, const CollectiveOptions& opts) {
  broadcast_async(data, opts)->wait();
}

std::shared_ptr<Work> Group::reduce_async(Buffer data, const CollectiveOptions& opts) {
  check_pointer(data.data, data.count, "reduce");
  check_root(opts.root, size(), "reduce");
  return impl_->submit(impl_->collective_operation(
      rooted(reduction(call_of(CollectiveKind::kReduce, data.data, data.data, data.count,
                               data.dtype, data.device, opts),
                       opts),
             opts),
      opts));
}

void Group::reduce(Buffer data, const CollectiveOptions& opts) {
  reduce_async(data, opts)->wait();
}

// ---------------------------------------------------------------- allgather, reduce_scatter

std::shared_ptr<Work> Group::allgather_async(ConstBuffer in, Buffer out,
                                             const CollectiveOptions& opts) {
  check_in_out(in, out, static_cast<size_t>(size()), 1, "allgather",
               "the output must hold size() blocks of the input's count");
  return impl_->submit(impl_->collective_operation(
      on_registered(call_of(CollectiveKind::kAllgather, in.data, out.data, in.count, in.dtype,
                            in.device, opts),
                    in, out),
      opts));
}

void Group::allgather(ConstBuffer in, Buffer out, const CollectiveOptions& opts) {
  allgather_async(in, out, opts)->wait();
}

std::shared_ptr<Work> Group::reduce_scatter_async(ConstBuffer in, Buffer out,
                                                  const CollectiveOptions& opts) {
  check_in_out(in, out, 1, static_cast<size_t>(size()), "reduce_scatter",
               "the input must hold size() blocks of the output's count");
  return impl_->submit(impl_->collective_operation(
      reduction(on_registered(call_of(CollectiveKind::kReduceScatter, in.data, out.data, out.count,
                                      out.dtype, out.device, opts),
                              in, out),
                opts),
      opts));
}

void Group::reduce_scatter(ConstBuffer in, Buffer out, const CollectiveOptions& opts) {
  reduce_scatter_async(in, out, opts)->wait();
}

// ---------------------------------------------------------------- gather / scatter / all_to_all

std::shared_ptr<Work> Group::gather_async(ConstBuffer in, Buffer out,
                                          const CollectiveOptions& opts) {
  check_pointer(in.data, in.count, "gather");
  check_root(opts.root, size(), "gather");
  if (rank() == opts.root) {
    check_in_out(in, out, static_cast<size_t>(size()), 1, "gather",
                 "the root's output must hold size() blocks of the input's count");
  }
  return impl_->submit(impl_->collective_operation(
      rooted(
          call_of(CollectiveKind::kGather, in.data, out.data, in.count, in.dtype, in.device, opts),
          opts),
      opts));
}

void Group::gather(ConstBuffer in, Buffer out, const CollectiveOptions& opts) {
  gather_async(in, out, opts)->wait();
}

std::shared_ptr<Work> Group::scatter_async(ConstBuffer in, Buffer out,
                                           const CollectiveOptions& opts) {
  check_pointer(out.data, out.count, "scatter");
  check_root(opts.root, size(), "scatter");
  if (rank() == opts.root) {
    check_in_out(in, out, 1, static_cast<size_t>(size()), "scatter",
                 "the root's input must hold size() blocks of the output's count");
  }
  return impl_->submit(
      impl_->collective_operation(rooted(call_of(CollectiveKind::kScatter, in.data, out.data,
                                                 out.count, out.dtype, out.device, opts),
                                         opts),
                                  opts));
}

void Group::scatter(ConstBuffer in, Buffer out, const CollectiveOptions& opts) {
  scatter_async(in, out, opts)->wait();
}

std::shared_ptr<Work> Group::all_to_all_async(ConstBuffer in, Buffer out,
                                              const CollectiveOptions& opts) {
  check_in_out(in, out, 1, 1, "all_to_all", "input and output counts differ");
  COHORT_CHECK(in.count % static_cast<size_t>(size()) == 0, "all_to_all: count ", in.count,
               " is not divisible by the group size ", size());
  check_apart(in, out, "all_to_all");
  return impl_->submit(impl_->collective_operation(
      call_of(CollectiveKind::kAllToAll, in.data, out.data, in.count, in.dtype, in.device, opts),
      opts));
}

void Group::all_to_all(ConstBuffer in, Buffer out, const CollectiveOptions& opts) {
  all_to_all_async(in, out, opts)->wait();
}

// ---------------------------------------------------------------- ring_shift

std::shared_ptr<Work> Group::ring_shift_async(ConstBuffer in, Buffer out,
                                              const CollectiveOptions& opts) {
  check_in_out(in, out, 1, 1, "ring_shift", "input and output counts differ");
  check_apart(in, out, "ring_shift");
  return impl_->submit(impl_->collective_operation(
      on_registered(call_of(CollectiveKind::kRingShift, in.data, out.data, in.count, in.dtype,
                            in.device, opts),
                    in, out),
      opts));
}

void Group::ring_shift(ConstBuffer in, Buffer out, const CollectiveOptions& opts) {
  ring_shift_async(in, out, opts)->wait();
}

// ---------------------------------------------------------------- barrier

Operation Group::barrier_operation(const CollectiveOptions& opts) const {
  return impl_->collective_operation(
      call_of(CollectiveKind::kBarrier, nullptr, nullptr, 0, DType::kUInt8, kHostMemory, opts),
      opts);
}

std::shared_ptr<Work> Group::barrier_async(const CollectiveOptions& opts) {
  return impl_->submit(barrier_operation(opts));
}

void Group::barrier(const CollectiveOptions& opts) {
  impl_->run_blocking(barrier_operation(opts));
}

// ---------------------------------------------------------------- send / recv

std::shared_ptr<Work> Group::send_async(ConstBuffer data, int peer, const CollectiveOptions& opts) {
  return impl_->point_to_point(send_call(*this, data, peer, opts), peer, opts);
}

std::shared_ptr<Work> Group::recv_async(Buffer data, int peer, const CollectiveOptions& opts) {
  return impl_->point_to_point(recv_call(*this, data, peer, opts), peer, opts);
}

// On the caller's thread when nothing is queued (Note [Worker on demand]).
void Group::send(ConstBuffer data, int peer, const CollectiveOptions& opts) {
  impl_->point_to_point(send_call(*this, data, peer, opts), peer, opts, /*blocking=*/true);
}

void Group::recv(Buffer data, int peer, const CollectiveOptions& opts) {
  impl_->point_to_point(recv_call(*this, data, peer, opts), peer, opts, /*blocking=*/true);
}

}  // namespace cohort
