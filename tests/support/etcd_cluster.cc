#include "support/etcd_cluster.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>

#include "cohort/comm/etcd_store.h"
#include "cohort/core/error.h"

namespace cohort::testing {

EtcdCluster::EtcdCluster(int members) : directory_(fresh_temp_dir("etcd")) {
  if (::access("/usr/bin/etcd", X_OK) != 0) {
    throw std::runtime_error("/usr/bin/etcd is missing: run ./scripts/setup (etcd-server)");
  }
  std::vector<std::string> peers;
  std::string cluster;
  for (int i = 0; i < members; ++i) {
    clients_.push_back("127.0.0.1:" + std::to_string(free_port()));
    peers.push_back("http://127.0.0.1:" + std::to_string(free_port()));
    cluster += (i ? "," : "") + std::string("m") + std::to_string(i) + "=" + peers.back();
  }
  for (int i = 0; i < members; ++i) {
    const std::string name = "m" + std::to_string(i);
    const std::string data = directory_ + "/" + name;
    members_.push_back(
        std::make_unique<ChildProcess>(std::vector<std::string>{"/usr/bin/etcd",
                                                                "--name",
                                                                name,
                                                                "--data-dir",
                                                                data,
                                                                "--listen-client-urls",
                                                                "http://" + clients_[i],
                                                                "--advertise-client-urls",
                                                                "http://" + clients_[i],
                                                                "--listen-peer-urls",
                                                                peers[i],
                                                                "--initial-advertise-peer-urls",
                                                                peers[i],
                                                                "--initial-cluster",
                                                                cluster,
                                                                "--initial-cluster-state",
                                                                "new",
                                                                "--heartbeat-interval",
                                                                "50",
                                                                "--election-timeout",
                                                                "500",
                                                                "--logger",
                                                                "zap",
                                                                "--log-outputs",
                                                                data + ".log"},
                                       std::vector<std::string>{}));
  }
  // The first store of a prefix writes through the quorum: the cluster answers once it has.
  EtcdStoreOptions ready;
  ready.endpoints = clients_;
  ready.prefix = "/cohort-test-ready/";
  ready.unavailable_timeout = std::chrono::minutes(1);
  try {
    EtcdStore store(ready);
  } catch (const Error& e) {
    throw std::runtime_error(std::string("the test's etcd cluster never answered: ") + e.what() +
                             " (logs in " + directory_ + ")");
  }
}

EtcdCluster::~EtcdCluster() {
  for (auto& member : members_) {
    if (member) member->kill(SIGKILL);
  }
  members_.clear();
  std::system(("rm -rf '" + directory_ + "'").c_str());
}

std::string EtcdCluster::endpoints() const {
  std::string out;
  for (const auto& c : clients_) out += (out.empty() ? "" : ",") + c;
  return out;
}

void EtcdCluster::kill(int index) {
  members_[static_cast<size_t>(index)]->kill(SIGKILL);
  members_[static_cast<size_t>(index)]->wait(std::chrono::seconds(30));
}

}  // namespace cohort::testing
