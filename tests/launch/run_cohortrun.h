// What the cohortrun tests share: starting cohortrun as a child process, and reading the ranks'
// pids from its output to check that none is left behind.
#pragma once

#include <errno.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
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

// As expect_all_gone, for rank processes whose cohortrun was SIGKILLed a moment ago: they die
// of PR_SET_PDEATHSIG, which takes its moment. Waits (up to `timeout`) for each one's exit on
// a pidfd (readable once the process has ended, a zombie not yet reaped by init included).
inline void expect_all_end(const std::vector<int>& pids, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (int pid : pids) {
    const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (fd < 0) {
      EXPECT_EQ(errno, ESRCH) << "pidfd_open(" << pid << ")";
      continue;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p = {fd, POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, static_cast<int>(std::max<int64_t>(left.count(), 0))), 1)
        << "rank process " << pid << " still runs";
    ::close(fd);
  }
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace cohort
