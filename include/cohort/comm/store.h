// The rendezvous store: a small key-value service every rank of a job can reach. Ranks use it
// to find each other (addresses), agree on secrets, and report progress for error messages.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cohort/core/deadline.h"

namespace cohort {

using Bytes = std::vector<uint8_t>;

inline Bytes to_bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }
inline std::string to_string(const Bytes& b) { return std::string(b.begin(), b.end()); }

class Store {
 public:
  static constexpr Milliseconds kDefaultTimeout{300'000};

  virtual ~Store() = default;

  virtual void set(const std::string& key, const Bytes& value) = 0;
  // Waits until `key` exists (up to `timeout`), then returns its value; TimeoutError otherwise.
  virtual Bytes get(const std::string& key, Milliseconds timeout) = 0;
  // Adds `delta` to the integer stored at `key` (absent counts as 0); returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Sets `key` to `desired` if its value is `expected` (an absent key matches an empty
  // `expected`). Returns the value the key holds afterwards.
  virtual Bytes compare_set(const std::string& key, const Bytes& expected,
                            const Bytes& desired) = 0;
  // Waits until every key exists; TimeoutError naming the missing keys otherwise.
  virtual void wait(const std::vector<std::string>& keys, Milliseconds timeout) = 0;
  // Returns whether the key existed.
  virtual bool delete_key(const std::string& key) = 0;
  virtual int64_t num_keys() = 0;

  // Conveniences.
  void set(const std::string& key, const std::string& value) { set(key, to_bytes(value)); }
  Bytes get(const std::string& key) { return get(key, timeout_); }
  std::string get_string(const std::string& key, Milliseconds timeout) {
    return to_string(get(key, timeout));
  }
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

  Milliseconds timeout() const { return timeout_; }
  void set_timeout(Milliseconds timeout) { timeout_ = timeout; }

 protected:
  Milliseconds timeout_ = kDefaultTimeout;
};

}  // namespace cohort
