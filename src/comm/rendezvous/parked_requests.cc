#include "rendezvous/parked_requests.h"

#include <algorithm>

#include "cohort/core/check.h"

namespace cohort {

void ParkedRequests::park(uint64_t connection, store_wire::Request request,
                          Clock::time_point deadline, std::vector<std::string> missing) {
  for (const auto& key : missing) by_key_[key].push_back(connection);
  deadlines_.emplace(deadline, connection);
  by_connection_[connection] = Parked{connection, std::move(request), deadline, std::move(missing)};
}

std::vector<ParkedRequests::Parked> ParkedRequests::take_ready(const std::string& key) {
  std::vector<Parked> ready;
  const auto waiting = by_key_.find(key);
  if (waiting == by_key_.end()) return ready;
  const std::vector<uint64_t> connections = std::move(waiting->second);
  by_key_.erase(waiting);
  for (const uint64_t connection : connections) {
    auto& missing = by_connection_.at(connection).missing;
    const auto found = std::find(missing.begin(), missing.end(), key);
    if (found != missing.end()) missing.erase(found);
    if (missing.empty()) ready.push_back(remove(connection));
  }
  return ready;
}

std::vector<ParkedRequests::Parked> ParkedRequests::take_expired(Clock::time_point now) {
  std::vector<Parked> expired;
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    expired.push_back(remove(deadlines_.begin()->second));
  }
  return expired;
}

std::vector<ParkedRequests::Parked> ParkedRequests::take_all() {
  std::vector<Parked> all;
  while (!deadlines_.empty()) all.push_back(remove(deadlines_.begin()->second));
  return all;
}

void ParkedRequests::drop(uint64_t connection) {
  if (by_connection_.count(connection) != 0) remove(connection);
}

std::optional<Clock::time_point> ParkedRequests::next_deadline() const {
  if (deadlines_.empty()) return std::nullopt;
  return deadlines_.begin()->first;
}

ParkedRequests::Parked ParkedRequests::remove(uint64_t connection) {
  auto it = by_connection_.find(connection);
  COHORT_CHECK(it != by_connection_.end(), "no parked request for connection ", connection);
  Parked parked = std::move(it->second);
  by_connection_.erase(it);
  deadlines_.erase({parked.deadline, connection});
  for (const auto& key : parked.missing) unindex(key, connection);
  return parked;
}

void ParkedRequests::unindex(const std::string& key, uint64_t connection) {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return;
  auto& connections = it->second;
  const auto found = std::find(connections.begin(), connections.end(), connection);
  if (found != connections.end()) connections.erase(found);
  if (connections.empty()) by_key_.erase(it);
}

}  // namespace cohort
