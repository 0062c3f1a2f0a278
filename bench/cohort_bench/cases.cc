#include "cases.h"

#include <cstring>
#include <optional>
#include <utility>

#include "values.h"

namespace cohort::bench {

namespace {

constexpr int kRoot = 0;

CollectiveKind kind_of(Collective collective) {
  switch (collective) {
    case Collective::kAllreduce: return CollectiveKind::kAllreduce;
    case Collective::kBroadcast: return CollectiveKind::kBroadcast;
    case Collective::kReduce: return CollectiveKind::kReduce;
    case Collective::kAllgather: return CollectiveKind::kAllgather;
    case Collective::kReduceScatter: return CollectiveKind::kReduceScatter;
    case Collective::kAllToAll: return CollectiveKind::kAllToAll;
    case Collective::kRingShift: return CollectiveKind::kRingShift;
    case Collective::kBarrier: return CollectiveKind::kBarrier;
  }
  return CollectiveKind::kBarrier;
}

void zero(Storage& storage) {
  std::memset(storage.data(), 0, storage.size());
}

size_t block_of(const Group& group, size_t count) {
  return count / static_cast<size_t>(group.size());
}

// ---- in-place collectives: one buffer of count elements

// Fills the buffer with `input` (zeros on a rank that has none) and checks it whole against
// `expected`.
class InPlaceCase : public Case {
 public:
  void fill() override {
    if (input_)
      bench::fill(data_.data(), count_, dtype(), *input_);
    else
      zero(data_);
  }
  uint64_t count_wrong() const override {
    return bench::count_wrong(data_.data(), count_, dtype(), expected_);
  }

 protected:
  InPlaceCase(Group& group, const BenchConfig& config, size_t count, std::optional<Pattern> input,
              Pattern expected)
      : Case(group, config, count),
        data_(group, bytes(), config.registered),
        input_(std::move(input)),
        expected_(std::move(expected)) {}

  Buffer data() { return view(data_, count_); }

 private:
  Storage data_;
  std::optional<Pattern> input_;
  Pattern expected_;
};

class AllreduceCase final : public InPlaceCase {
 public:
  AllreduceCase(Group& group, const BenchConfig& config, size_t count)
      : InPlaceCase(group, config, count,
                    reduce_input(config.dtype, config.op, group.size(), group.rank()),
                    reduce_result(config.dtype, config.op, group.size())) {}

  void run() override { group_.allreduce(data(), options_); }
};

class BroadcastCase final : public InPlaceCase {
 public:
  BroadcastCase(Group& group, const BenchConfig& config, size_t count)
      : InPlaceCase(group, config, count,
                    group.rank() == kRoot ? std::optional<Pattern>(plain_input(config.dtype, kRoot))
                                          : std::nullopt,
                    plain_input(config.dtype, kRoot)) {}

  void run() override { group_.broadcast(data(), options_); }
};

class ReduceCase final : public InPlaceCase {
 public:
  // Ranks other than the root must find their data unchanged (group.h).
  ReduceCase(Group& group, const BenchConfig& config, size_t count)
      : InPlaceCase(group, config, count,
                    reduce_input(config.dtype, config.op, group.size(), group.rank()),
                    group.rank() == kRoot
                        ? reduce_result(config.dtype, config.op, group.size())
                        : reduce_input(config.dtype, config.op, group.size(), group.rank())) {}

  void run() override { group_.reduce(data(), options_); }
};

// ---- collectives with separate input and output

// Fills an input of in_count elements with `input` and zeroes an output of out_count.
class InOutCase : public Case {
 public:
  void fill() override {
    bench::fill(in_.data(), in_count_, dtype(), input_);
    zero(out_);
  }

 protected:
  InOutCase(Group& group, const BenchConfig& config, size_t count, size_t in_count,
            size_t out_count, Pattern input)
      : Case(group, config, count),
        in_count_(in_count),
        out_count_(out_count),
        in_(group, in_count * dtype_size(config.dtype), config.registered),
        out_(group, out_count * dtype_size(config.dtype), false),
        input_(std::move(input)) {}

  Buffer in() { return view(in_, in_count_); }
  Buffer out() { return view(out_, out_count_); }
  // Wrong elements when output block s must hold rank s's plain input from `offset` on.
  uint64_t count_wrong_blocks(size_t offset) const {
    uint64_t wrong = 0;
    const size_t block_bytes = block() * dtype_size(dtype());
    for (int s = 0; s < ranks(); ++s) {
      wrong += bench::count_wrong(out_.data() + static_cast<size_t>(s) * block_bytes, block(),
                                  dtype(), plain_input(dtype(), s), offset);
    }
    return wrong;
  }

  const size_t in_count_;
  const size_t out_count_;
  Storage in_;  // registered with --registered: what the in-place algorithms read
  Storage out_;
  Pattern input_;
};

class AllgatherCase final : public InOutCase {
 public:
  AllgatherCase(Group& group, const BenchConfig& config, size_t count)
      : InOutCase(group, config, count, block_of(group, count), count,
                  plain_input(config.dtype, group.rank())) {}

  void run() override { group_.allgather(in(), out(), options_); }
  // Block r of the output is rank r's input.
  uint64_t count_wrong() const override { return count_wrong_blocks(0); }
};

class ReduceScatterCase final : public InOutCase {
 public:
  ReduceScatterCase(Group& group, const BenchConfig& config, size_t count)
      : InOutCase(group, config, count, count, block_of(group, count),
                  reduce_input(config.dtype, config.op, group.size(), group.rank())),
        expected_(reduce_result(config.dtype, config.op, ranks())) {}

  void run() override { group_.reduce_scatter(in(), out(), options_); }
  // This rank holds block `rank` of the reduced whole.
  uint64_t count_wrong() const override {
    return bench::count_wrong(out_.data(), block(), dtype(), expected_,
                              static_cast<size_t>(rank()) * block());
  }

 private:
  Pattern expected_;
};

class AllToAllCase final : public InOutCase {
 public:
  AllToAllCase(Group& group, const BenchConfig& config, size_t count)
      : InOutCase(group, config, count, count, count, plain_input(config.dtype, group.rank())) {}

  void run() override { group_.all_to_all(in(), out(), options_); }
  // Block s of the output is block `rank` of rank s's input.
  uint64_t count_wrong() const override {
    return count_wrong_blocks(static_cast<size_t>(rank()) * block());
  }
};

class RingShiftCase final : public InOutCase {
 public:
  RingShiftCase(Group& group, const BenchConfig& config, size_t count)
      : InOutCase(group, config, count, count, count, plain_input(config.dtype, group.rank())) {}

  void run() override { group_.ring_shift(in(), out(), options_); }
  // The output is the predecessor's input.
  uint64_t count_wrong() const override {
    const int predecessor = (rank() + ranks() - 1) % ranks();
    return bench::count_wrong(out_.data(), in_count_, dtype(), plain_input(dtype(), predecessor),
                              0);
  }
};

class BarrierCase final : public Case {
 public:
  BarrierCase(Group& group, const BenchConfig& config) : Case(group, config, 0) {}

  void fill() override {}
  void run() override { group_.barrier(options_); }
  uint64_t count_wrong() const override { return 0; }
};

// The case of `count` elements, or nullptr when there are none.
template <typename C>
std::unique_ptr<Case> make_sized(Group& group, const BenchConfig& config, size_t count) {
  if (count == 0) return nullptr;
  return std::make_unique<C>(group, config, count);
}

}  // namespace

Case::Case(Group& group, const BenchConfig& config, size_t count)
    : group_(group), config_(config), count_(count) {
  options_.op = config.op;
  options_.root = kRoot;
  options_.algorithm = config.algorithm;
}

Storage::Storage(Group& group, size_t bytes, bool registered) : bytes_(bytes) {
  if (registered) {
    registered_ = group.allocate_registered(bytes);
    data_ = static_cast<uint8_t*>(registered_->data());
  } else {
    owned_.resize(bytes);
    data_ = owned_.data();
  }
}

Buffer Case::view(Storage& storage, size_t count) const {
  Buffer buffer{storage.data(), count, config_.dtype};
  buffer.registered = storage.registered();  // run in place where registered
  return buffer;
}

std::unique_ptr<Case> make_case(Group& group, const BenchConfig& config, size_t bytes) {
  const size_t n = static_cast<size_t>(group.size());
  const size_t elements = bytes / dtype_size(config.dtype);
  const size_t whole_blocks = elements / n * n;
  switch (config.collective) {
    case Collective::kAllreduce: return make_sized<AllreduceCase>(group, config, elements);
    case Collective::kBroadcast: return make_sized<BroadcastCase>(group, config, elements);
    case Collective::kReduce: return make_sized<ReduceCase>(group, config, elements);
    case Collective::kAllgather: return make_sized<AllgatherCase>(group, config, whole_blocks);
    case Collective::kReduceScatter:
      return make_sized<ReduceScatterCase>(group, config, whole_blocks);
    case Collective::kAllToAll: return make_sized<AllToAllCase>(group, config, whole_blocks);
    case Collective::kRingShift: return make_sized<RingShiftCase>(group, config, elements);
    case Collective::kBarrier: return std::make_unique<BarrierCase>(group, config);
  }
  return nullptr;
}

Algorithm requested_algorithm(const Group& group, const BenchConfig& config) {
  return config.algorithm != Algorithm::kAuto ? config.algorithm : group.options().algorithm;
}

Algorithm effective_algorithm(const Group& group, const BenchConfig& config, size_t bytes) {
  CollectiveOptions opts;
  opts.algorithm = config.algorithm;
  return group.algorithm_for(kind_of(config.collective), bytes, opts);
}

}  // namespace cohort::bench
