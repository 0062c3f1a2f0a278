// The etcd lease a job's keys hang on (EtcdStoreOptions::lease_ttl, Note [etcd lease] in
// etcd_store.cc): granting, revoking, and a thread that renews it while its store lives.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "rendezvous/etcd_client.h"

namespace cohort::detail {

// A new lease of `ttl` (whole seconds): its id. StoreError as EtcdClient::post.
std::string grant_etcd_lease(EtcdClient& client, Milliseconds ttl);
// Revokes it (and deletes the keys on it). StoreError as EtcdClient::post.
void revoke_etcd_lease(EtcdClient& client, const std::string& id);
// Renews it once: false when etcd says it has expired. StoreError as EtcdClient::post.
bool renew_etcd_lease(EtcdClient& client, const std::string& id);

class EtcdLeaseKeeper {
 public:
  // Renews lease `id` every third of `ttl` on a thread of its own until destroyed. A renewal
  // that no member answers is tried again at the next one (the store's own calls report the
  // cluster unavailable); one that finds the lease expired sets expired().
  EtcdLeaseKeeper(EtcdClient& client, std::string id, Milliseconds ttl);
  ~EtcdLeaseKeeper();
  EtcdLeaseKeeper(const EtcdLeaseKeeper&) = delete;
  EtcdLeaseKeeper& operator=(const EtcdLeaseKeeper&) = delete;

  bool expired() const { return expired_; }

 private:
  void run();

  EtcdClient& client_;
  const std::string id_;
  const Milliseconds interval_;
  std::atomic<bool> expired_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace cohort::detail
