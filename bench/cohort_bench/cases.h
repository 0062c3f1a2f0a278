// One collective as the benchmark runs it at one message size: its buffers, the call, and the
// check of this rank's result against closed-form values (Note [Closed-form values]).
//
// Sizes follow nccl-tests: the reported size is the buffer of the whole operation. For
// allreduce, broadcast and reduce it is the (in-place) data; for allgather the total output
// (each rank contributes size / ranks); for reduce_scatter the total input (each rank gets
// size / ranks); for all_to_all each rank's input (size / ranks per peer); for ring_shift each
// rank's input (all of it to the successor). Sizes that do not split evenly are rounded down
// to whole elements per rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "bench_config.h"
#include "cohort/comm/group.h"

namespace cohort::bench {

// A rank's buffer of a case: private memory, or registered with the group (--registered).
class Storage {
 public:
  Storage(Group& group, size_t bytes, bool registered);
  uint8_t* data() const { return data_; }
  size_t size() const { return bytes_; }
  // The registered memory it is (Buffer::registered), or null.
  const RegisteredMemory* registered() const { return registered_.get(); }

 private:
  std::shared_ptr<RegisteredMemory> registered_;
  std::vector<uint8_t> owned_;
  uint8_t* data_;
  size_t bytes_;
};

class Case {
 public:
  virtual ~Case() = default;
  Case(const Case&) = delete;
  Case& operator=(const Case&) = delete;

  // Elements in the reported size, and that size in bytes.
  size_t count() const { return count_; }
  size_t bytes() const { return count_ * dtype_size(config_.dtype); }

  // Closed-form inputs on this rank; outputs set to 0, which no correct result contains.
  virtual void fill() = 0;
  // One collective, blocking.
  virtual void run() = 0;
  // Elements of this rank's result that differ from the closed form, after fill() and run().
  virtual uint64_t count_wrong() const = 0;

 protected:
  Case(Group& group, const BenchConfig& config, size_t count);

  int rank() const { return group_.rank(); }
  int ranks() const { return group_.size(); }
  DType dtype() const { return config_.dtype; }
  size_t block() const { return count_ / static_cast<size_t>(ranks()); }
  // Typed views of raw storage.
  Buffer view(Storage& storage, size_t count) const;

  Group& group_;
  const BenchConfig& config_;
  const size_t count_;
  CollectiveOptions options_;
};

// The case for `bytes`, or nullptr when that is less than one element (per rank, for the
// collectives that split their buffer).
std::unique_ptr<Case> make_case(Group& group, const BenchConfig& config, size_t bytes);

// The algorithm the group runs for this collective at `bytes`: --algo, else the group's default
// (COHORT_ALGO), else cohort's automatic choice; also where a collective lacks the requested
// variant and falls back.
Algorithm effective_algorithm(const Group& group, const BenchConfig& config, size_t bytes);
// --algo, else the group's default: what the user asked for.
Algorithm requested_algorithm(const Group& group, const BenchConfig& config);

}  // namespace cohort::bench
