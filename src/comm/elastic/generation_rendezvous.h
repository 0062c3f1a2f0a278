// How the members of an elastic job agree, through the job's store, on who forms each
// generation (cohort/comm/elastic.h).
//
// Note [Elastic rendezvous]
// Keys, under "elastic/": `current` (the last generation formed), `finished` (the job ended),
// and per generation n: `g<n>/arrive` (a counter), `g<n>/member/<i>` (the i-th arrival's
// record: id, rank and committed step in generation n - 1, the rank an error named dead,
// fingerprint), `g<n>/closed` (the outcome) and `g<n>/group/...` (the new Group's own keys).
//
// Every member that wants to be in generation n (survivors of a failure in n - 1, all members
// of n - 1 at an agreed step boundary, new members) takes an arrival index with one add() and
// writes its record. The first arrival closes the generation: it waits (on the key of the next
// arrival, never by sleeping) until every member of n - 1 has arrived, except those an arrival's
// error named dead, or until `settle` has passed since the first of them arrived (a stopped or
// vanished member is then taken for dead); the first generation waits for initial_size members
// instead. It then admits, at most max_size, the members of n - 1 that arrived and the new ones
// whose fingerprint matches, orders them (the largest committed step first, so rank 0 is the
// freshest source to heal from; then by old rank, so survivors keep their order; then new
// members by arrival) and writes the outcome once. Everyone else reads it: a member of n - 1
// that is not in is declared dead and refused, a new member that is not in (it arrived after
// the close, or past max_size) tries generation n + 1, which the running members form at their
// next step boundary (they see its arrival counter: joiners_waiting()).
//
// One closer per generation keeps the decision single; if it dies while closing, the others
// time out at join_timeout with an ElasticError that names it (docs/elastic.md, limits).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cohort/comm/elastic.h"
#include "cohort/comm/store.h"

namespace cohort::elastic {

// What an arriving member says about itself.
struct Arrival {
  std::string id;
  uint64_t previous_generation = 0;  // the generation it was in; 0 for a new member
  int previous_rank = -1;
  int64_t committed_step = -1;
  int failed_rank = -1;  // a rank of previous_generation its error named, or -1
  int launch_rank = -1;
  std::string fingerprint;
};

class GenerationRendezvous {
 public:
  // `options` must outlive the rendezvous.
  GenerationRendezvous(std::shared_ptr<Store> store, const ElasticOptions& options);

  // Arrives at the first generation that can still take `self` and returns its membership.
  // Throws ElasticError when refused, declared dead, or when nothing forms by join_timeout.
  Membership arrive(const Arrival& self);

  // Whether anyone has arrived at generation `generation` + 1.
  bool arrivals_after(uint64_t generation);
  // Waits until `count` members have arrived at generation `generation` + 1 (their records
  // are written), up to `timeout`; returns whether they did.
  bool wait_for_arrivals_after(uint64_t generation, int count, Milliseconds timeout);
  void mark_finished();
  bool finished();
  // Marks the job ended on an error a new member would meet again (ElasticGroup::fail): the job
  // is finished, and a later arrival is refused with `reason`.
  void mark_failed(const std::string& reason);

  // The store view of generation `generation`'s own Group.
  std::shared_ptr<Store> group_store(uint64_t generation) const;

 private:
  uint64_t first_open_generation(const Arrival& self);
  Membership arrive_at(uint64_t generation, const Arrival& self, bool& not_admitted);
  void close(uint64_t generation);
  std::string key(uint64_t generation, const std::string& name) const;

  std::shared_ptr<Store> store_;
  // The group's own (ElasticGroup), not a copy: what it sets before join() (resume_lost_state)
  // is what this member decides with when it closes a generation.
  const ElasticOptions& options_;
};

}  // namespace cohort::elastic
