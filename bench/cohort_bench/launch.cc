#include "launch.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ranks.h"


namespace cohort::bench {

namespace {

std::string self_executable() {
  char path[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return "/proc/self/exe";
  path[n] = '\0';
  return path;
}

// COHORTRUN, else bin/cohortrun beside this executable, else "cohortrun" (looked up on PATH).
std::string cohortrun_path(const std::string& self) {
  if (const char* named = std::getenv(kEnvCohortrun); named != nullptr && *named != '\0') {
    return named;
  }
  const std::string beside = self.substr(0, self.rfind('/') + 1) + "cohortrun";
  return ::access(beside.c_str(), X_OK) == 0 ? beside : "cohortrun";
}

int exit_code(int status) {
  if (!WIFEXITED(status)) return kExitFailure;
  const int code = WEXITSTATUS(status);
  return code == kExitOk || code == kExitWrong ? code : kExitFailure;
}

}  // namespace

int launch_local_ranks(const BenchConfig& config, char** argv) {
  const std::string self = self_executable();
  const std::string launcher = cohortrun_path(self);
  // A rank that fails makes cohortrun stop the others; a rank stuck for good is ended by its
  // own watchdog (watchdog.h), so the launcher needs no deadline of its own.
  std::vector<std::string> args = {launcher, "--no-prefix", "--nproc-per-node",
                                   std::to_string(config.ranks), self};
  for (char** a = argv + 1; *a != nullptr; ++a) args.emplace_back(*a);
  std::vector<char*> raw;
  for (auto& a : args) raw.push_back(a.data());
  raw.push_back(nullptr);
  std::fflush(stdout);  // nothing of ours may be pending when the ranks start writing
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    std::fprintf(stderr, "cohort-bench: cannot start the ranks: fork failed: %s\n",
                 std::strerror(errno));
    return kExitFailure;
  }
  if (pid == 0) {
    // cohortrun stops its ranks on SIGTERM: sent when cohort-bench dies, however it dies, so
    // an interrupted run leaves nothing behind.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(kExitFailure);  // the parent died before prctl
    ::execvp(raw[0], raw.data());
    static const char kMessage[] =
        "cohort-bench: cannot start cohortrun to launch the ranks (build the cohortrun target, "
        "or name one in COHORTRUN)\n";
    ssize_t ignored = ::write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
    (void)ignored;
    ::_exit(kExitFailure);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return kExitFailure;
  }
  const int code = exit_code(status);
  if (code == kExitWrong) std::fprintf(stderr, "cohort-bench: wrong results (see #wrong)\n");
  return code;
}

}  // namespace cohort::bench
