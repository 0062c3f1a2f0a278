// A job of tests/elastic: the store the test hosts, and its members (elastic_rank.cc) started
// as processes.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "cohort/comm/tcp_store.h"
#include "support/process.h"
#include "support/test_support.h"

namespace cohort::testing {

inline constexpr std::chrono::seconds kDeadline{150};
inline constexpr int64_t kSteps = 30;

// The parameters a member wrote to --out (raw float32, in registration order).
inline std::vector<float> read_params(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

class ElasticJob {
 public:
  ElasticJob(int world, int min_ranks, std::vector<std::string> extra_env = {})
      : world_(world),
        min_ranks_(min_ranks),
        extra_env_(std::move(extra_env)),
        server_("127.0.0.1", 0, "elastic-test-token"),
        dir_(testing::fresh_temp_dir("elastic_job" + std::to_string(jobs_made_++))) {}

  // Starts the member of launch rank `rank` (a joiner: a process that was not in the launch).
  ChildProcess& start(int rank, const std::vector<std::string>& args, bool joiner = false,
                      const std::string& token = "elastic-test-token") {
    const int world = std::max(world_, rank + 1);  // a joiner's launch slot may be a new one
    std::vector<std::string> argv = {ELASTIC_RANK, "--steps", std::to_string(kSteps), "--out",
                                     out_path()};
    argv.insert(argv.end(), args.begin(), args.end());
    // The test's own variables first: the first of two equal names is the one a member reads.
    std::vector<std::string> env = extra_env_;
    env.insert(env.end(),
               {"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(server_.port()),
                "RANK=" + std::to_string(rank), "WORLD_SIZE=" + std::to_string(world),
                "LOCAL_RANK=" + std::to_string(rank), "LOCAL_WORLD_SIZE=" + std::to_string(world),
                "COHORT_STORE_HOSTED=1", "COHORT_JOB_TOKEN=" + token,
                "COHORT_ELASTIC_MIN_RANKS=" + std::to_string(min_ranks_),
                "COHORT_ELASTIC_SETTLE_MS=1000", "OMP_NUM_THREADS=1"});
    if (joiner) env.push_back("ELASTIC_TEST_JOINER=1");
    members_.push_back(std::make_unique<ChildProcess>(argv, env));
    return *members_.back();
  }

  void start_all(const std::vector<std::string>& args) {
    for (int r = 0; r < world_; ++r) start(r, args);
  }

  // Waits for every member; returns their exit codes in start order.
  std::vector<int> wait_all() {
    std::vector<int> codes;
    for (auto& member : members_) codes.push_back(member->wait(kDeadline));
    return codes;
  }

  std::string output() const {
    std::string all;
    for (size_t i = 0; i < members_.size(); ++i) {
      all += "--- member " + std::to_string(i) + "\n" + members_[i]->output();
    }
    return all;
  }
  ChildProcess& member(size_t i) { return *members_[i]; }
  std::string out_path() const { return dir_ + "/params.bin"; }
  std::string checkpoint_dir() const { return dir_ + "/checkpoint"; }

 private:
  int world_, min_ranks_;
  std::vector<std::string> extra_env_;
  TcpStoreServer server_;
  std::string dir_;
  std::vector<std::unique_ptr<ChildProcess>> members_;
  static inline int jobs_made_ = 0;  // a test may run two jobs, each with a directory
};

}  // namespace cohort::testing
