// Keeps a shared-memory name from outliving the creation of a window, however creation ends
// (Note [Shared-memory lifetime] in shm_window.h).
#pragma once

#include <string>

namespace cohort {

// While a guard watches a name, a SIGTERM, SIGINT or SIGHUP that would end the process (their
// handler is the default one) first removes the name from /dev/shm, then ends the process as
// the signal would have. The destructor removes the name unless release() was called. Names
// are those of ShmSegment (a leading '/', at most 200 characters); several guards, in several
// threads, may watch at once.
class ShmNameGuard {
 public:
  ShmNameGuard() = default;
  ~ShmNameGuard();
  ShmNameGuard(const ShmNameGuard&) = delete;
  ShmNameGuard& operator=(const ShmNameGuard&) = delete;

  // Starts watching `name` (a guard watches one name at most). Never throws: when the
  // process-wide table is full, the name is only removed by the destructor.
  void watch(const std::string& name) noexcept;
  // Stops watching without removing the name (a name that is not ours).
  void release() noexcept;

 private:
  std::string name_;
  int slot_ = -1;  // in the process-wide table the signal handler reads, or -1
};

}  // namespace cohort
