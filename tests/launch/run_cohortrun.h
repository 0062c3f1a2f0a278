// What the cohortrun tests share: starting cohortrun as a child process, and reading the ranks'
// pids from its output to check that none is left behind.
#pragma once

#include <errno.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <regex>
#include <string>
#include <vector>

#include "support/process.h"

namespace cohort {

constexpr std::chrono::seconds kDeadline{60};

// cohortrun with its stderr folded into stdout, so the test sees the summary too.
inline testing::ChildProcess cohortrun(const std::vector<std::string>& args,
                                       const std::vector<std::string>& env = {}) {
  std::string command = "exec " COHORTRUN;
  for (const std::string& a : args) command += " '" + a + "'";
  return testing::ChildProcess({"/bin/sh", "-c", command + " 2>&1"}, env);
}

inline std::vector<int> printed_pids(const std::string& output) {
  std::vector<int> pids;
  const std::regex line(R"(\] pid (\d+))");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), line);
       it != std::sregex_iterator(); ++it) {
    pids.push_back(std::stoi((*it)[1]));
  }
  return pids;
}

inline void expect_all_gone(const std::vector<int>& pids) {
  for (int pid : pids) {
    EXPECT_TRUE(::kill(pid, 0) != 0 && errno == ESRCH) << "rank process " << pid << " still runs";
  }
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace cohort
