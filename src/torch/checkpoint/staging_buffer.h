// Memory of the checkpointer's own that an asynchronous save's payload is staged into
// (AsyncCheckpointOptions::staging_bytes), so that training waits for a copy, not for the disk.
//
// Note [Staged saves]
// An asynchronous save with staging runs its archive's producer (torch's serializer) on the
// caller's thread into blocks of this buffer, and the writer thread replays the blocks into the
// file. Once the producer has returned, the save reads nothing of the training state: save()
// returns and before_update() never waits for it. The blocks are the staging:
//  - Bounded: at most `budget` bytes of blocks exist. A payload larger than the budget is
//    staged in pieces: when every block is full and not yet written, the producer waits for
//    the writer to hand one back, so save() returns once all but `budget` bytes are in the
//    file (the trade-off: a smaller budget is less memory and a longer save() call).
//  - Kept: blocks are reused by the next save, so that only the first save pays for the pages
//    (a fresh allocation's page faults cost more than the copy into touched memory). The
//    memory the checkpointer adds is the largest payload staged, up to the budget.
//  - Never stuck: the writer says when it is done reading (reader_done(), on every path of its
//    job, a failure included); the producer then drops what it stages instead of waiting. What
//    the producer throws, and a wait past the deadline, are kept and thrown by the replay, so
//    the write fails and every rank learns it from the save's outcome, as for a failed write.
// One payload at a time: the checkpointer starts the next save only after the last one ended.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "checkpoint/checkpoint_file.h"
#include "cohort/core/deadline.h"

namespace cohort::detail {

class StagingBuffer : public std::enable_shared_from_this<StagingBuffer> {
 public:
  // budget: the most bytes staged at once (> 0).
  explicit StagingBuffer(uint64_t budget);

  // On the caller's thread, for a new payload: runs `produce` into the blocks. Waits, until
  // `deadline`, while all of them are full and unwritten, calling `on_wait` once before the
  // first such wait (the checkpointer raises the writer's priority). Throws nothing: a failure
  // is the replay's to report.
  void stage(const PayloadProducer& produce, Deadline deadline,
             const std::function<void()>& on_wait);
  // Starts a new payload (before the writer's job is launched): a producer for the writer's
  // thread that passes the payload on to its sink as stage() fills the blocks, and throws what
  // stage() kept, or TimeoutError when no block comes by `deadline`.
  PayloadProducer replay(Deadline deadline);
  // The writer reads no more of this payload (written, or its job failed): stage() drops the
  // rest instead of waiting for blocks.
  void reader_done();

  // Bytes of the payload staged so far; bytes of blocks held (kept for the next save).
  uint64_t staged_bytes() const;
  uint64_t held_bytes() const;

 private:
  struct Block {
    std::unique_ptr<char[]> data;
    size_t used = 0;
  };
  size_t put(const char* data, size_t size, Deadline deadline,
             const std::function<void()>& on_wait);
  bool take_free_block(std::unique_lock<std::mutex>& lock, Deadline deadline,
                       const std::function<void()>& on_wait);
  void hand_over(std::unique_lock<std::mutex>& lock);
  void finish(std::exception_ptr error);
  void write_out(const PayloadSink& sink, Deadline deadline);

  const size_t block_bytes_;
  const size_t max_blocks_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::unique_ptr<char[]>> free_;
  std::deque<Block> ready_;  // staged, not yet written
  Block filling_;            // the producer's current block (no data: none)
  size_t blocks_made_ = 0;
  std::atomic<uint64_t> staged_{0};
  bool finished_ = false;     // the producer returned (or failed)
  bool reader_done_ = false;  // the writer reads no more
  bool waited_ = false;       // on_wait was called for this payload
  std::exception_ptr error_;
};

}  // namespace cohort::detail
