// Reading the (gzipped) IDX files that MNIST and Fashion-MNIST come in: a big-endian header
// (two zero bytes, a type code, the number of dimensions, then each dimension as a u32) and
// the values. Only unsigned bytes (type 0x08) are needed here.
#pragma once

#include <torch/torch.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace fashion_mnist {

// A data set file that is missing or malformed; the message names the file and what to do.
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Reads an IDX file of unsigned bytes (gzipped or not) into a uint8 tensor of its dimensions.
// `expected_dims` is the number of dimensions the caller needs (3 for images, 1 for labels).
// Throws DataError naming the file when it is missing, unreadable, cut short or not IDX.
torch::Tensor read_idx_u8(const std::string& path, int64_t expected_dims);

}  // namespace fashion_mnist
