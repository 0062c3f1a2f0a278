// The names of a job's shared-memory segments in /dev/shm (Note [Shared-memory lifetime] in
// shm_window.h): "/cohort-<token hash>-<creator pid>-<nonce>". The part before the pid is the
// same for every segment of one job, so a launcher that reaped a job's ranks can find what a
// rank killed mid-creation left behind.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace cohort {

// "/cohort-<32 bits of the token's hash, hex>-": the start of every segment name of the job
// whose COHORT_JOB_TOKEN is `job_token`.
std::string shm_job_prefix(const std::string& job_token);

// The name of a segment created by process `creator` with `nonce`.
std::string shm_segment_name(const std::string& job_token, pid_t creator, uint64_t nonce);

}  // namespace cohort
