// The GET and WAIT requests the store server could not answer yet: each waits, without a
// thread, until the keys it is missing are set, its deadline passes or its client hangs up.
// At most one per connection (a client waits for its reply before it sends more).
//
// They are indexed by the keys they miss, so that a set looks only at the requests that wait
// for that key, and kept in a set sorted by deadline, so that the server's loop knows how long
// it may sleep and finds the expired ones without a scan.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cohort/core/deadline.h"
#include "rendezvous/tcp_store_protocol.h"

namespace cohort {

class ParkedRequests {
 public:
  struct Parked {
    uint64_t connection = 0;
    store_wire::Request request;
    Clock::time_point deadline;
    std::vector<std::string> missing;  // keys not set when last looked at, each once
  };

  // Parks `request` of `connection` (which has none parked) until every key of `missing` (not
  // empty) has been set, or `deadline`.
  void park(uint64_t connection, store_wire::Request request, Clock::time_point deadline,
            std::vector<std::string> missing);
  // `key` was just set: removes and returns the requests that have now seen every key they
  // missed set. The caller looks at the table again (a key may have been deleted since) and
  // answers each or parks it again.
  std::vector<Parked> take_ready(const std::string& key);
  // Removes and returns the requests whose deadline is at or before `now`.
  std::vector<Parked> take_expired(Clock::time_point now);
  // Removes and returns every request (the server is stopping).
  std::vector<Parked> take_all();
  // Forgets the request of `connection`, if it has one (its client hung up).
  void drop(uint64_t connection);

  std::optional<Clock::time_point> next_deadline() const;
  bool empty() const { return by_connection_.empty(); }
  size_t size() const { return by_connection_.size(); }

 private:
  // Removes `connection`'s request from every index and returns it.
  Parked remove(uint64_t connection);
  void unindex(const std::string& key, uint64_t connection);

  std::unordered_map<uint64_t, Parked> by_connection_;
  std::unordered_map<std::string, std::vector<uint64_t>> by_key_;
  std::set<std::pair<Clock::time_point, uint64_t>> deadlines_;
};

}  // namespace cohort
