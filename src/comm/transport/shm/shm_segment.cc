#include "transport/shm/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "cohort/core/check.h"
#include "cohort/core/error.h"

namespace cohort {
namespace {

void* map(int fd, size_t bytes, const std::string& name) {
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int error = errno;
  ::close(fd);
  if (data == MAP_FAILED) {
    throw ConfigError(detail::concat("cannot map shared memory segment ", name, " (", bytes,
                                     " bytes): ", std::strerror(error)));
  }
  return data;
}

}  // namespace

ShmSegment ShmSegment::create(const std::string& name, size_t bytes) {
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    throw ConfigError(detail::concat("cannot create shared memory segment ", name, ": ",
                                     std::strerror(errno), " (is /dev/shm mounted and writable?)"));
  }
  // posix_fallocate reserves the pages now, so a full /dev/shm is an error here rather than a
  // SIGBUS in the middle of a collective.
  const int error = ::ftruncate(fd, static_cast<off_t>(bytes)) == 0
                        ? ::posix_fallocate(fd, 0, static_cast<off_t>(bytes))
                        : errno;
  if (error != 0) {
    ::close(fd);
    ::shm_unlink(name.c_str());
    throw ConfigError(detail::concat(
        "cannot size shared memory segment ", name, " to ", bytes, " bytes: ", std::strerror(error),
        " (/dev/shm too small? in a container raise --shm-size, or set COHORT_SHM=0)"));
  }
  try {
    return ShmSegment(name, map(fd, bytes, name), bytes);
  } catch (...) {
    ::shm_unlink(name.c_str());  // nobody can use a segment its creator could not map
    throw;
  }
}

ShmSegment ShmSegment::open(const std::string& name, size_t bytes) {
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) {
    throw ConfigError(
        detail::concat("cannot open shared memory segment ", name, ": ", std::strerror(errno)));
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0 || static_cast<size_t>(info.st_size) < bytes) {
    ::close(fd);
    throw ConfigError(detail::concat("shared memory segment ", name, " is smaller than the ", bytes,
                                     " bytes expected"));
  }
  return ShmSegment(name, map(fd, bytes, name), bytes);
}

ShmSegment::ShmSegment(ShmSegment&& other) noexcept
    : name_(std::move(other.name_)),
      data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      unlinked_(other.unlinked_) {}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, bytes_);
    name_ = std::move(other.name_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    unlinked_ = other.unlinked_;
  }
  return *this;
}

ShmSegment::~ShmSegment() {
  if (data_ != nullptr) ::munmap(data_, bytes_);
}

void ShmSegment::unlink() noexcept {
  if (unlinked_ || name_.empty()) return;
  unlinked_ = true;
  ::shm_unlink(name_.c_str());  // ENOENT: another rank already removed it
}

}  // namespace cohort
