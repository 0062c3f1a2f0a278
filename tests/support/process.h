// Starting and watching child processes in multi-process tests. Every wait has a deadline;
// children still running when a ChildProcess is destroyed are killed.
#pragma once

#include <cstdint>

#include <sys/types.h>

#include <chrono>
#include <set>
#include <string>
#include <vector>

namespace cohort::testing {

class ChildProcess {
 public:
  // Starts argv[0] with argv and the current environment plus `extra_env` ("K=V").
  ChildProcess(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env);
  ~ChildProcess();
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Reads stdout until a line starting with `prefix` arrives; returns it, or "" at the timeout
  // or end of output.
  std::string wait_for_line(const std::string& prefix, std::chrono::milliseconds timeout);
  // Waits for exit; returns the exit status (or 128 + signal), or -1 at the timeout.
  int wait(std::chrono::milliseconds timeout);
  void kill(int signal);
  // Everything read from stdout so far.
  const std::string& output() const { return output_; }

 private:
  bool read_more(std::chrono::milliseconds timeout);

  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  std::string output_;
  size_t scanned_ = 0;
  int status_ = -1;
};

// Runs `command` with /bin/sh, stderr folded into stdout, with the current environment plus
// `extra_env`; returns its exit code (-1 when it ran past `deadline` and was killed) and output.
struct ShellResult {
  int exit_code = -1;
  std::string output;
};
ShellResult run_shell(const std::string& command, const std::vector<std::string>& extra_env,
                      std::chrono::milliseconds deadline);

// The names in /dev/shm that cohort made for a window whose creator (local rank 0) has pid
// `creator`: "cohort-<token>-<pid>-<nonce>", hex (shm_names.h). Other tests running beside
// (ctest -j) make names of their own, so tests look only at their own ranks'.
std::set<std::string> shm_segments_of(pid_t creator);

// A new empty directory under the test temporary directory, named after `name` and this
// process.
std::string fresh_temp_dir(const std::string& name);

// A TCP port on loopback that was free a moment ago (for MASTER_PORT).
uint16_t free_port();

}  // namespace cohort::testing
