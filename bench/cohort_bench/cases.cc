#include "cases.h"

#include <cstring>

#include "algorithm_choice.h"
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
    case Collective::kBarrier: return CollectiveKind::kBarrier;
  }
  return CollectiveKind::kBarrier;
}

void zero(std::vector<uint8_t>& storage) { std::memset(storage.data(), 0, storage.size()); }

// ---- in-place collectives: one buffer of count elements

class AllreduceCase final : public Case {
 public:
  AllreduceCase(Group& group, const BenchConfig& config, size_t count)
      : Case(group, config, count),
        data_(bytes()),
        input_(reduce_input(config.dtype, config.op, ranks(), rank())),
        expected_(reduce_result(config.dtype, config.op, ranks())) {}

  void fill() override { bench::fill(data_.data(), count_, dtype(), input_); }
  void run() override { group_.allreduce(view(data_, count_), options_); }
  uint64_t count_wrong() const override {
    return bench::count_wrong(data_.data(), count_, dtype(), expected_);
  }

 private:
  std::vector<uint8_t> data_;
  Pattern input_;
  Pattern expected_;
};

class BroadcastCase final : public Case {
 public:
  BroadcastCase(Group& group, const BenchConfig& config, size_t count)
      : Case(group, config, count), data_(bytes()), expected_(plain_input(config.dtype, kRoot)) {}

  void fill() override {
    if (rank() == kRoot) bench::fill(data_.data(), count_, dtype(), expected_);
    else zero(data_);
  }
  void run() override { group_.broadcast(view(data_, count_), options_); }
  uint64_t count_wrong() const override {
    return bench::count_wrong(data_.data(), count_, dtype(), expected_);
  }

 private:
  std::vector<uint8_t> data_;
  Pattern expected_;
};

class ReduceCase final : public Case {
 public:
  ReduceCase(Group& group, const BenchConfig& config, size_t count)
      : Case(group, config, count),
        data_(bytes()),
        input_(reduce_input(config.dtype, config.op, ranks(), rank())),
        expected_(rank() == kRoot ? reduce_result(config.dtype, config.op, ranks()) : input_) {}

  void fill() override { bench::fill(data_.data(), count_, dtype(), input_); }
  void run() override { group_.reduce(view(data_, count_), options_); }
  // Ranks other than the root must find their data unchanged (group.h).
  uint64_t count_wrong() const override {
    return bench::count_wrong(data_.data(), count_, dtype(), expected_);
  }

 private:
  std::vector<uint8_t> data_;
  Pattern input_;
  Pattern expected_;
};

// ---- collectives with separate input and output

class AllgatherCase final : public Case {
 public:
  AllgatherCase(Group& group, const BenchConfig& config, size_t count)
      : Case(group, config, count), in_(block() * dtype_size(config.dtype)), out_(bytes()) {}

  void fill() override {
    bench::fill(in_.data(), block(), dtype(), plain_input(dtype(), rank()));
    zero(out_);
  }
  void run() override { group_.allgather(view(in_, block()), view(out_, count_), options_); }
  // Block r of the output is rank r's input.
  uint64_t count_wrong() const override {
    uint64_t wrong = 0;
    for (int r = 0; r < ranks(); ++r) {
      wrong += bench::count_wrong(block_at(r), block(), dtype(), plain_input(dtype(), r));
    }
    return wrong;
  }

 private:
  const uint8_t* block_at(int r) const {
    return out_.data() + static_cast<size_t>(r) * block() * dtype_size(dtype());
  }

  std::vector<uint8_t> in_;
  std::vector<uint8_t> out_;
};

class ReduceScatterCase final : public Case {
 public:
  ReduceScatterCase(Group& group, const BenchConfig& config, size_t count)
      : Case(group, config, count),
        in_(bytes()),
        out_(block() * dtype_size(config.dtype)),
        input_(reduce_input(config.dtype, config.op, ranks(), rank())),
        expected_(reduce_result(config.dtype, config.op, ranks())) {}

  void fill() override {
    bench::fill(in_.data(), count_, dtype(), input_);
    zero(out_);
  }
  void run() override { group_.reduce_scatter(view(in_, count_), view(out_, block()), options_); }
  // This rank holds block `rank` of the reduced whole.
  uint64_t count_wrong() const override {
    return bench::count_wrong(out_.data(), block(), dtype(), expected_,
                              static_cast<size_t>(rank()) * block());
  }

 private:
  std::vector<uint8_t> in_;
  std::vector<uint8_t> out_;
  Pattern input_;
  Pattern expected_;
};

class AllToAllCase final : public Case {
 public:
  AllToAllCase(Group& group, const BenchConfig& config, size_t count)
      : Case(group, config, count), in_(bytes()), out_(bytes()) {}

  void fill() override {
    bench::fill(in_.data(), count_, dtype(), plain_input(dtype(), rank()));
    zero(out_);
  }
  void run() override { group_.all_to_all(view(in_, count_), view(out_, count_), options_); }
  // Block s of the output is block `rank` of rank s's input.
  uint64_t count_wrong() const override {
    uint64_t wrong = 0;
    const size_t block_bytes = block() * dtype_size(dtype());
    for (int s = 0; s < ranks(); ++s) {
      wrong += bench::count_wrong(out_.data() + static_cast<size_t>(s) * block_bytes, block(),
                                  dtype(), plain_input(dtype(), s),
                                  static_cast<size_t>(rank()) * block());
    }
    return wrong;
  }

 private:
  std::vector<uint8_t> in_;
  std::vector<uint8_t> out_;
};

class BarrierCase final : public Case {
 public:
  BarrierCase(Group& group, const BenchConfig& config) : Case(group, config, 0) {}

  void fill() override {}
  void run() override { group_.barrier(options_); }
  uint64_t count_wrong() const override { return 0; }
};

}  // namespace

Case::Case(Group& group, const BenchConfig& config, size_t count)
    : group_(group), config_(config), count_(count) {
  options_.op = config.op;
  options_.root = kRoot;
  options_.algorithm = config.algorithm;
}

Buffer Case::view(std::vector<uint8_t>& storage, size_t count) const {
  return Buffer{storage.data(), count, config_.dtype};
}

std::unique_ptr<Case> make_case(Group& group, const BenchConfig& config, size_t bytes) {
  const size_t n = static_cast<size_t>(group.size());
  const size_t elements = bytes / dtype_size(config.dtype);
  const size_t whole_blocks = elements / n * n;
  switch (config.collective) {
    case Collective::kAllreduce:
      if (elements == 0) return nullptr;
      return std::make_unique<AllreduceCase>(group, config, elements);
    case Collective::kBroadcast:
      if (elements == 0) return nullptr;
      return std::make_unique<BroadcastCase>(group, config, elements);
    case Collective::kReduce:
      if (elements == 0) return nullptr;
      return std::make_unique<ReduceCase>(group, config, elements);
    case Collective::kAllgather:
      if (whole_blocks == 0) return nullptr;
      return std::make_unique<AllgatherCase>(group, config, whole_blocks);
    case Collective::kReduceScatter:
      if (whole_blocks == 0) return nullptr;
      return std::make_unique<ReduceScatterCase>(group, config, whole_blocks);
    case Collective::kAllToAll:
      if (whole_blocks == 0) return nullptr;
      return std::make_unique<AllToAllCase>(group, config, whole_blocks);
    case Collective::kBarrier: return std::make_unique<BarrierCase>(group, config);
  }
  return nullptr;
}

Algorithm requested_algorithm(const Group& group, const BenchConfig& config) {
  return config.algorithm != Algorithm::kAuto ? config.algorithm : group.options().algorithm;
}

Algorithm effective_algorithm(const Group& group, const BenchConfig& config, size_t bytes) {
  return choose_algorithm(kind_of(config.collective), requested_algorithm(group, config), bytes,
                          group.size());
}

}  // namespace cohort::bench
