#include "rendezvous/etcd_lease.h"

#include <algorithm>
#include <utility>

#include "cohort/core/error.h"

namespace cohort::detail {

std::string grant_etcd_lease(EtcdClient& client, Milliseconds ttl) {
  const auto seconds = std::max<int64_t>(1, ttl.count() / 1000);
  const nlohmann::json answer = client.post("/v3/lease/grant", {{"TTL", std::to_string(seconds)}},
                                            "granting the job's lease");
  return answer.at("ID").get<std::string>();
}

void revoke_etcd_lease(EtcdClient& client, const std::string& id) {
  client.post("/v3/kv/lease/revoke", {{"ID", id}}, "revoking a lease");
}

bool renew_etcd_lease(EtcdClient& client, const std::string& id) {
  // The gateway answers a keep-alive stream of one request with one result; an expired lease's
  // result has no TTL (0 is left out of the JSON).
  const nlohmann::json answer =
      client.post("/v3/lease/keepalive", {{"ID", id}}, "renewing the job's lease");
  const nlohmann::json result = answer.value("result", nlohmann::json::object());
  return std::stoll(result.value("TTL", "0")) > 0;
}

EtcdLeaseKeeper::EtcdLeaseKeeper(EtcdClient& client, std::string id, Milliseconds ttl)
    : client_(client), id_(std::move(id)), interval_(std::max(Milliseconds(1), ttl / 3)) {
  thread_ = std::thread([this] { run(); });
}

EtcdLeaseKeeper::~EtcdLeaseKeeper() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void EtcdLeaseKeeper::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, interval_, [this] { return stopping_; })) {
    lock.unlock();
    try {
      if (!renew_etcd_lease(client_, id_)) expired_ = true;
    } catch (const Error&) {
      // Unanswered: the store's next call says so; renewing goes on.
    }
    lock.lock();
    if (expired_) return;
  }
}

}  // namespace cohort::detail
