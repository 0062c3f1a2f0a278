// Files for the checkpoint tests (checkpoint_test.cc, sharded_checkpoint_test.cc): a fresh
// directory per test, bytes of a file, bitwise comparison of tensors, and a gate that holds an
// asynchronous save's writer.
#pragma once

#include <torch/torch.h>

#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "cohort/comm/group.h"
#include "cohort/torch/checkpoint/async_checkpoint.h"

namespace cohort::testing {

// A fresh directory, removed with everything in it when destroyed.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string path() const { return path_.string(); }
  // The names of the entries directly in `sub` ("": the directory itself).
  std::set<std::string> names(const std::string& sub = "") const;

 private:
  std::filesystem::path path_;
};

std::string read_bytes(const std::string& path);
void write_bytes(const std::string& path, const std::string& bytes);

// Runs body(rank, group) on `world` ranks (ddp_harness.h's run_with_groups) and returns what
// each threw: a CheckpointError's message, "InvalidArgument: <message>", "other: <message>",
// or "" for nothing.
std::vector<std::string> checkpoint_errors(
    int world, const std::function<void(int, std::shared_ptr<Group>)>& body);
// Every rank threw a CheckpointError whose message holds each of `words` (gtest failures).
void expect_every_rank_names(const std::vector<std::string>& errors,
                             const std::vector<std::string>& words);

// "" when every tensor is bitwise equal, else which one differs.
std::string bitwise_difference(const std::vector<torch::Tensor>& got,
                               const std::vector<torch::Tensor>& want);

// Holds an asynchronous save's writer at the first piece of its file until opened, so that a
// test knows the save is in flight while it trains on; records how far the writer got. Every
// wait has a deadline (the writer goes on after a minute; a test waiting fails). Declare it
// before the AsyncCheckpointer whose options() it gave.
class WriterGate {
 public:
  AsyncCheckpointOptions options(AsyncCheckpointOptions options = {});
  // Blocks until the writer has written its first piece; gtest failure at the deadline.
  void wait_until_writing();
  void open();
  // The payload bytes written so far.
  uint64_t bytes() const;

 private:
  void at_piece(uint64_t bytes);

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  bool writing_ = false;
  bool open_ = false;
  uint64_t bytes_ = 0;
};

}  // namespace cohort::testing
