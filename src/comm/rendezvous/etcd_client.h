// etcd's v3 key-value API through its JSON gateway (POST /v3/kv/put, /range, /txn,
// /deleterange; keys and values in base64), over libcurl, for EtcdStore.
//
// Note [etcd endpoints]: a request goes to the endpoint that answered last, then to the others
// in order, in rounds with a short pause, until one answers or `unavailable_timeout` passes.
// An answer is HTTP 200; a member that has no leader or cannot reach the quorum answers 503
// (or nothing before `request_timeout`), which counts as no answer. A 4xx is cohort's mistake
// and ends the call at once.
#pragma once

#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cohort/core/deadline.h"

namespace cohort::detail {

class EtcdClient {
 public:
  EtcdClient(std::vector<std::string> endpoints, Milliseconds request_timeout,
             Milliseconds unavailable_timeout);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // The answer's JSON. Throws StoreError naming `what`, etcd and every endpoint when no member
  // answers in time (Note [etcd endpoints]) or the request is refused.
  nlohmann::json post(const std::string& path, const nlohmann::json& body, const std::string& what);

  // "h1:2379, h2:2379", for messages.
  std::string endpoint_list() const;

 private:
  // One try at one endpoint: true with `answer` filled, or false with `error` saying why.
  bool post_once(const std::string& url, const std::string& body, std::string& answer,
                 std::string& error, bool& refused);

  std::vector<std::string> urls_;
  Milliseconds request_timeout_;
  Milliseconds unavailable_timeout_;
  std::mutex mutex_;  // one request at a time on the handle
  void* handle_ = nullptr;
  size_t current_ = 0;  // the endpoint that answered last
};

// Base64 (RFC 4648, with padding), as the gateway takes and gives keys and values.
std::string base64_encode(const std::string& bytes);
std::string base64_decode(const std::string& text);

}  // namespace cohort::detail
