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

constexpr const char* kAnonymousName = "cohort-registered";

void* map_keeping_fd(int fd, size_t bytes, const std::string& name) {
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    const int error = errno;
    throw ConfigError(detail::concat("cannot map shared memory segment ", name, " (", bytes,
                                     " bytes): ", std::strerror(error)));
  }
  return data;
}

void* map(int fd, size_t bytes, const std::string& name) {
  try {
    void* data = map_keeping_fd(fd, bytes, name);
    ::close(fd);
    return data;
  } catch (...) {
    ::close(fd);
    throw;
  }
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
  std::optional<ShmSegment> segment = open_if_present(name, bytes);
  if (!segment) {
    throw ConfigError(
        detail::concat("cannot open shared memory segment ", name, ": ", std::strerror(ENOENT)));
  }
  return std::move(*segment);
}

std::optional<ShmSegment> ShmSegment::open_if_present(const std::string& name, size_t bytes) {
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0 && errno == ENOENT) return std::nullopt;
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

ShmSegment ShmSegment::create_anonymous(size_t bytes) {
  const int fd = ::memfd_create(kAnonymousName, MFD_CLOEXEC);
  if (fd < 0) {
    throw ConfigError(
        detail::concat("cannot create anonymous shared memory: ", std::strerror(errno)));
  }
  // As in create(): reserve the pages now rather than meet a SIGBUS in a collective.
  const int error = ::ftruncate(fd, static_cast<off_t>(bytes)) == 0
                        ? ::posix_fallocate(fd, 0, static_cast<off_t>(bytes))
                        : errno;
  if (error != 0) {
    ::close(fd);
    throw ConfigError(detail::concat("cannot reserve ", bytes,
                                     " bytes of anonymous shared memory: ", std::strerror(error)));
  }
  try {
    return ShmSegment(std::string(), map_keeping_fd(fd, bytes, "(anonymous)"), bytes, fd);
  } catch (...) {
    ::close(fd);
    throw;
  }
}

ShmSegment ShmSegment::open_peer(int pid, int fd, size_t bytes) {
  const std::string path = detail::concat("/proc/", pid, "/fd/", fd);
  // The descriptor must still be the peer's segment: a peer that failed may have closed it and
  // another file taken its number.
  char target[128] = {};
  const ssize_t length = ::readlink(path.c_str(), target, sizeof(target) - 1);
  const std::string expected = std::string("/memfd:") + kAnonymousName;
  if (length < 0 || std::string(target, static_cast<size_t>(length)).rfind(expected, 0) != 0) {
    throw ConfigError(detail::concat(path, " is not a cohort registered segment (",
                                     length < 0 ? std::strerror(errno) : target, ")"));
  }
  const int opened = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (opened < 0) {
    throw ConfigError(detail::concat("cannot open ", path, ": ", std::strerror(errno),
                                     " (the ranks of a node must run as one user)"));
  }
  struct stat info {};
  if (::fstat(opened, &info) != 0 || static_cast<size_t>(info.st_size) < bytes) {
    ::close(opened);
    throw ConfigError(detail::concat(path, " is smaller than the ", bytes, " bytes expected"));
  }
  return ShmSegment(std::string(), map(opened, bytes, path), bytes);
}

void ShmSegment::close_fd() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

ShmSegment::ShmSegment(ShmSegment&& other) noexcept
    : name_(std::move(other.name_)),
      data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      unlinked_(other.unlinked_),
      fd_(std::exchange(other.fd_, -1)) {}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, bytes_);
    close_fd();
    name_ = std::move(other.name_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    unlinked_ = other.unlinked_;
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

ShmSegment::~ShmSegment() {
  if (data_ != nullptr) ::munmap(data_, bytes_);
  close_fd();
}

void ShmSegment::unlink() noexcept {
  if (unlinked_ || name_.empty()) return;
  unlinked_ = true;
  ::shm_unlink(name_.c_str());  // ENOENT: another rank already removed it
}

}  // namespace cohort
