// Shared-memory segments that a job's ranks left in /dev/shm. A group's segment has a name in
// /dev/shm only while its ranks attach (Note [Shared-memory lifetime] in
// src/comm/transport/shm/shm_window.h); a rank killed in that window can leave it behind, and
// every restart opens the window again. So after every attempt, once its ranks are reaped,
// cohortrun removes the job's segments whose creator is gone.
#pragma once

#include <string>
#include <vector>

namespace cohort::run {

// Removes every /dev/shm entry of the job with `job_token` (its name starts with
// shm_job_prefix) whose creating process no longer exists; returns the names removed. A
// segment of another job with the same token whose creator still runs is left alone.
std::vector<std::string> remove_shm_leftovers(const std::string& job_token);

// remove_shm_leftovers, saying on stderr what it removed.
void remove_shm_leftovers_and_say(const std::string& job_token);

}  // namespace cohort::run
