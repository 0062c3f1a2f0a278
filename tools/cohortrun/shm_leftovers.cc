#include "shm_leftovers.h"

#include <dirent.h>
#include <signal.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "transport/shm/shm_names.h"

namespace cohort::run {

namespace {

constexpr const char* kShmDirectory = "/dev/shm";

// The creator's pid in "<prefix><pid in hex>-<nonce>", or 0 when the rest is not of that form.
pid_t creator_of(const std::string& rest) {
  char* end = nullptr;
  const unsigned long pid = std::strtoul(rest.c_str(), &end, 16);
  if (end == rest.c_str() || *end != '-' || pid == 0) return 0;
  return static_cast<pid_t>(pid);
}

bool process_is_gone(pid_t pid) {
  return ::kill(pid, 0) != 0 && errno == ESRCH;
}

}  // namespace

std::vector<std::string> remove_shm_leftovers(const std::string& job_token) {
  std::vector<std::string> removed;
  const std::string prefix = shm_job_prefix(job_token).substr(1);  // without the leading '/'
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(kShmDirectory), &::closedir);
  if (!dir) return removed;  // no /dev/shm: nothing can be left there
  for (dirent* entry; (entry = ::readdir(dir.get())) != nullptr;) {
    const std::string name = entry->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const pid_t creator = creator_of(name.substr(prefix.size()));
    if (creator == 0 || !process_is_gone(creator)) continue;
    if (::shm_unlink(("/" + name).c_str()) == 0) removed.push_back("/" + name);
  }
  return removed;
}

void remove_shm_leftovers_and_say(const std::string& job_token) {
  for (const std::string& name : remove_shm_leftovers(job_token)) {
    std::fprintf(stderr, "cohortrun: removed /dev/shm%s, left by a rank that was stopped\n",
                 name.c_str());
  }
}

}  // namespace cohort::run
