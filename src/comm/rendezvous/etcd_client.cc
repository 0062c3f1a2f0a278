// detail::EtcdClient (etcd_client.h; Note [etcd endpoints]).
#include "rendezvous/etcd_client.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <thread>
#include <utility>

#include "cohort/core/error.h"

#if COHORT_HAVE_CURL
#include <curl/curl.h>
#endif

namespace cohort::detail {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string url_of(const std::string& endpoint) {
  return endpoint.find("://") == std::string::npos ? "http://" + endpoint : endpoint;
}

#if COHORT_HAVE_CURL
size_t append_to(char* data, size_t size, size_t count, void* out) {
  static_cast<std::string*>(out)->append(data, size * count);
  return size * count;
}

CURL* new_handle() {
  static std::once_flag global;  // curl_global_init is not thread-safe
  std::call_once(global, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  CURL* handle = curl_easy_init();
  if (handle == nullptr) throw StoreError("etcd: libcurl could not make a handle");
  return handle;
}
#endif

}  // namespace

std::string base64_encode(const std::string& bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t n = (uint32_t(uint8_t(bytes[i])) << 16) |
                       (uint32_t(uint8_t(bytes[i + 1])) << 8) | uint8_t(bytes[i + 2]);
    for (int shift : {18, 12, 6, 0}) out += kAlphabet[(n >> shift) & 63];
  }
  if (i < bytes.size()) {
    uint32_t n = uint32_t(uint8_t(bytes[i])) << 16;
    if (i + 1 < bytes.size()) n |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string base64_decode(const std::string& text) {
  std::array<int, 256> value{};
  value.fill(-1);
  for (int i = 0; i < 64; ++i) value[uint8_t(kAlphabet[i])] = i;
  std::string out;
  uint32_t bits = 0;
  int count = 0;
  for (char c : text) {
    if (c == '=') break;
    const int v = value[uint8_t(c)];
    if (v < 0) throw StoreError("etcd: an answer held malformed base64");
    bits = (bits << 6) | uint32_t(v);
    count += 6;
    if (count >= 8) {
      count -= 8;
      out += char((bits >> count) & 0xff);
    }
  }
  return out;
}

EtcdClient::EtcdClient(std::vector<std::string> endpoints, Milliseconds request_timeout,
                       Milliseconds unavailable_timeout)
    : request_timeout_(request_timeout), unavailable_timeout_(unavailable_timeout) {
  for (const auto& e : endpoints) urls_.push_back(url_of(e));
#if COHORT_HAVE_CURL
  handle_ = new_handle();
#else
  throw ConfigError(
      "the etcd store needs libcurl, which this cohort was built without: install "
      "libcurl4-openssl-dev (scripts/setup does) and build again");
#endif
}

EtcdClient::~EtcdClient() {
#if COHORT_HAVE_CURL
  if (handle_ != nullptr) curl_easy_cleanup(static_cast<CURL*>(handle_));
#endif
}

std::string EtcdClient::endpoint_list() const {
  std::string out;
  for (const auto& url : urls_) out += (out.empty() ? "" : ", ") + url;
  return out;
}

bool EtcdClient::post_once(const std::string& url, const std::string& body, std::string& answer,
                           std::string& error, bool& refused) {
#if COHORT_HAVE_CURL
  CURL* curl = static_cast<CURL*>(handle_);
  curl_easy_reset(curl);
  answer.clear();
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.c_str());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(request_timeout_.count()));
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(request_timeout_.count()));
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, append_to);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &answer);
  const CURLcode code = curl_easy_perform(curl);
  if (code != CURLE_OK) {
    error = curl_easy_strerror(code);
    return false;
  }
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  if (status == 200) return true;
  error = "HTTP " + std::to_string(status) + ": " + answer.substr(0, 200);
  refused = status >= 400 && status < 500;
  return false;
#else
  (void)url, (void)body, (void)answer, (void)refused;
  error = "built without libcurl";
  return false;
#endif
}

nlohmann::json EtcdClient::post(const std::string& path, const nlohmann::json& body,
                                const std::string& what) {
  const std::string text = body.dump();
  const Deadline deadline = Deadline::after(unavailable_timeout_);
  std::string error;
  Milliseconds pause{20};
  std::lock_guard<std::mutex> lock(mutex_);
  while (true) {
    for (size_t tried = 0; tried < urls_.size(); ++tried) {
      const size_t at = (current_ + tried) % urls_.size();
      std::string answer;
      bool refused = false;
      if (post_once(urls_[at] + path, text, answer, error, refused)) {
        current_ = at;
        try {
          return nlohmann::json::parse(answer);
        } catch (const nlohmann::json::exception& e) {
          throw StoreError("etcd at " + urls_[at] + " answered " + what +
                           " with something that is not JSON (" + e.what() +
                           "): is it etcd's client port?");
        }
      }
      error = urls_[at] + ": " + error;
      if (refused) throw StoreError("etcd refused " + what + ": " + error);
    }
    if (deadline.expired()) break;
    std::this_thread::sleep_for(std::min(pause, deadline.remaining()));
    pause = std::min(pause * 2, Milliseconds(500));
  }
  throw StoreError("etcd: no member of the cluster (" + endpoint_list() + ") answered " + what +
                   " within " + std::to_string(unavailable_timeout_.count()) +
                   " ms; has the cluster lost its quorum? Last error: " + error);
}

}  // namespace cohort::detail
