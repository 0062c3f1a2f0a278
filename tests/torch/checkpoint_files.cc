#include "checkpoint_files.h"

#include <ftw.h>
#include <gtest/gtest.h>
#include <stdio.h>
#include <stdlib.h>

#include <fstream>
#include <iterator>
#include <stdexcept>
#include <utility>

#include "cohort/core/error.h"
#include "ddp_harness.h"

namespace cohort::testing {

namespace fs = std::filesystem;

TempDir::TempDir() {
  std::string pattern = (fs::temp_directory_path() / "cohort_checkpoint_XXXXXX").string();
  if (::mkdtemp(&pattern[0]) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

namespace {
int remove_entry(const char* path, const struct stat*, int, struct FTW*) {
  return ::remove(path);
}
}  // namespace

// nftw rather than std::filesystem::remove_all: in a build against PyTorch's pip libtorch 2.11,
// the remove_all that libtorch.so exports is the one called, and it jumps to address 0.
TempDir::~TempDir() {
  ::nftw(path_.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

std::set<std::string> TempDir::names(const std::string& sub) const {
  std::set<std::string> out;
  for (const auto& entry : fs::directory_iterator(sub.empty() ? path_ : path_ / sub)) {
    out.insert(entry.path().filename().string());
  }
  return out;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::vector<std::string> checkpoint_errors(
    int world, const std::function<void(int, std::shared_ptr<Group>)>& body) {
  std::vector<std::string> out(static_cast<size_t>(world));
  run_with_groups(world, [&](int rank, std::shared_ptr<Group> group) {
    try {
      body(rank, std::move(group));
    } catch (const CheckpointError& e) {
      out[rank] = e.what();
    } catch (const InvalidArgument& e) {
      out[rank] = std::string("InvalidArgument: ") + e.what();
    } catch (const std::exception& e) {
      out[rank] = std::string("other: ") + e.what();
    }
  });
  return out;
}

void expect_every_rank_names(const std::vector<std::string>& errors,
                             const std::vector<std::string>& words) {
  for (size_t rank = 0; rank < errors.size(); ++rank) {
    const std::string& error = errors[rank];
    EXPECT_FALSE(error.empty()) << "rank " << rank << " threw nothing";
    EXPECT_NE(error.rfind("other: ", 0), 0u) << "rank " << rank << ": " << error;
    EXPECT_NE(error.rfind("InvalidArgument: ", 0), 0u) << "rank " << rank << ": " << error;
    for (const auto& word : words) {
      EXPECT_NE(error.find(word), std::string::npos)
          << "rank " << rank << " does not name '" << word << "': " << error;
    }
  }
}

std::string bitwise_difference(const std::vector<torch::Tensor>& got,
                               const std::vector<torch::Tensor>& want) {
  if (got.size() != want.size()) {
    return "got " + std::to_string(got.size()) + " tensors, want " + std::to_string(want.size());
  }
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i].defined() != want[i].defined()) return "tensor " + std::to_string(i) + " defined?";
    if (want[i].defined() && !torch::equal(got[i], want[i])) {
      return "tensor " + std::to_string(i) + " differs";
    }
  }
  return "";
}

AsyncCheckpointOptions WriterGate::options(AsyncCheckpointOptions options) {
  options.on_progress = [this](uint64_t bytes) { at_piece(bytes); };
  return options;
}

void WriterGate::at_piece(uint64_t bytes) {
  std::unique_lock<std::mutex> lock(mutex_);
  bytes_ = bytes;
  writing_ = true;
  changed_.notify_all();
  // Held once at most: past the deadline the gate stays open, so that a test whose writer is
  // never let go (a broken staging) fails in a minute instead of a minute per piece.
  if (!changed_.wait_for(lock, std::chrono::minutes(1), [this] { return open_; })) open_ = true;
}

void WriterGate::wait_until_writing() {
  std::unique_lock<std::mutex> lock(mutex_);
  const bool writing =
      changed_.wait_for(lock, std::chrono::minutes(1), [this] { return writing_; });
  ASSERT_TRUE(writing) << "the asynchronous save never started writing";
}

void WriterGate::open() {
  std::lock_guard<std::mutex> lock(mutex_);
  open_ = true;
  changed_.notify_all();
}

uint64_t WriterGate::bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_;
}

}  // namespace cohort::testing
