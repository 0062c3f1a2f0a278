#include "idx_file.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace fashion_mnist {

namespace {

constexpr uint8_t kUnsignedByte = 0x08;
constexpr int64_t kMaxDims = 4;

struct GzCloser {
  void operator()(gzFile file) const { gzclose(file); }
};
using GzFile = std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser>;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw DataError("data set file '" + path + "' " + what);
}

// Reads exactly `size` bytes (gzread also reads files that are not gzipped, as they are).
void read_exactly(gzFile file, const std::string& path, void* out, size_t size, const char* what) {
  auto* bytes = static_cast<uint8_t*>(out);
  while (size > 0) {
    const unsigned chunk = static_cast<unsigned>(std::min<size_t>(size, 1u << 30));
    const int n = gzread(file, bytes, chunk);
    if (n < 0) {
      int code = 0;
      fail(path, std::string("cannot be read (") + gzerror(file, &code) + ")");
    }
    if (n == 0) fail(path, std::string("is cut short in its ") + what + ": download it again");
    bytes += n;
    size -= static_cast<size_t>(n);
  }
}

uint32_t big_endian_u32(const uint8_t* b) {
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
}

std::vector<int64_t> read_header(gzFile file, const std::string& path, int64_t expected_dims) {
  uint8_t magic[4];
  read_exactly(file, path, magic, sizeof magic, "header");
  if (magic[0] != 0 || magic[1] != 0 || magic[2] != kUnsignedByte || magic[3] == 0 ||
      magic[3] > kMaxDims) {
    fail(path, "is not an IDX file of unsigned bytes (its first bytes are wrong)");
  }
  if (magic[3] != expected_dims) {
    fail(path, "has " + std::to_string(magic[3]) + " dimensions, expected " +
                   std::to_string(expected_dims) + " (images and labels swapped?)");
  }
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < expected_dims; ++d) {
    uint8_t size[4];
    read_exactly(file, path, size, sizeof size, "header");
    dims.push_back(big_endian_u32(size));
  }
  return dims;
}

}  // namespace

torch::Tensor read_idx_u8(const std::string& path, int64_t expected_dims) {
  errno = 0;
  GzFile file(gzopen(path.c_str(), "rb"));
  if (!file) {
    fail(path, std::string("cannot be opened (") + (errno ? std::strerror(errno) : "no memory") +
                   "): install Debian's dataset-fashion-mnist package, or give the directory "
                   "holding the four Fashion-MNIST files with --data DIR");
  }
  const std::vector<int64_t> dims = read_header(file.get(), path, expected_dims);
  torch::Tensor values = torch::empty(dims, torch::kUInt8);
  read_exactly(file.get(), path, values.data_ptr(), static_cast<size_t>(values.numel()), "values");
  uint8_t extra;
  if (gzread(file.get(), &extra, 1) != 0) {
    fail(path, "is longer than its header says: it is not a Fashion-MNIST file");
  }
  return values;
}

}  // namespace fashion_mnist
