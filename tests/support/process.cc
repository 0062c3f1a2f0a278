#include "support/process.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "net/socket.h"

namespace cohort::testing {

namespace {
using Clock = std::chrono::steady_clock;
}

ChildProcess::ChildProcess(const std::vector<std::string>& argv,
                           const std::vector<std::string>& extra_env) {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  // Build argv/envp before fork: the child may only call async-signal-safe functions.
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  for (const auto& e : extra_env) env_strings.push_back(e);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    dup2(pipe_fds[1], STDOUT_FILENO);
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  close(pipe_fds[1]);
  stdout_fd_ = pipe_fds[0];
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(other.pid_),
      stdout_fd_(other.stdout_fd_),
      output_(std::move(other.output_)),
      scanned_(other.scanned_),
      status_(other.status_) {
  other.pid_ = -1;
  other.stdout_fd_ = -1;
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && status_ < 0) {
    ::kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (stdout_fd_ >= 0) close(stdout_fd_);
}

bool ChildProcess::read_more(std::chrono::milliseconds timeout) {
  if (stdout_fd_ < 0) return false;
  pollfd p{stdout_fd_, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return false;
  char buffer[4096];
  const ssize_t n = read(stdout_fd_, buffer, sizeof buffer);
  if (n <= 0) {
    close(stdout_fd_);
    stdout_fd_ = -1;
    return false;
  }
  output_.append(buffer, static_cast<size_t>(n));
  return true;
}

std::string ChildProcess::wait_for_line(const std::string& prefix,
                                        std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    size_t line_end;
    while ((line_end = output_.find('\n', scanned_)) != std::string::npos) {
      const std::string line = output_.substr(scanned_, line_end - scanned_);
      scanned_ = line_end + 1;
      if (line.rfind(prefix, 0) == 0) return line;
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return "";
    if (!read_more(left) && stdout_fd_ < 0) return "";
  }
}

int ChildProcess::wait(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  // The child's exit is an event on its pidfd; its output on the pipe. Waiting on both keeps
  // the pipe drained (a child blocked on a full pipe never exits) without a polling interval.
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
  while (status_ < 0) {
    while (read_more(std::chrono::milliseconds(0))) {
    }
    int raw = 0;
    const pid_t done = waitpid(pid_, &raw, WNOHANG);
    if (done == pid_) {
      status_ = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
      break;
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    pollfd fds[2] = {{stdout_fd_, POLLIN, 0}, {pidfd, POLLIN, 0}};
    // Without a pidfd (kernels before 5.3) the wait falls back to looking every 10 ms.
    const int wait_ms = pidfd < 0 ? std::min<int>(10, static_cast<int>(left.count()))
                                  : static_cast<int>(left.count());
    ::poll(fds, 2, wait_ms);  // a negative fd is skipped; EINTR just looks again
  }
  if (pidfd >= 0) ::close(pidfd);
  if (status_ < 0) return -1;
  while (read_more(std::chrono::milliseconds(0))) {
  }
  return status_;
}

void ChildProcess::kill(int signal) {
  if (pid_ > 0 && status_ < 0) ::kill(pid_, signal);
}

ShellResult run_shell(const std::string& command, const std::vector<std::string>& extra_env,
                      std::chrono::milliseconds deadline) {
  ChildProcess child({"/bin/sh", "-c", "exec " + command + " 2>&1"}, extra_env);
  ShellResult result;
  result.exit_code = child.wait(deadline);
  result.output = child.output();
  return result;
}

std::string fresh_temp_dir(const std::string& name) {
  const std::string dir =
      ::testing::TempDir() + "cohort_" + name + "_" + std::to_string(::getpid());
  const std::string command = "rm -rf '" + dir + "' && mkdir -p '" + dir + "'";
  if (std::system(command.c_str()) != 0) throw std::runtime_error("cannot create " + dir);
  return dir;
}

std::set<std::string> shm_segments_of(pid_t creator) {
  std::ostringstream pid;
  pid << "-" << std::hex << creator << "-";
  std::set<std::string> names;
  if (DIR* dir = ::opendir("/dev/shm")) {
    while (dirent* entry = ::readdir(dir)) {
      const std::string name = entry->d_name;
      if (name.rfind("cohort-", 0) == 0 && name.find(pid.str()) != std::string::npos) {
        names.insert(name);
      }
    }
    ::closedir(dir);
  }
  return names;
}

uint16_t free_port() {
  return net::Listener::bind("127.0.0.1", 0).port();
}

}  // namespace cohort::testing
