// cohort::EtcdStore (include/cohort/comm/etcd_store.h).
//
// Note [Store on etcd]
// Keys: the store's key k is etcd's `<prefix>k/<k>`, and the job token is `<prefix>token`, so
// that num_keys() counts the store's keys only. Each operation maps onto etcd's API:
//  - set, delete_key: put, deleterange;
//  - get, wait: a range per key, repeated with a growing pause (2 ms to 50 ms) until the key
//    is there or the timeout passes (TimeoutError naming the missing keys, as TcpStore's);
//  - add, compare_set: read, compute, then a transaction that writes only if the key is still
//    as read (its mod_revision, or absent: create_revision 0), read again and retried when
//    another member wrote in between. So they are atomic, as the TCP store's are.
// The endpoints and their failures are EtcdClient's (Note [etcd endpoints]).
//
// Note [etcd lease]
// Every key of the prefix, `<prefix>token` included, is put with one lease, the job's, whose id
// is the key `<prefix>lease` (itself on the lease). A store reads the token before it joins the
// lease, so that another job's process refused by it does not renew this job's lease. The first
// store of the prefix grants it and records it in a transaction (a store that loses the race
// revokes its own grant and takes the recorded one); every store renews it every third of its
// TTL (EtcdLeaseKeeper) while it lives.
// So the keys live while any process of the job does and go when none has renewed the lease for
// a TTL: a finished or crashed job leaves nothing in etcd, and the prefix is free again. A store
// whose renewal found the lease expired (the whole job was stopped longer than a TTL, or etcd
// was unreachable by every member that long) throws StoreError at its next call, since the keys
// it would read are gone.
#include "cohort/comm/etcd_store.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <thread>
#include <utility>

#include "cohort/core/error.h"
#include "rendezvous/etcd_client.h"
#include "rendezvous/etcd_lease.h"
#include "rendezvous/store_table.h"

namespace cohort {
namespace {

using nlohmann::json;

// A key as read: absent, or its value and the revision of its last change.
struct Read {
  std::optional<Bytes> value;
  std::string mod_revision;
};

std::string text_of(const Bytes& bytes) {
  return std::string(bytes.begin(), bytes.end());
}

// The first key after every key that starts with `prefix` (etcd's range_end for a prefix).
std::string prefix_end(std::string prefix) {
  while (!prefix.empty() && static_cast<uint8_t>(prefix.back()) == 0xff) prefix.pop_back();
  if (!prefix.empty()) prefix.back() = static_cast<char>(prefix.back() + 1);
  return prefix;
}

}  // namespace

std::vector<std::string> parse_etcd_endpoints(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    std::string entry = list.substr(start, comma - start);
    entry.erase(0, entry.find_first_not_of(' '));
    entry.erase(entry.find_last_not_of(' ') + 1);
    if (entry.empty()) {
      throw ConfigError("etcd endpoints '" + list +
                        "': an empty entry; give host:port[,host:port...]");
    }
    out.push_back(entry);
    start = comma + 1;
  }
  return out;
}

bool etcd_store_built() {
#if COHORT_HAVE_CURL
  return true;
#else
  return false;
#endif
}

class EtcdStore::Impl {
 public:
  explicit Impl(const EtcdStoreOptions& options)
      : client_(options.endpoints, options.request_timeout, options.unavailable_timeout),
        prefix_(options.prefix) {}

  std::string key(const std::string& k) const { return prefix_ + "k/" + k; }
  std::string token_key() const { return prefix_ + "token"; }
  std::string lease_key() const { return prefix_ + "lease"; }

  // Note [etcd lease]. A recorded lease that expires between its read and its first renewal
  // has taken its key with it: the next try grants a new one.
  void join_lease(Milliseconds ttl) {
    if (ttl.count() == 0) return;  // no lease: the keys stay until deleted
    for (int attempt = 0; attempt < 3; ++attempt) {
      std::string granted;
      const Bytes recorded =
          update(lease_key(), "joining the job's lease", [&](const std::optional<Bytes>& current) {
            if (current) return std::optional<Bytes>();
            if (granted.empty()) granted = detail::grant_etcd_lease(client_, ttl);
            lease_id_ = granted;  // the lease's key hangs on it too
            return std::optional<Bytes>(to_bytes(granted));
          });
      lease_id_ = text_of(recorded);
      if (!granted.empty() && granted != lease_id_) detail::revoke_etcd_lease(client_, granted);
      if (detail::renew_etcd_lease(client_, lease_id_)) {
        lease_keeper_ = std::make_unique<detail::EtcdLeaseKeeper>(client_, lease_id_, ttl);
        return;
      }
    }
    throw StoreError("etcd store at " + endpoints() + ": the lease of '" + prefix_ +
                     "' expired each time it was joined");
  }

  // Note [etcd lease]: the keys are gone with an expired lease.
  void check_lease(const std::string& what) const {
    if (lease_keeper_ == nullptr || !lease_keeper_->expired()) return;
    throw StoreError("etcd store at " + endpoints() + ": " + what + ": the job's lease (under '" +
                     prefix_ + "') expired, so etcd deleted the job's keys: no process of the " +
                     "job renewed it within its TTL (EtcdStoreOptions::lease_ttl)");
  }

  // The request_put of key `k` (base64) to `value`, on the job's lease when it has one.
  json put_request(const std::string& k, const Bytes& value) const {
    json request = {{"key", k}, {"value", detail::base64_encode(text_of(value))}};
    if (!lease_id_.empty()) request["lease"] = lease_id_;
    return request;
  }
  std::string keys_begin() const { return prefix_ + "k/"; }

  Read read(const std::string& full, const std::string& what) {
    check_lease(what);
    const json answer = client_.post("/v3/kv/range", {{"key", detail::base64_encode(full)}}, what);
    Read out;
    if (!answer.contains("kvs") || answer["kvs"].empty()) return out;
    const json& kv = answer["kvs"][0];
    const std::string value = detail::base64_decode(kv.value("value", ""));
    out.value = Bytes(value.begin(), value.end());
    out.mod_revision = kv.value("mod_revision", "0");
    return out;
  }

  void put(const std::string& full, const Bytes& value, const std::string& what) {
    check_lease(what);
    client_.post("/v3/kv/put", put_request(detail::base64_encode(full), value), what);
  }

  // Writes `value` if the key is still as `seen`; whether it did.
  bool put_if_unchanged(const std::string& full, const Read& seen, const Bytes& value,
                        const std::string& what) {
    const std::string k = detail::base64_encode(full);
    json compare =
        seen.value
            ? json{{"key", k},
                   {"target", "MOD"},
                   {"result", "EQUAL"},
                   {"mod_revision", seen.mod_revision}}
            : json{{"key", k}, {"target", "CREATE"}, {"result", "EQUAL"}, {"create_revision", "0"}};
    const json txn = {{"compare", json::array({compare})},
                      {"success", json::array({{{"request_put", put_request(k, value)}}})}};
    return client_.post("/v3/kv/txn", txn, what).value("succeeded", false);
  }

  // Read, compute the new value (nullopt: leave the key), write if unchanged; retried until
  // the write holds. Returns the key's value afterwards.
  template <typename Update>
  Bytes update(const std::string& full, const std::string& what, Update&& next) {
    while (true) {
      const Read seen = read(full, what);
      const std::optional<Bytes> wanted = next(seen.value);
      if (!wanted) return seen.value.value_or(Bytes{});
      if (put_if_unchanged(full, seen, *wanted, what)) return *wanted;
    }
  }

  // Waits until every key of `keys` exists; the values of those asked for.
  std::vector<Bytes> await(const std::vector<std::string>& keys, Milliseconds timeout,
                           const std::string& what) {
    const Deadline deadline = Deadline::after(timeout);
    std::vector<std::optional<Bytes>> found(keys.size());
    Milliseconds pause{2};
    while (true) {
      std::vector<std::string> missing;
      for (size_t i = 0; i < keys.size(); ++i) {
        if (!found[i]) found[i] = read(key(keys[i]), what).value;
        if (!found[i]) missing.push_back(keys[i]);
      }
      if (missing.empty()) break;
      if (deadline.expired()) {
        std::string names;
        for (const auto& m : missing) names += (names.empty() ? "'" : ", '") + m + "'";
        throw TimeoutError("etcd store: " + what + " timed out after " +
                           std::to_string(timeout.count()) + " ms waiting for " + names);
      }
      std::this_thread::sleep_for(std::min(pause, deadline.remaining()));
      pause = std::min(pause * 2, Milliseconds(50));
    }
    std::vector<Bytes> out;
    for (auto& f : found) out.push_back(std::move(*f));
    return out;
  }

  bool remove(const std::string& full, const std::string& what) {
    check_lease(what);
    const json answer =
        client_.post("/v3/kv/deleterange", {{"key", detail::base64_encode(full)}}, what);
    return std::stoll(answer.value("deleted", "0")) > 0;
  }

  int64_t count_keys() {
    check_lease("num_keys");
    const json answer =
        client_.post("/v3/kv/range",
                     {{"key", detail::base64_encode(keys_begin())},
                      {"range_end", detail::base64_encode(prefix_end(keys_begin()))},
                      {"count_only", true}},
                     "num_keys");
    return std::stoll(answer.value("count", "0"));
  }

  std::string endpoints() const { return client_.endpoint_list(); }

 private:
  detail::EtcdClient client_;
  std::string prefix_;
  std::string lease_id_;                                   // empty: no lease
  std::unique_ptr<detail::EtcdLeaseKeeper> lease_keeper_;  // destroyed before client_
};

EtcdStore::EtcdStore(EtcdStoreOptions options) {
  if (options.endpoints.empty()) {
    throw ConfigError(
        "EtcdStore: no endpoints (EtcdStoreOptions::endpoints, COHORT_RDZV_ENDPOINTS)");
  }
  if (options.prefix.empty()) {
    throw ConfigError("EtcdStore: an empty prefix would put the job's keys among every other's");
  }
  if (options.token.empty()) {
    if (const char* token = std::getenv("COHORT_JOB_TOKEN")) options.token = token;
  }
  if (options.lease_ttl.count() < 0 ||
      (options.lease_ttl.count() > 0 && options.lease_ttl.count() % 1000 != 0)) {
    throw ConfigError("EtcdStore: lease_ttl " + std::to_string(options.lease_ttl.count()) +
                      " ms: etcd's leases last whole seconds; give 1000 ms or more in whole "
                      "seconds, or 0 for none");
  }
  timeout_ = options.timeout;
  impl_ = std::make_unique<Impl>(options);
  const Bytes mine = to_bytes(options.token);
  auto refuse = [&] {
    throw StoreError("etcd store at " + impl_->endpoints() + ": the keys under '" + options.prefix +
                     "' belong to a job with another job token (COHORT_JOB_TOKEN): this process "
                     "was started for another job, or with another prefix's job id");
  };
  // Another job's process must not renew that job's lease: the token is checked first.
  const std::optional<Bytes> present = impl_->read(impl_->token_key(), "the job token check").value;
  if (present && *present != mine) refuse();
  impl_->join_lease(options.lease_ttl);
  const Bytes recorded = impl_->update(
      impl_->token_key(), "the job token check", [&](const std::optional<Bytes>& current) {
        return current ? std::optional<Bytes>() : std::optional<Bytes>(mine);
      });
  if (recorded != mine) refuse();
}

EtcdStore::~EtcdStore() = default;

void EtcdStore::set(const std::string& key, const Bytes& value) {
  impl_->put(impl_->key(key), value, "set('" + key + "')");
}

Bytes EtcdStore::get(const std::string& key, Milliseconds timeout) {
  return impl_->await({key}, timeout, "get('" + key + "')")[0];
}

int64_t EtcdStore::add(const std::string& key, int64_t delta) {
  int64_t sum = 0;
  impl_->update(impl_->key(key), "add('" + key + "')", [&](const std::optional<Bytes>& current) {
    sum = add_to_counter(key, current ? &*current : nullptr, delta);
    return std::optional<Bytes>(to_bytes(std::to_string(sum)));
  });
  return sum;
}

Bytes EtcdStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  return impl_->update(impl_->key(key), "compare_set('" + key + "')",
                       [&](const std::optional<Bytes>& current) {
                         const bool matches = current ? *current == expected : expected.empty();
                         return matches ? std::optional<Bytes>(desired) : std::nullopt;
                       });
}

void EtcdStore::wait(const std::vector<std::string>& keys, Milliseconds timeout) {
  impl_->await(keys, timeout, "wait");
}

bool EtcdStore::delete_key(const std::string& key) {
  return impl_->remove(impl_->key(key), "delete_key('" + key + "')");
}

int64_t EtcdStore::num_keys() {
  return impl_->count_keys();
}

}  // namespace cohort
