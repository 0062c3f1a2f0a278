#include "cohort/comm/job_store.h"

#include <algorithm>
#include <utility>

#include "cohort/comm/etcd_store.h"
#include "cohort/comm/prefix_store.h"
#include "cohort/comm/tcp_store.h"

namespace cohort {

std::string etcd_job_prefix(const std::string& job_id) {
  return "/cohort/" + job_id + "/";
}

std::shared_ptr<Store> connect_job_store(const LaunchEnv& env, const GroupOptions& group,
                                         bool serve) {
  // Unresolved options (timeout 0) mean the store's default.
  const Milliseconds timeout = group.timeout.count() > 0 ? group.timeout : Store::kDefaultTimeout;
  std::shared_ptr<Store> store;
  if (env.rdzv_backend == "etcd") {
    EtcdStoreOptions etcd;
    etcd.endpoints = parse_etcd_endpoints(env.rdzv_endpoints);
    etcd.prefix = etcd_job_prefix(env.job_id);
    etcd.token = group.job_token;
    etcd.timeout = timeout;
    // Waiting for etcd is waiting for a peer: no longer than a collective would.
    etcd.unavailable_timeout = std::min(etcd.unavailable_timeout, timeout);
    store = std::make_shared<EtcdStore>(etcd);
  } else {
    TcpStoreOptions tcp;
    tcp.host = env.master_addr;
    tcp.port = env.master_port;
    tcp.is_server = serve;
    tcp.timeout = timeout;
    tcp.token = group.job_token;
    store = std::make_shared<TcpStore>(tcp);
  }
  if (!env.store_prefix.empty()) {
    store = std::make_shared<PrefixStore>(env.store_prefix, std::move(store));
  }
  return store;
}

}  // namespace cohort
