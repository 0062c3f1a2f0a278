// detail::StagingBuffer (staging_buffer.h; Note [Staged saves]).
#include "checkpoint/staging_buffer.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "cohort/core/check.h"
#include "cohort/core/error.h"

namespace cohort::detail {
namespace {

constexpr size_t kMinBlock = size_t{64} << 10;
constexpr size_t kMaxBlock = size_t{16} << 20;

// Four blocks to the budget where it allows, so that the writer drains one while the producer
// fills another; one block when the budget is smaller than the smallest block.
size_t block_bytes_for(uint64_t budget) {
  const uint64_t quarter = std::clamp<uint64_t>(budget / 4, kMinBlock, kMaxBlock);
  return static_cast<size_t>(std::min(quarter, budget));
}

}  // namespace

StagingBuffer::StagingBuffer(uint64_t budget)
    : block_bytes_(block_bytes_for(budget)),
      max_blocks_(static_cast<size_t>(std::max<uint64_t>(1, budget / block_bytes_for(budget)))) {
  COHORT_CHECK(budget > 0, "StagingBuffer: the budget must be positive");
}

PayloadProducer StagingBuffer::replay(Deadline deadline) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Block& block : ready_) free_.push_back(std::move(block.data));
    ready_.clear();
    finished_ = reader_done_ = waited_ = false;
    error_ = nullptr;
    staged_ = 0;
  }
  auto self = shared_from_this();
  return [self, deadline](const PayloadSink& sink) { self->write_out(sink, deadline); };
}

void StagingBuffer::stage(const PayloadProducer& produce, Deadline deadline,
                          const std::function<void()>& on_wait) {
  std::exception_ptr error;
  try {
    produce([&](const void* data, size_t size) {
      return put(static_cast<const char*>(data), size, deadline, on_wait);
    });
  } catch (...) {
    error = std::current_exception();
  }
  finish(error);
}

// Copies outside the lock: the block being filled is the producer's alone.
size_t StagingBuffer::put(const char* data, size_t size, Deadline deadline,
                          const std::function<void()>& on_wait) {
  size_t left = size;
  while (left > 0) {
    if (!filling_.data) {
      std::unique_lock<std::mutex> lock(mutex_);
      if (!take_free_block(lock, deadline, on_wait)) return size;  // dropped
    }
    const size_t n = std::min(left, block_bytes_ - filling_.used);
    std::memcpy(filling_.data.get() + filling_.used, data, n);
    filling_.used += n;
    data += n;
    left -= n;
    if (filling_.used == block_bytes_) {
      std::unique_lock<std::mutex> lock(mutex_);
      hand_over(lock);
    }
  }
  staged_ += size;
  return size;
}

// False when the payload is to be dropped: the writer reads no more, or no block came back by
// the deadline (kept as the error the replay throws).
bool StagingBuffer::take_free_block(std::unique_lock<std::mutex>& lock, Deadline deadline,
                                    const std::function<void()>& on_wait) {
  while (!reader_done_ && !error_) {
    if (!free_.empty()) {
      filling_ = {std::move(free_.back()), 0};
      free_.pop_back();
      return true;
    }
    if (blocks_made_ < max_blocks_) {
      // Not value-initialized: each byte is written before it is read.
      filling_ = {std::unique_ptr<char[]>(new char[block_bytes_]), 0};
      ++blocks_made_;
      return true;
    }
    if (!waited_ && on_wait) {
      waited_ = true;
      lock.unlock();
      on_wait();
      lock.lock();
      continue;
    }
    changed_.wait_for(lock, deadline.remaining(),
                      [&] { return reader_done_ || !free_.empty() || deadline.expired(); });
    if (deadline.expired() && free_.empty() && !reader_done_) {
      error_ = std::make_exception_ptr(TimeoutError(
          "asynchronous checkpoint: the payload did not fit the staging memory "
          "(AsyncCheckpointOptions::staging_bytes) and the writer freed none of it before the "
          "deadline (AsyncCheckpointOptions::timeout); is the disk stalled?"));
    }
  }
  return false;
}

void StagingBuffer::hand_over(std::unique_lock<std::mutex>& lock) {
  (void)lock;
  if (reader_done_) {
    free_.push_back(std::move(filling_.data));
  } else {
    ready_.push_back(std::move(filling_));
  }
  filling_ = {};
  changed_.notify_all();
}

void StagingBuffer::finish(std::exception_ptr error) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (filling_.data && filling_.used > 0) {
    hand_over(lock);
  } else if (filling_.data) {
    free_.push_back(std::move(filling_.data));
    filling_ = {};
  }
  if (!error_) error_ = std::move(error);
  finished_ = true;
  changed_.notify_all();
}

void StagingBuffer::write_out(const PayloadSink& sink, Deadline deadline) {
  while (true) {
    Block block;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (!changed_.wait_for(lock, deadline.remaining(),
                             [&] { return !ready_.empty() || finished_; })) {
        throw TimeoutError(
            "asynchronous checkpoint: the save's payload was not staged before the deadline "
            "(AsyncCheckpointOptions::timeout)");
      }
      if (ready_.empty()) {
        if (error_) std::rethrow_exception(error_);
        return;
      }
      block = std::move(ready_.front());
      ready_.pop_front();
    }
    try {
      sink(block.data.get(), block.used);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      free_.push_back(std::move(block.data));
      changed_.notify_all();
      throw;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(std::move(block.data));
    changed_.notify_all();
  }
}

void StagingBuffer::reader_done() {
  std::lock_guard<std::mutex> lock(mutex_);
  reader_done_ = true;
  for (Block& block : ready_) free_.push_back(std::move(block.data));
  ready_.clear();
  changed_.notify_all();
}

uint64_t StagingBuffer::staged_bytes() const {
  return staged_;
}

uint64_t StagingBuffer::held_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<uint64_t>(blocks_made_) * block_bytes_;
}

}  // namespace cohort::detail
