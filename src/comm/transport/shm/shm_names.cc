#include "transport/shm/shm_names.h"

#include <functional>
#include <sstream>

namespace cohort {

std::string shm_job_prefix(const std::string& job_token) {
  std::ostringstream name;
  name << "/cohort-" << std::hex << (std::hash<std::string>{}(job_token)&0xffffffffu) << "-";
  return name.str();
}

std::string shm_segment_name(const std::string& job_token, pid_t creator, uint64_t nonce) {
  std::ostringstream name;
  name << shm_job_prefix(job_token) << std::hex << creator << "-" << nonce;
  return name.str();
}

}  // namespace cohort
