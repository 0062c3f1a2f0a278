#include "launch.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "cohort/comm/launch_env.h"
#include "cohort/comm/tcp_store.h"
#include "cohort/core/error.h"
#include "ranks.h"

extern char** environ;

namespace cohort::bench {

namespace {

constexpr Milliseconds kPollInterval{50};

struct Child {
  int rank = 0;
  pid_t pid = -1;
  bool running = true;
  bool killed = false;  // by us, after the grace period
  int status = 0;       // from waitpid
};

std::string self_executable() {
  char path[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return "/proc/self/exe";
  path[n] = '\0';
  return path;
}

// Our environment without the variables we set, plus the launcher variables of one rank.
std::vector<std::string> child_environment(int rank, int ranks, uint16_t port,
                                           const std::string& token) {
  const std::vector<std::string> set = {
      std::string(kEnvRank) + "=" + std::to_string(rank),
      std::string(kEnvWorldSize) + "=" + std::to_string(ranks),
      "LOCAL_RANK=" + std::to_string(rank),
      "LOCAL_WORLD_SIZE=" + std::to_string(ranks),
      std::string(kEnvMasterAddr) + "=127.0.0.1",
      std::string(kEnvMasterPort) + "=" + std::to_string(port),
      std::string(kEnvStoreHosted) + "=1",
      "COHORT_JOB_TOKEN=" + token,
      "COHORT_HOST=127.0.0.1",
  };
  auto overridden = [&](const std::string& entry) {
    const std::string name = entry.substr(0, entry.find('=') + 1);
    return std::any_of(set.begin(), set.end(),
                       [&](const std::string& s) { return s.compare(0, name.size(), name) == 0; });
  };
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!overridden(*e)) env.emplace_back(*e);
  }
  env.insert(env.end(), set.begin(), set.end());
  return env;
}

// Starts one rank. Everything the child needs is built before fork(): the store server's
// threads may hold locks (malloc's too), so the child makes only async-signal-safe calls.
pid_t spawn(const std::string& exe, char** argv, std::vector<std::string>& env) {
  std::vector<char*> envp;
  for (auto& entry : env) envp.push_back(entry.data());
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    throw Error(std::string("cannot start a rank: fork failed: ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(kExitFailure);  // the parent died before prctl
    ::execve(exe.c_str(), argv, envp.data());
    static const char kMessage[] = "cohort-bench: cannot start a rank: execve failed\n";
    ssize_t ignored = ::write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
    (void)ignored;
    ::_exit(127);
  }
  return pid;
}

void kill_all(std::vector<Child>& children) {
  for (Child& c : children) {
    if (!c.running) continue;
    ::kill(c.pid, SIGKILL);
    ::waitpid(c.pid, &c.status, 0);
    c.running = false;
    c.killed = true;
  }
}

// Reaps the children that exited; returns the rank of one that just did, or -1.
int reap(std::vector<Child>& children) {
  int exited = -1;
  for (Child& c : children) {
    if (c.running && ::waitpid(c.pid, &c.status, WNOHANG) == c.pid) {
      c.running = false;
      exited = c.rank;
    }
  }
  return exited;
}

bool any_running(const std::vector<Child>& children) {
  return std::any_of(children.begin(), children.end(), [](const Child& c) { return c.running; });
}

std::string running_ranks(const std::vector<Child>& children) {
  std::string out;
  for (const Child& c : children) {
    if (c.running) out += (out.empty() ? "" : ",") + std::to_string(c.rank);
  }
  return out;
}

void supervise(std::vector<Child>& children, Milliseconds grace) {
  int first_exit = -1;
  Clock::time_point first_exit_at;
  while (any_running(children)) {
    const int exited = reap(children);
    if (first_exit < 0 && exited >= 0) {
      first_exit = exited;
      first_exit_at = Clock::now();
    }
    if (first_exit >= 0 && any_running(children) && Clock::now() - first_exit_at > grace) {
      std::fprintf(stderr, "cohort-bench: rank(s) %s still running %lld s after rank %d exited: "
                   "killing them\n", running_ranks(children).c_str(),
                   static_cast<long long>(grace.count() / 1000), first_exit);
      kill_all(children);
    }
    if (any_running(children)) std::this_thread::sleep_for(kPollInterval);
  }
}

int exit_code(const Child& c) {
  if (c.killed || !WIFEXITED(c.status)) return kExitFailure;
  const int code = WEXITSTATUS(c.status);
  return code <= kExitFailure ? code : kExitFailure;
}

std::string describe(const Child& c) {
  if (c.killed) return "was killed after the others had exited";
  if (WIFSIGNALED(c.status)) {
    return "was killed by signal " + std::to_string(WTERMSIG(c.status)) + " (" +
           strsignal(WTERMSIG(c.status)) + ")";
  }
  return "exited with code " + std::to_string(WEXITSTATUS(c.status));
}

int summarize(const std::vector<Child>& children) {
  int code = kExitOk;
  for (const Child& c : children) {
    code = std::max(code, exit_code(c));
    if (exit_code(c) > kExitWrong) {
      std::fprintf(stderr, "cohort-bench: rank %d %s\n", c.rank, describe(c).c_str());
    }
  }
  if (code == kExitWrong) std::fprintf(stderr, "cohort-bench: wrong results (see #wrong)\n");
  return code;
}

}  // namespace

int launch_local_ranks(const BenchConfig& config, char** argv) {
  const std::string token = random_job_token();
  TcpStoreServerOptions server_options;
  server_options.bind_host = "127.0.0.1";
  server_options.port = 0;
  server_options.token = token;
  TcpStoreServer server(server_options);
  const std::string exe = self_executable();
  std::fflush(stdout);  // nothing of ours may be pending when the children start writing
  std::vector<Child> children;
  try {
    for (int r = 0; r < config.ranks; ++r) {
      auto env = child_environment(r, config.ranks, server.port(), token);
      children.push_back(Child{r, spawn(exe, argv, env)});
    }
  } catch (...) {
    kill_all(children);
    throw;
  }
  supervise(children, watchdog_window(config) + Milliseconds(5'000));
  return summarize(children);
}

}  // namespace cohort::bench
