#include "rank_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "cohort/core/error.h"

namespace cohort::run {

namespace {

struct Pipe {
  int read = -1;
  int write = -1;
};

Pipe make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw Error(std::string("cannot start a rank: pipe failed: ") + std::strerror(errno));
  }
  return {fds[0], fds[1]};
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Runs in the child between fork() and execve(): only async-signal-safe calls, since other
// threads of cohortrun (the store server's) may have held locks at fork time. On failure the
// errno goes to `exec_error` (close-on-exec, so the parent reads EOF when execve succeeds).
[[noreturn]] void exec_rank(pid_t parent, char* const argv[], char* const envp[], const Pipe& out,
                            const Pipe& err, int exec_error) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);  // cohortrun died before prctl
  ::dup2(out.write, STDOUT_FILENO);
  ::dup2(err.write, STDERR_FILENO);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::signal(SIGPIPE, SIG_DFL);  // cohortrun ignores it, and exec keeps ignored signals ignored
  ::execve(argv[0], argv, envp);
  const int error = errno;
  ssize_t ignored = ::write(exec_error, &error, sizeof error);
  (void)ignored;
  ::_exit(127);
}

std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (const std::string& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

}  // namespace

RankProcess::RankProcess(int rank, const std::vector<std::string>& argv,
                         const std::vector<std::string>& env)
    : rank_(rank) {
  Pipe out = make_pipe(), err = make_pipe(), exec_error = make_pipe();
  const std::vector<char*> c_argv = c_strings(argv), c_env = c_strings(env);
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ == 0) exec_rank(parent, c_argv.data(), c_env.data(), out, err, exec_error.write);
  const int fork_errno = errno;
  close_fd(out.write);
  close_fd(err.write);
  close_fd(exec_error.write);
  stdout_fd_ = out.read;
  stderr_fd_ = err.read;
  if (pid_ < 0) {
    close_fd(exec_error.read);
    throw Error("cannot start rank " + std::to_string(rank) +
                ": fork failed: " + std::strerror(fork_errno));
  }
  running_ = true;
  ::setpgid(pid_, pid_);  // also here, so that signal() reaches the group before exec
  int child_errno = 0;
  const ssize_t n = ::read(exec_error.read, &child_errno, sizeof child_errno);
  close_fd(exec_error.read);
  if (n == sizeof child_errno) {
    ::waitpid(pid_, &status_, 0);
    running_ = false;
    throw Error("cannot run '" + argv[0] + "' as rank " + std::to_string(rank) + ": " +
                std::strerror(child_errno));
  }
}

RankProcess::~RankProcess() {
  if (running_) {
    ::kill(-pid_, SIGKILL);
    ::waitpid(pid_, &status_, 0);
  }
  close_fd(stdout_fd_);
  close_fd(stderr_fd_);
}

int RankProcess::take(int& fd) {
  const int taken = fd;
  fd = -1;
  return taken;
}

void RankProcess::signal(int signal) {
  if (!running_) return;
  ::kill(-pid_, signal);
  // A stopped process acts on no signal but SIGKILL until it is continued.
  if (stop_signal_ != 0 && signal != SIGKILL) ::kill(-pid_, SIGCONT);
}

bool RankProcess::reap() {
  int status = 0;
  while (running_ && ::waitpid(pid_, &status, WNOHANG | WUNTRACED | WCONTINUED) == pid_) {
    if (WIFSTOPPED(status)) {
      stop_signal_ = WSTOPSIG(status);
    } else if (WIFCONTINUED(status)) {
      stop_signal_ = 0;
    } else {
      status_ = status;
      running_ = false;
    }
  }
  return !running_;
}

bool RankProcess::failed() const {
  return !running_ && status_ != 0;
}

bool RankProcess::killed_by_signal() const {
  return !running_ && WIFSIGNALED(status_);
}

int RankProcess::exit_code() const {
  if (WIFSIGNALED(status_)) return 128 + WTERMSIG(status_);
  return WIFEXITED(status_) ? WEXITSTATUS(status_) : 1;
}

std::string RankProcess::describe() const {
  if (running_) return "is still running";
  if (WIFSIGNALED(status_)) {
    const int sig = WTERMSIG(status_);
    return "was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return "exited with code " + std::to_string(WEXITSTATUS(status_));
}

}  // namespace cohort::run
