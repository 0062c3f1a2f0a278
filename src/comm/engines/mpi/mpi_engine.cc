// MPI's own collectives for the Group (CollectiveEngine): the nonblocking forms
// (MPI_Iallreduce, ...), polled like every other wait of the MPI transport so that they keep
// the collective's deadline and fail at once when any rank aborts the group.
#include <climits>
#include <cstring>
#include <vector>

#include "engines/mpi/mpi_call.h"
#include "engines/mpi/mpi_transport.h"

namespace cohort {

namespace {

bool fits_int(size_t n) {
  return n <= static_cast<size_t>(INT_MAX);
}

// MPI forbids overlapping send and receive buffers except through MPI_IN_PLACE, whose
// meaning differs per collective: an overlapping input is read from a copy instead.
const void* unaliased(const void* in, size_t in_bytes, const void* out, size_t out_bytes,
                      std::vector<char>& copy) {
  const auto* a = static_cast<const char*>(in);
  const auto* b = static_cast<const char*>(out);
  if (in_bytes == 0 || out_bytes == 0 || a + in_bytes <= b || b + out_bytes <= a) return in;
  copy.assign(a, a + in_bytes);
  return copy.data();
}

bool is_reduction(CollectiveKind kind) {
  return kind == CollectiveKind::kAllreduce || kind == CollectiveKind::kReduce ||
         kind == CollectiveKind::kReduceScatter;
}

}  // namespace

bool MpiTransport::supports(CollectiveKind kind, DType dtype, ReduceOp op, size_t count) const {
  if (kind == CollectiveKind::kSend || kind == CollectiveKind::kRecv ||
      kind == CollectiveKind::kRingShift) {
    return false;  // cohort's algorithms run them over the MPI transport
  }
  if (is_reduction(kind)) {
    // MPI has no float16 or bfloat16 (before MPI 4.1's optional types) and counts are int.
    return mpi::datatype(dtype) != MPI_DATATYPE_NULL && mpi::reduction(op) != MPI_OP_NULL &&
           fits_int(count);
  }
  // The rest move bytes: one rank's block must be an int count of MPI_BYTE.
  const size_t bytes = count * dtype_size(dtype);
  return fits_int(kind == CollectiveKind::kAllToAll ? bytes / static_cast<size_t>(size_) : bytes);
}

void MpiTransport::allreduce(const void* in, void* data, size_t count, DType dtype, ReduceOp op,
                             const EngineCall& call) {
  if (in != data && count > 0) std::memcpy(data, in, count * dtype_size(dtype));
  post_and_wait("MPI_Iallreduce", call.deadline, [&](MPI_Request* request) {
    return MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), mpi::datatype(dtype),
                          mpi::reduction(op), collectives_, request);
  });
}

void MpiTransport::broadcast(void* data, size_t count, DType dtype, int root,
                             const EngineCall& call) {
  const size_t bytes = count * dtype_size(dtype);
  post_and_wait("MPI_Ibcast", call.deadline, [&](MPI_Request* request) {
    return MPI_Ibcast(data, static_cast<int>(bytes), MPI_BYTE, root, collectives_, request);
  });
}

void MpiTransport::reduce(void* data, size_t count, DType dtype, ReduceOp op, int root,
                          const EngineCall& call) {
  // The root reduces in place; the others only send theirs.
  const void* send = rank_ == root ? MPI_IN_PLACE : data;
  post_and_wait("MPI_Ireduce", call.deadline, [&](MPI_Request* request) {
    return MPI_Ireduce(send, rank_ == root ? data : nullptr, static_cast<int>(count),
                       mpi::datatype(dtype), mpi::reduction(op), root, collectives_, request);
  });
}

void MpiTransport::allgather(const void* in, void* out, size_t count, DType dtype,
                             const EngineCall& call) {
  const size_t bytes = count * dtype_size(dtype);
  std::vector<char> copy;
  in = unaliased(in, bytes, out, bytes * static_cast<size_t>(size_), copy);
  post_and_wait("MPI_Iallgather", call.deadline, [&](MPI_Request* request) {
    return MPI_Iallgather(in, static_cast<int>(bytes), MPI_BYTE, out, static_cast<int>(bytes),
                          MPI_BYTE, collectives_, request);
  });
}

void MpiTransport::reduce_scatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                                  const EngineCall& call) {
  std::vector<char> copy;
  const size_t block = count * dtype_size(dtype);
  in = unaliased(in, block * static_cast<size_t>(size_), out, block, copy);
  post_and_wait("MPI_Ireduce_scatter_block", call.deadline, [&](MPI_Request* request) {
    return MPI_Ireduce_scatter_block(in, out, static_cast<int>(count), mpi::datatype(dtype),
                                     mpi::reduction(op), collectives_, request);
  });
}

void MpiTransport::gather(const void* in, void* out, size_t count, DType dtype, int root,
                          const EngineCall& call) {
  const size_t bytes = count * dtype_size(dtype);
  std::vector<char> copy;
  if (rank_ == root) in = unaliased(in, bytes, out, bytes * static_cast<size_t>(size_), copy);
  post_and_wait("MPI_Igather", call.deadline, [&](MPI_Request* request) {
    return MPI_Igather(in, static_cast<int>(bytes), MPI_BYTE, out, static_cast<int>(bytes),
                       MPI_BYTE, root, collectives_, request);
  });
}

void MpiTransport::scatter(const void* in, void* out, size_t count, DType dtype, int root,
                           const EngineCall& call) {
  const size_t bytes = count * dtype_size(dtype);
  std::vector<char> copy;
  if (rank_ == root) in = unaliased(in, bytes * static_cast<size_t>(size_), out, bytes, copy);
  post_and_wait("MPI_Iscatter", call.deadline, [&](MPI_Request* request) {
    return MPI_Iscatter(in, static_cast<int>(bytes), MPI_BYTE, out, static_cast<int>(bytes),
                        MPI_BYTE, root, collectives_, request);
  });
}

void MpiTransport::all_to_all(const void* in, void* out, size_t block_count, DType dtype,
                              const EngineCall& call) {
  const size_t block_bytes = block_count * dtype_size(dtype);
  // The Group refuses overlapping all_to_all buffers before this is reached.
  post_and_wait("MPI_Ialltoall", call.deadline, [&](MPI_Request* request) {
    return MPI_Ialltoall(in, static_cast<int>(block_bytes), MPI_BYTE, out,
                         static_cast<int>(block_bytes), MPI_BYTE, collectives_, request);
  });
}

void MpiTransport::barrier(const EngineCall& call) {
  post_and_wait("MPI_Ibarrier", call.deadline,
                [&](MPI_Request* request) { return MPI_Ibarrier(collectives_, request); });
}

}  // namespace cohort
