// One rank started by cohortrun: a child process in a process group of its own (so a signal
// reaches whatever the rank started too), with its stdout and stderr on pipes that cohortrun
// relays, and which dies with cohortrun (PR_SET_PDEATHSIG).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace cohort::run {

class RankProcess {
 public:
  // Starts `argv` (argv[0] a path) with exactly `env` ("K=V" entries). Throws Error when the
  // process cannot be started or the program cannot be executed (naming it and why).
  RankProcess(int rank, const std::vector<std::string>& argv, const std::vector<std::string>& env);
  // Kills the process group and reaps the rank if it still runs.
  ~RankProcess();
  RankProcess(const RankProcess&) = delete;
  RankProcess& operator=(const RankProcess&) = delete;

  int rank() const { return rank_; }
  pid_t pid() const { return pid_; }
  // The read ends of the rank's stdout and stderr; the caller takes them (and closes them).
  int take_stdout() { return take(stdout_fd_); }
  int take_stderr() { return take(stderr_fd_); }

  // Sends `signal` to the rank's process group.
  void signal(int signal);
  // Collects the exit status if the rank has exited; true once it has. Also notes whether a
  // running rank is stopped (SIGSTOP, SIGTSTP, ...) or was continued.
  bool reap();
  bool running() const { return running_; }
  // The signal that stopped the running rank, or 0 when it is not stopped.
  int stop_signal() const { return running_ ? stop_signal_ : 0; }

  // After reap(): whether it ended badly (non-zero exit or a signal), the code a shell would
  // report (the exit code, or 128 + signal), and "exited with code 3" / "was killed by
  // signal 9 (Killed)".
  bool failed() const;
  bool killed_by_signal() const;
  int exit_code() const;
  std::string describe() const;

 private:
  static int take(int& fd);

  int rank_;
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  int stderr_fd_ = -1;
  bool running_ = false;
  int status_ = 0;
  int stop_signal_ = 0;
};

}  // namespace cohort::run
