#include "support/collective_checks.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "support/test_support.h"

namespace cohort::testing {
namespace {

// Written after the end of separate outputs; a collective that overruns its buffer changes it.
constexpr uint8_t kSentinel = 0xEE;

// A rank's buffer of a check: private memory, or registered with the group (collective, so
// every rank makes the same ones in the same order).
class CheckBuffer {
 public:
  CheckBuffer(Group& group, size_t bytes, Memory memory, uint8_t fill = 0) : bytes_(bytes) {
    if (memory == Memory::kRegistered) {
      registered_ = group.allocate_registered(bytes);
      data_ = static_cast<uint8_t*>(registered_->data());
      std::memset(data_, fill, bytes);
    } else {
      owned_.assign(bytes, fill);
      data_ = owned_.data();
    }
  }
  uint8_t* data() { return data_; }
  // `count` elements of `dtype` at `at` (inside this buffer), marked as registered where it is
  // (Buffer::registered): what the collectives run in place on.
  Buffer buffer(uint8_t* at, size_t count, DType dtype) const {
    return registered_ ? registered_->buffer(at, count, dtype) : Buffer{at, count, dtype};
  }
  size_t size() const { return bytes_; }
  uint8_t back() const { return data_[bytes_ - 1]; }
  std::vector<uint8_t> copy() const { return std::vector<uint8_t>(data_, data_ + bytes_); }
  bool operator==(const std::vector<uint8_t>& other) const { return copy() == other; }
  bool operator!=(const std::vector<uint8_t>& other) const { return copy() != other; }
  uint8_t operator[](size_t i) const { return data_[i]; }

 private:
  std::shared_ptr<RegisteredMemory> registered_;
  std::vector<uint8_t> owned_;
  uint8_t* data_ = nullptr;
  size_t bytes_;
};

}  // namespace

// Element i of every rank's buffer is sweep_value(op, rank, i); afterwards each must hold
// sweep_expected(op, size, i).
std::string check_allreduce(Group& group, size_t count, DType dtype, ReduceOp op,
                            Algorithm algorithm, Memory memory) {
  CheckBuffer data(group, count * dtype_size(dtype) + 1, memory);
  fill_sweep(data.data(), count, dtype, op, group.rank());
  CollectiveOptions opts;
  opts.op = op;
  opts.algorithm = algorithm;
  group.allreduce(data.buffer(data.data(), count, dtype), opts);
  const std::string error = check_sweep(data.data(), count, dtype, op, group.size());
  return error.empty() ? "" : "rank " + std::to_string(group.rank()) + " " + error;
}

// Every rank starts with its own values; returns "" when all hold the root's afterwards.
std::string check_broadcast(Group& group, size_t count, DType dtype, int root, Algorithm algorithm,
                            Memory memory) {
  CheckBuffer data(group, count * dtype_size(dtype) + 1, memory);
  fill_movement(data.data(), count, dtype, group.rank());
  CollectiveOptions opts;
  opts.root = root;
  opts.algorithm = algorithm;
  group.broadcast(data.buffer(data.data(), count, dtype), opts);
  return check_movement(
      data.data(), count, dtype, [&](size_t) { return root; }, [](size_t i) { return i; });
}

// The root gets the closed-form result; every other rank's buffer must be left as it was.
std::string check_reduce(Group& group, size_t count, DType dtype, ReduceOp op, int root,
                         Algorithm algorithm) {
  std::vector<uint8_t> data(count * dtype_size(dtype) + 1);
  fill_sweep(data.data(), count, dtype, op, group.rank());
  const std::vector<uint8_t> before = data;
  CollectiveOptions opts;
  opts.op = op;
  opts.root = root;
  opts.algorithm = algorithm;
  group.reduce(Buffer{data.data(), count, dtype}, opts);
  if (group.rank() != root) {
    return data == before ? "" : "a non-root rank's buffer changed";
  }
  return check_sweep(data.data(), count, dtype, op, group.size());
}

// Rank r contributes movement values of r at 0..count-1; block r of every output must hold
// them. In place, the input is the rank's own block of the output.
std::string check_allgather(Group& group, size_t count, DType dtype, Algorithm algorithm,
                            bool in_place, Memory memory) {
  const size_t esize = dtype_size(dtype);
  const auto n = static_cast<size_t>(group.size());
  // Registered, the input is: in place, as the rank's block of a registered output.
  CheckBuffer in(group, count * esize + 1, in_place ? Memory::kPrivate : memory);
  CheckBuffer out(group, n * count * esize + 1, in_place ? memory : Memory::kPrivate, kSentinel);
  fill_movement(in.data(), count, dtype, group.rank());
  ConstBuffer input = in.buffer(in.data(), count, dtype);
  if (in_place) {
    uint8_t* own = out.data() + static_cast<size_t>(group.rank()) * count * esize;
    if (count > 0) std::memcpy(own, in.data(), count * esize);
    input = out.buffer(own, count, dtype);
  }
  CollectiveOptions opts;
  opts.algorithm = algorithm;
  group.allgather(input, out.buffer(out.data(), n * count, dtype), opts);
  if (out.back() != kSentinel) return "wrote past the end of the output";
  return check_movement(
      out.data(), n * count, dtype, [&](size_t i) { return static_cast<int>(i / count); },
      [&](size_t i) { return i % count; });
}

// `count` is the per-rank output count; the input holds size() blocks of it. Element j of the
// input is sweep_value(op, rank, j), so block r of the result is sweep_expected at r*count+i.
// The input must be left as it was.
std::string check_reduce_scatter(Group& group, size_t count, DType dtype, ReduceOp op,
                                 Algorithm algorithm, Memory memory) {
  const size_t esize = dtype_size(dtype);
  const auto n = static_cast<size_t>(group.size());
  CheckBuffer in(group, n * count * esize + 1, memory);
  std::vector<uint8_t> out(count * esize + 1, kSentinel);
  fill_sweep(in.data(), n * count, dtype, op, group.rank());
  const std::vector<uint8_t> before = in.copy();
  CollectiveOptions opts;
  opts.op = op;
  opts.algorithm = algorithm;
  group.reduce_scatter(in.buffer(in.data(), n * count, dtype), Buffer{out.data(), count, dtype},
                       opts);
  if (out.back() != kSentinel) return "wrote past the end of the output";
  if (in != before) return "the input changed";
  return check_sweep(out.data(), count, dtype, op, group.size(),
                     static_cast<size_t>(group.rank()) * count);
}

// As check_reduce_scatter, with the output at block r of rank r's input: that block must hold
// the result, the other blocks must be left as they were, and nothing past the input written.
std::string check_reduce_scatter_in_place(Group& group, size_t count, DType dtype, ReduceOp op,
                                          Algorithm algorithm, Memory memory) {
  const size_t esize = dtype_size(dtype);
  const auto n = static_cast<size_t>(group.size());
  const auto me = static_cast<size_t>(group.rank());
  CheckBuffer data(group, n * count * esize + 1, memory, kSentinel);
  fill_sweep(data.data(), n * count, dtype, op, group.rank());
  const std::vector<uint8_t> before = data.copy();
  uint8_t* own = data.data() + me * count * esize;
  CollectiveOptions opts;
  opts.op = op;
  opts.algorithm = algorithm;
  group.reduce_scatter(data.buffer(data.data(), n * count, dtype), data.buffer(own, count, dtype),
                       opts);
  if (data.back() != kSentinel) return "wrote past the end of the input";
  const size_t own_begin = me * count * esize, own_end = own_begin + count * esize;
  for (size_t i = 0; i + 1 < data.size(); ++i) {
    if ((i < own_begin || i >= own_end) && data[i] != before[i]) {
      return "byte " + std::to_string(i) + " outside the rank's own block changed";
    }
  }
  return check_sweep(own, count, dtype, op, group.size(), me * count);
}

// Rank r sends movement values of r at 0..count-1; block r of the root's output must hold them.
// Only the root's output matters; the others pass an empty one, which must stay untouched.
std::string check_gather(Group& group, size_t count, DType dtype, int root, Algorithm algorithm) {
  const size_t esize = dtype_size(dtype);
  const auto n = static_cast<size_t>(group.size());
  std::vector<uint8_t> in(count * esize + 1);
  fill_movement(in.data(), count, dtype, group.rank());
  const bool is_root = group.rank() == root;
  std::vector<uint8_t> out(is_root ? n * count * esize + 1 : 1, kSentinel);
  CollectiveOptions opts;
  opts.root = root;
  opts.algorithm = algorithm;
  group.gather(ConstBuffer{in.data(), count, dtype},
               Buffer{out.data(), is_root ? n * count : 0, dtype}, opts);
  if (out.back() != kSentinel) return "wrote past the end of the output";
  if (!is_root) return "";
  return check_movement(
      out.data(), n * count, dtype, [&](size_t i) { return static_cast<int>(i / count); },
      [&](size_t i) { return i % count; });
}

// The root's input is movement values of the root at indices 0..n*count-1; rank r must get
// indices r*count .. r*count + count - 1. The other ranks pass an empty input.
std::string check_scatter(Group& group, size_t count, DType dtype, int root, Algorithm algorithm) {
  const size_t esize = dtype_size(dtype);
  const auto n = static_cast<size_t>(group.size());
  const bool is_root = group.rank() == root;
  std::vector<uint8_t> in(is_root ? n * count * esize + 1 : 1);
  if (is_root) fill_movement(in.data(), n * count, dtype, root);
  std::vector<uint8_t> out(count * esize + 1, kSentinel);
  CollectiveOptions opts;
  opts.root = root;
  opts.algorithm = algorithm;
  group.scatter(ConstBuffer{in.data(), is_root ? n * count : 0, dtype},
                Buffer{out.data(), count, dtype}, opts);
  if (out.back() != kSentinel) return "wrote past the end of the output";
  const size_t offset = static_cast<size_t>(group.rank()) * count;
  return check_movement(
      out.data(), count, dtype, [&](size_t) { return root; }, [&](size_t i) { return offset + i; });
}

// `count` is the block: each rank's input and output hold size() blocks of it. Input element i
// of rank r is movement_value(r, i); block j of rank r's input must become block r of rank j's
// output, so output block j, offset k, came from rank j at index r*count + k.
std::string check_all_to_all(Group& group, size_t count, DType dtype, Algorithm algorithm) {
  const size_t esize = dtype_size(dtype);
  const auto n = static_cast<size_t>(group.size());
  const size_t total = n * count;
  std::vector<uint8_t> in(total * esize + 1);
  fill_movement(in.data(), total, dtype, group.rank());
  std::vector<uint8_t> out(total * esize + 1, kSentinel);
  CollectiveOptions opts;
  opts.algorithm = algorithm;
  group.all_to_all(ConstBuffer{in.data(), total, dtype}, Buffer{out.data(), total, dtype}, opts);
  if (out.back() != kSentinel) return "wrote past the end of the output";
  const auto me = static_cast<size_t>(group.rank());
  return check_movement(
      out.data(), total, dtype, [&](size_t i) { return static_cast<int>(i / count); },
      [&](size_t i) { return me * count + i % count; });
}

// Rank r's input is movement values of r at 0..count-1; its output must hold its predecessor's,
// and its input must be left as it was (the successor reads it).
std::string check_ring_shift(Group& group, size_t count, DType dtype, Algorithm algorithm,
                             Memory memory) {
  const size_t esize = dtype_size(dtype);
  CheckBuffer in(group, count * esize + 1, memory);
  fill_movement(in.data(), count, dtype, group.rank());
  const std::vector<uint8_t> before = in.copy();
  std::vector<uint8_t> out(count * esize + 1, kSentinel);
  CollectiveOptions opts;
  opts.algorithm = algorithm;
  group.ring_shift(in.buffer(in.data(), count, dtype), Buffer{out.data(), count, dtype}, opts);
  if (out.back() != kSentinel) return "wrote past the end of the output";
  if (in != before) return "changed the input";
  const int predecessor = (group.rank() + group.size() - 1) % group.size();
  return check_movement(
      out.data(), count, dtype, [&](size_t) { return predecessor; }, [&](size_t i) { return i; });
}

}  // namespace cohort::testing
