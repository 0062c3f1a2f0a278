#include "checkpoint/checkpoint_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <system_error>

#include "cohort/core/check.h"
#include "cohort/core/error.h"
#include "cohort/torch/checkpoint/checkpoint.h"

namespace cohort::detail {
namespace {

constexpr char kMagic[8] = {'C', 'O', 'H', 'O', 'R', 'T', 'C', 'K'};
constexpr uint32_t kFormatVersion = 1;
constexpr size_t kMagicBytes = sizeof kMagic;
constexpr size_t kVersionOffset = kMagicBytes;
constexpr size_t kLengthOffset = kVersionOffset + 4;
constexpr size_t kCrcOffset = kLengthOffset + 8;
static_assert(kCrcOffset + 4 == kCheckpointFooterBytes, "footer layout");

constexpr const char* kCorruptAdvice =
    "; delete or move it and load an older checkpoint, or start the run over";
constexpr const char* kWriteAdvice =
    "; check that the directory exists and is writable and that the disk has room (a previous "
    "checkpoint at that path is unchanged)";

// Integers are stored little-endian byte by byte, so a file reads the same on any machine.
void put_le(std::string& out, uint64_t value, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

uint64_t get_le(const char* in, size_t bytes) {
  uint64_t value = 0;
  for (size_t i = 0; i < bytes; ++i) {
    value |= static_cast<uint64_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  }
  return value;
}

uLong crc32_update(uLong crc, const char* data, size_t size) {
  // zlib takes a 32-bit length: feed it at most 1 GiB at a time.
  constexpr size_t kChunk = size_t{1} << 30;
  for (size_t offset = 0; offset < size; offset += kChunk) {
    const size_t n = std::min(kChunk, size - offset);
    crc = ::crc32(crc, reinterpret_cast<const Bytef*>(data + offset), static_cast<uInt>(n));
  }
  return crc;
}

uint32_t crc32_of(const char* data, size_t size) {
  return static_cast<uint32_t>(crc32_update(::crc32(0L, Z_NULL, 0), data, size));
}

std::string footer_of(uint64_t payload_bytes, uint32_t crc) {
  std::string footer(kMagic, kMagicBytes);
  put_le(footer, kFormatVersion, 4);
  put_le(footer, payload_bytes, 8);
  put_le(footer, crc, 4);
  return footer;
}

[[noreturn]] void throw_write_error(const std::string& path, const std::string& action, int error) {
  throw CheckpointError(concat("cannot write checkpoint '", path, "': ", action,
                               " failed: ", std::strerror(error), kWriteAdvice));
}

[[noreturn]] void throw_corrupt(const std::string& path, const std::string& what) {
  throw CheckpointError(concat("checkpoint '", path, "' ", what, kCorruptAdvice));
}

// Closes the descriptor on every path out; close() is only checked where data was written.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }
  int close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

// write() may write less than asked (signals, quotas): loop until all is written. Returns 0,
// or the errno of the failure.
int write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return ENOSPC;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return 0;
}

// A payload as it is produced: written to the file, counted and checksummed on the way.
// Note [Write errors under torch's writer]: after a write error every piece is taken and
// dropped, as if written, and the error is thrown once the producer returns. Telling torch's
// archive writer of the failure (a short count) makes it throw, and then its destructor,
// finishing the archive, throws again: libtorch 1.13 terminates the process.
class PayloadStream {
 public:
  PayloadStream(int fd, const FileWriteHooks& hooks) : fd_(fd), hooks_(hooks) {}

  size_t put(const void* data, size_t size) {
    if (error_ != 0) return size;
    const auto* bytes = static_cast<const char*>(data);
    // The CRC is taken from the very bytes handed to write(), before they are written.
    crc_ = crc32_update(crc_, bytes, size);
    error_ = write_all(fd_, bytes, size);
    if (error_ != 0) return size;
    bytes_ += size;
    if (hooks_.on_progress) report_progress();
    return size;
  }

  int error() const { return error_; }
  // What on_progress threw (null: nothing): kept, not thrown through torch's writer.
  std::exception_ptr progress_error() const { return progress_error_; }
  uint64_t bytes() const { return bytes_; }
  uint32_t crc() const { return static_cast<uint32_t>(crc_); }

 private:
  void report_progress() {
    try {
      hooks_.on_progress(bytes_);
    } catch (...) {
      progress_error_ = std::current_exception();
      error_ = ECANCELED;  // every later piece is dropped
    }
  }

  int fd_;
  const FileWriteHooks& hooks_;
  std::exception_ptr progress_error_;
  int error_ = 0;
  uint64_t bytes_ = 0;
  uLong crc_ = ::crc32(0L, Z_NULL, 0);
};

struct WrittenPayload {
  uint32_t crc = 0;
  uint64_t bytes = 0;
};

WrittenPayload write_synced(const std::string& path, const std::string& temporary,
                            const PayloadProducer& produce, const FileWriteHooks& hooks) {
  FileDescriptor file(::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (file.get() < 0) {
    throw_write_error(path, "creating the temporary file '" + temporary + "'", errno);
  }
  const std::string writing = "writing the temporary file '" + temporary + "'";
  PayloadStream stream(file.get(), hooks);
  try {
    produce([&stream](const void* data, size_t size) { return stream.put(data, size); });
  } catch (...) {
    // Where a producer stops at a write error, the write's own reason is the one to report.
    if (stream.progress_error()) std::rethrow_exception(stream.progress_error());
    if (stream.error() != 0) throw_write_error(path, writing, stream.error());
    throw;
  }
  if (stream.progress_error()) std::rethrow_exception(stream.progress_error());
  if (stream.error() != 0) throw_write_error(path, writing, stream.error());
  if (hooks.on_payload_written) hooks.on_payload_written();
  const std::string footer = footer_of(stream.bytes(), stream.crc());
  const int error = write_all(file.get(), footer.data(), footer.size());
  if (error != 0) throw_write_error(path, writing, error);
  // The data must be on disk before the rename makes it the checkpoint: otherwise a crash
  // could leave `path` naming a file whose blocks were never written.
  if (::fsync(file.get()) != 0) throw_write_error(path, "syncing '" + temporary + "'", errno);
  if (file.close() != 0) throw_write_error(path, writing, errno);
  return {stream.crc(), stream.bytes()};
}

std::string directory_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// The rename is an entry in the directory: sync it too, or a crash may undo it.
void sync_directory(const std::string& path) {
  const std::string directory = directory_of(path);
  FileDescriptor dir(::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() < 0) throw_write_error(path, "opening its directory '" + directory + "'", errno);
  // EINVAL: this file system cannot sync directories; nothing more can be done there.
  if (::fsync(dir.get()) != 0 && errno != EINVAL) {
    throw_write_error(path, "syncing its directory '" + directory + "'", errno);
  }
}

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

[[noreturn]] void throw_not_regular(const std::string& path, const std::string& verb, mode_t mode) {
  throw CheckpointError(concat("cannot ", verb, " checkpoint '", path, "': it is ", file_kind(mode),
                               ", not a regular file; give the path of a file (or of none yet)"));
}

// Note [Special files]: opening a FIFO for reading blocks until a writer comes, and a device
// may block or never end, so a path that names anything but a regular file is refused before
// it is opened (stat follows symbolic links, so a link to a checkpoint is fine). O_NONBLOCK and
// the fstat after open close the race of a file replaced between the two.
std::optional<std::string> read_whole_file(const std::string& path) {
  const std::string cannot = "cannot read checkpoint '" + path + "': ";
  const char* advice = "; check the path and its permissions";
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    if (errno == ENOENT) return std::nullopt;
    throw CheckpointError(concat(cannot, std::strerror(errno), advice));
  }
  if (!S_ISREG(info.st_mode)) throw_not_regular(path, "read", info.st_mode);
  FileDescriptor file(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (file.get() < 0 && errno == ENOENT) return std::nullopt;
  if (file.get() < 0) throw CheckpointError(concat(cannot, std::strerror(errno), advice));
  if (::fstat(file.get(), &info) != 0) {
    throw CheckpointError(concat(cannot, std::strerror(errno), advice));
  }
  if (!S_ISREG(info.st_mode)) throw_not_regular(path, "read", info.st_mode);
  std::string bytes(static_cast<size_t>(info.st_size), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(file.get(), &bytes[done], bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw CheckpointError(concat(cannot, std::strerror(errno), advice));
    if (n == 0) break;  // it shrank while we read: the checks below report it
    done += static_cast<size_t>(n);
  }
  bytes.resize(done);
  return bytes;
}

// Checks the footer and the CRC (Note [Footer last]), strips the footer and returns the CRC.
uint32_t verify_and_strip_footer(const std::string& path, std::string& bytes) {
  if (bytes.size() < kCheckpointFooterBytes) {
    throw_corrupt(path, concat("is truncated or not a cohort checkpoint: it has ", bytes.size(),
                               " bytes, fewer than its ", kCheckpointFooterBytes, "-byte footer"));
  }
  const size_t payload_size = bytes.size() - kCheckpointFooterBytes;
  const char* footer = bytes.data() + payload_size;
  if (std::memcmp(footer, kMagic, kMagicBytes) != 0) {
    throw_corrupt(path,
                  "is truncated or not a cohort checkpoint: it does not end with a "
                  "checkpoint footer (was it cut short while written or copied?)");
  }
  const uint64_t version = get_le(footer + kVersionOffset, 4);
  if (version != kFormatVersion) {
    throw CheckpointError(concat("checkpoint '", path, "' has format version ", version,
                                 ", but this build of cohort reads version ", kFormatVersion,
                                 "; load it with the cohort version that wrote it"));
  }
  const uint64_t length = get_le(footer + kLengthOffset, 8);
  if (length != payload_size) {
    throw_corrupt(path, concat("is truncated or corrupt: its footer says ", length,
                               " payload bytes but the file holds ", payload_size));
  }
  const uint32_t expected = static_cast<uint32_t>(get_le(footer + kCrcOffset, 4));
  const uint32_t actual = crc32_of(bytes.data(), payload_size);
  if (actual != expected) {
    throw_corrupt(path, concat("is corrupt: the CRC-32 of its ", payload_size, " payload bytes is ",
                               hex32(actual), " but its footer says ", hex32(expected)));
  }
  bytes.resize(payload_size);
  return actual;
}

// A save would rename over a special file (or fail on a directory): refused first, as loads
// are (Note [Special files]).
void check_replaceable(const std::string& path) {
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) return;  // absent, or the rename reports it
  if (S_ISLNK(info.st_mode) && ::stat(path.c_str(), &info) != 0) return;
  if (!S_ISREG(info.st_mode)) throw_not_regular(path, "write", info.st_mode);
}

}  // namespace

uint32_t write_checkpoint_file(const std::string& path, const std::string& payload) {
  return write_checkpoint_file(
      path, [&payload](const PayloadSink& sink) { sink(payload.data(), payload.size()); });
}

uint32_t write_checkpoint_file(const std::string& path, const PayloadProducer& produce,
                               const FileWriteHooks& hooks, uint64_t* bytes) {
  check_replaceable(path);
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  WrittenPayload written;
  try {
    written = write_synced(path, temporary, produce, hooks);
    if (::rename(temporary.c_str(), path.c_str()) != 0) {
      throw_write_error(path, "renaming '" + temporary + "' over it", errno);
    }
  } catch (...) {
    ::unlink(temporary.c_str());
    throw;
  }
  sync_directory(path);
  if (bytes != nullptr) *bytes = written.bytes;
  return written.crc;
}

std::optional<std::string> read_checkpoint_file(const std::string& path, uint32_t* crc) {
  std::optional<std::string> bytes = read_whole_file(path);
  if (!bytes) return bytes;
  const uint32_t verified = verify_and_strip_footer(path, *bytes);
  if (crc != nullptr) *crc = verified;
  return bytes;
}

void make_checkpoint_directory(const std::string& directory) {
  struct stat info {};
  if (::stat(directory.c_str(), &info) == 0) {
    if (!S_ISDIR(info.st_mode)) {
      throw CheckpointError(concat("cannot write checkpoint '", directory, "': it is ",
                                   file_kind(info.st_mode),
                                   ", not a directory; give the path of a directory (or of none "
                                   "yet) for a sharded checkpoint"));
    }
    return;
  }
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) {
    throw CheckpointError(concat("cannot write checkpoint '", directory,
                                 "': creating the directory failed: ", error.message(),
                                 "; check that its parent is writable"));
  }
  // The new directory is an entry in its parent: synced as a renamed file's entry is.
  std::string entry = directory;
  while (entry.size() > 1 && entry.back() == '/') entry.pop_back();
  sync_directory(entry);
}

std::string hex32(uint32_t value) {
  char text[11];
  std::snprintf(text, sizeof text, "0x%08x", static_cast<unsigned>(value));
  return text;
}

}  // namespace cohort::detail
