// A view of another Store where every key is prefixed, so that groups and jobs sharing one
// store never see each other's keys.
#pragma once

#include <memory>

#include "cohort/comm/store.h"

namespace cohort {

class PrefixStore : public Store {
 public:
  using Store::get;
  using Store::set;
  using Store::wait;

  PrefixStore(std::string prefix, std::shared_ptr<Store> inner);

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  void wait(const std::vector<std::string>& keys, Milliseconds timeout) override;
  bool delete_key(const std::string& key) override;
  // Counts every key of the inner store (a prefix view cannot count its own cheaply).
  int64_t num_keys() override;

  const std::string& prefix() const { return prefix_; }
  const std::shared_ptr<Store>& inner() const { return inner_; }

 private:
  std::string full(const std::string& key) const { return prefix_ + "/" + key; }

  std::string prefix_;
  std::shared_ptr<Store> inner_;
};

}  // namespace cohort
