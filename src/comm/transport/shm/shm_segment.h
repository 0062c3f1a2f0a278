// A POSIX shared-memory segment mapped into this process (shm_open + mmap).
#pragma once

#include <cstddef>
#include <string>

namespace cohort {

class ShmSegment {
 public:
  // Creates a new segment of `bytes` bytes, zero-filled; throws ConfigError when the name is
  // taken or /dev/shm cannot hold it (says how big it was and what to do).
  static ShmSegment create(const std::string& name, size_t bytes);
  // Maps an existing segment; throws ConfigError when it is missing or smaller than `bytes`.
  static ShmSegment open(const std::string& name, size_t bytes);

  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment();  // unmaps (the name is removed by unlink(), not here)

  // Removes the name from /dev/shm; mappings stay valid. Idempotent, never throws.
  void unlink() noexcept;

  void* data() const { return data_; }
  size_t size() const { return bytes_; }
  const std::string& name() const { return name_; }

 private:
  ShmSegment(std::string name, void* data, size_t bytes)
      : name_(std::move(name)), data_(data), bytes_(bytes) {}

  std::string name_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  bool unlinked_ = false;
};

}  // namespace cohort
