// A POSIX shared-memory segment mapped into this process (shm_open + mmap).
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace cohort {

class ShmSegment {
 public:
  // Creates a new segment of `bytes` bytes, zero-filled; throws ConfigError when the name is
  // taken or /dev/shm cannot hold it (says how big it was and what to do).
  static ShmSegment create(const std::string& name, size_t bytes);
  // Maps an existing segment; throws ConfigError when it is missing or smaller than `bytes`.
  static ShmSegment open(const std::string& name, size_t bytes);
  // As open(), but nullopt when no segment has the name (it was removed before this opened it).
  static std::optional<ShmSegment> open_if_present(const std::string& name, size_t bytes);
  // A segment without a name (memfd_create): nothing of it is ever in /dev/shm, and its
  // memory is freed with the last mapping however the processes end. fd() stays open for
  // peers to map it (open_peer) until close_fd(). Throws ConfigError when it cannot be made.
  static ShmSegment create_anonymous(size_t bytes);
  // Maps descriptor `fd` of process `pid` (an anonymous segment of at least `bytes` bytes)
  // through /proc/<pid>/fd; throws ConfigError when that process, or this system, refuses.
  static ShmSegment open_peer(int pid, int fd, size_t bytes);

  ShmSegment() = default;  // maps nothing
  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment();  // unmaps (the name is removed by unlink(), not here)

  // Removes the name from /dev/shm; mappings stay valid. Idempotent, never throws.
  void unlink() noexcept;

  int fd() const { return fd_; }  // anonymous segments until close_fd(), else -1
  void close_fd() noexcept;

  void* data() const { return data_; }
  size_t size() const { return bytes_; }
  const std::string& name() const { return name_; }

 private:
  ShmSegment(std::string name, void* data, size_t bytes, int fd = -1)
      : name_(std::move(name)), data_(data), bytes_(bytes), fd_(fd) {}

  std::string name_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  bool unlinked_ = false;
  int fd_ = -1;
};

}  // namespace cohort
