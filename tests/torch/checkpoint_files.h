// Files for the checkpoint tests (checkpoint_test.cc, sharded_checkpoint_test.cc): a fresh
// directory per test, bytes of a file, and bitwise comparison of tensors.
#pragma once

#include <torch/torch.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cohort/comm/group.h"

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

}  // namespace cohort::testing
