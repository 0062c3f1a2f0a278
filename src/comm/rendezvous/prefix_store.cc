#include "cohort/comm/prefix_store.h"

#include "cohort/core/check.h"

namespace cohort {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> inner)
    : prefix_(std::move(prefix)), inner_(std::move(inner)) {
  COHORT_CHECK(inner_ != nullptr, "PrefixStore needs an inner store");
  timeout_ = inner_->timeout();
}

void PrefixStore::set(const std::string& key, const Bytes& value) { inner_->set(full(key), value); }

Bytes PrefixStore::get(const std::string& key, Milliseconds timeout) {
  return inner_->get(full(key), timeout);
}

int64_t PrefixStore::add(const std::string& key, int64_t delta) {
  return inner_->add(full(key), delta);
}

Bytes PrefixStore::compare_set(const std::string& key, const Bytes& expected,
                               const Bytes& desired) {
  return inner_->compare_set(full(key), expected, desired);
}

void PrefixStore::wait(const std::vector<std::string>& keys, Milliseconds timeout) {
  std::vector<std::string> prefixed;
  prefixed.reserve(keys.size());
  for (const auto& k : keys) prefixed.push_back(full(k));
  inner_->wait(prefixed, timeout);
}

bool PrefixStore::delete_key(const std::string& key) { return inner_->delete_key(full(key)); }

int64_t PrefixStore::num_keys() { return inner_->num_keys(); }

}  // namespace cohort
