// An etcd cluster for tests: `members` etcd processes (Debian's etcd-server, which
// scripts/setup installs) on loopback ports, with fast elections (heartbeat 50 ms, election
// timeout 500 ms), logging to files in their data directory. Killed when destroyed.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "support/process.h"

namespace cohort::testing {

class EtcdCluster {
 public:
  // Starts the members and waits (up to a minute) until the cluster answers; throws
  // std::runtime_error when etcd is missing or never answers.
  explicit EtcdCluster(int members = 3);
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  // "127.0.0.1:p1,127.0.0.1:p2,..." (COHORT_RDZV_ENDPOINTS, cohortrun --rdzv-endpoints).
  std::string endpoints() const;
  std::vector<std::string> endpoint_list() const { return clients_; }
  // SIGKILLs member `index` and waits for it to exit.
  void kill(int index);

 private:
  std::string directory_;
  std::vector<std::string> clients_;
  std::vector<std::unique_ptr<ChildProcess>> members_;
};

}  // namespace cohort::testing
