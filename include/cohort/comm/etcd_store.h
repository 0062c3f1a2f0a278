// A rendezvous store on etcd v3: the job's keys live in a highly available cluster that
// already exists, so that no node of the job (not the one that started it either) holds the
// store, and losing any node costs an elastic job what losing any other does. docs/store.md,
// "etcd".
//
//   cohort::EtcdStoreOptions options;
//   options.endpoints = cohort::parse_etcd_endpoints("h1:2379,h2:2379,h3:2379");
//   options.prefix = "/cohort/" + job_id + "/";
//   auto store = std::make_shared<cohort::EtcdStore>(options);
//
// Launched ranks get one from the environment instead (COHORT_RDZV_BACKEND=etcd,
// COHORT_RDZV_ENDPOINTS; cohort::init and cohort::init_elastic), as cohortrun --rdzv-backend
// etcd sets it. Every call tries the endpoint that last answered, then the others; a call that
// no member answers within EtcdStoreOptions::unavailable_timeout (a cluster that lost its
// quorum answers none) throws StoreError naming etcd and the endpoints. The keys live as long
// as some process of the job keeps their lease alive (EtcdStoreOptions::lease_ttl).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cohort/comm/store.h"

namespace cohort {

struct EtcdStoreOptions {
  // The cluster's client endpoints, "host:port" or "http://host:port"; at least one.
  std::vector<std::string> endpoints;
  // Every key of this store is under it (a job's: "/cohort/<job id>/"); not empty.
  std::string prefix;
  // The job's secret (empty: COHORT_JOB_TOKEN). The first store of a prefix records it there;
  // a store made with another token is refused with StoreError, so that a member cannot join
  // another job's keys by mistake. (etcd's own authentication and TLS are what keep others out
  // of the cluster: cohort's token is stored in it.)
  std::string token;
  // The default timeout of get() and wait().
  Milliseconds timeout = Store::kDefaultTimeout;
  // One request to one endpoint: past it, the next endpoint is tried.
  Milliseconds request_timeout{2'000};
  // How long a call goes on trying the endpoints (an election after a member died takes about
  // a second) before it throws StoreError.
  Milliseconds unavailable_timeout{15'000};
  // The job's keys hang on one etcd lease, which every store of the prefix keeps alive (every
  // third of it) while it exists: when no process of the job has renewed it for this long,
  // etcd deletes them, so a finished or crashed job leaves nothing behind, and a job started
  // again under the same prefix after that starts afresh. A store that finds its lease expired
  // throws StoreError from then on. Whole seconds, at least 1 s; 0: no lease (the keys stay
  // until deleted).
  Milliseconds lease_ttl{30'000};
};

// "h1:2379,h2:2379" -> {"h1:2379", "h2:2379"}; ConfigError for an empty list or entry.
std::vector<std::string> parse_etcd_endpoints(const std::string& list);

// Whether this cohort was built with libcurl, which EtcdStore talks to etcd through.
bool etcd_store_built();

class EtcdStore : public Store {
 public:
  // Joins the prefix's lease (granting it when it is the first), then checks the token against
  // the one recorded under the prefix (recording it when it is the first). Throws ConfigError
  // for bad options (or a build without libcurl), StoreError when etcd cannot be reached or
  // the token differs.
  explicit EtcdStore(EtcdStoreOptions options);
  ~EtcdStore() override;

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  void wait(const std::vector<std::string>& keys, Milliseconds timeout) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;

  using Store::get;
  using Store::set;
  using Store::wait;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort
