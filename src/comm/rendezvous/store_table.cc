#include "rendezvous/store_table.h"

#include <unordered_set>

#include "cohort/core/error.h"

namespace cohort {

int64_t add_to_counter(const std::string& key, const Bytes* current, int64_t delta) {
  int64_t value = 0;
  if (current != nullptr) {
    const std::string text = to_string(*current);
    bool parsed = false;
    try {
      size_t used = 0;
      value = std::stoll(text, &used);
      parsed = used == text.size();
    } catch (const std::exception&) {
    }
    if (!parsed) {
      throw InvalidArgument("store key '" + key + "' holds '" + text +
                            "', which is not an integer counter, so add() cannot update it");
    }
  }
  int64_t sum = 0;
  if (__builtin_add_overflow(value, delta, &sum)) {
    throw InvalidArgument("store add('" + key + "', " + std::to_string(delta) +
                          ") overflows the counter, which holds " + std::to_string(value));
  }
  return sum;
}

const Bytes* StoreTable::find(const std::string& key) const {
  const auto it = table_.find(key);
  return it == table_.end() ? nullptr : &it->second;
}

std::vector<std::string> StoreTable::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  std::unordered_set<std::string> seen;
  for (const auto& k : keys) {
    if (!contains(k) && seen.insert(k).second) out.push_back(k);
  }
  return out;
}

int64_t StoreTable::add(const std::string& key, int64_t delta) {
  const int64_t value = add_to_counter(key, find(key), delta);
  table_[key] = to_bytes(std::to_string(value));
  return value;
}

Bytes StoreTable::compare_set(const std::string& key, const Bytes& expected, Bytes desired,
                              bool* wrote) {
  auto it = table_.find(key);
  *wrote = it == table_.end() ? expected.empty() : it->second == expected;
  if (!*wrote) return it == table_.end() ? Bytes{} : it->second;
  Bytes& slot = table_[key];
  slot = std::move(desired);
  return slot;
}

}  // namespace cohort
