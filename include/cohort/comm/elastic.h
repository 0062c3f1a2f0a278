// cohort::ElasticGroup: a group whose membership changes inside a running job (docs/elastic.md).
//
//   auto elastic = cohort::init_elastic();          // under cohortrun --min-ranks (or a store)
//   elastic->join();                                // waits for the first generation
//   ... collectives on elastic->group() ...
//   catch (const cohort::PeerError& e) { elastic->recover(e, committed_step); }  // shrinks
//   if (elastic->joiners_waiting()) elastic->grow(committed_step);              // grows
//
// The members of a job form generations 1, 2, 3, ... through the job's store (Note [Elastic
// rendezvous] in src/comm/elastic/generation_rendezvous.h). Each generation is a fresh Group
// (its own store prefix, connections, secrets and shared memory), so no message of an old
// generation can reach a new one; ranks are renumbered densely, and the topology and algorithm
// choice are those of the new membership. A member that the others declared dead (it never
// arrived at the next generation in time) and comes back is refused with ElasticError.
//
// The training side (commit or roll back a step, heal a joiner) is cohort::ElasticTrainer
// (cohort/torch/elastic/elastic_trainer.h); this class only decides who is in.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cohort/comm/group.h"
#include "cohort/comm/init.h"
#include "cohort/comm/store.h"
#include "cohort/core/deadline.h"
#include "cohort/core/error.h"

namespace cohort {

// The membership of an elastic job could not be formed or this member was refused: fewer than
// ElasticOptions::min_size members within the deadline, a member declared dead that came back,
// a member of another job or with another model (fingerprint), a job that already finished.
class ElasticError : public Error {
 public:
  using Error::Error;
};

struct ElasticOptions {
  // The job goes on while at least min_size members remain; below it the rendezvous waits up to
  // join_timeout for members to come (back), then throws ElasticError. COHORT_ELASTIC_MIN_RANKS.
  int min_size = 1;
  // At most this many members per generation (0: no limit); later arrivals wait for a place.
  // COHORT_ELASTIC_MAX_RANKS.
  int max_size = 0;
  // The first generation waits (up to join_timeout) for this many members; 0: min_size.
  // init_elastic sets it to WORLD_SIZE.
  int initial_size = 0;
  // Orders the first generation's ranks (the launcher's RANK); -1: by arrival.
  int launch_rank = -1;
  // How long a forming generation waits for members of the last one that no error named, once
  // the first of them has arrived: survivors of a failure arrive within milliseconds of one
  // another, so a member missing after this is taken for dead (a stopped process, a lost host).
  // COHORT_ELASTIC_SETTLE_MS, default 2000.
  Milliseconds settle{0};
  // How long to wait for a generation to form at all (the first one, too few members, a new
  // member waiting for the running ones to reach a step boundary). COHORT_ELASTIC_TIMEOUT_S,
  // default the group's timeout.
  Milliseconds join_timeout{0};
  // Members whose fingerprints differ are never in one generation: a joiner whose fingerprint
  // differs from the running members' is refused (ElasticError naming both). ElasticTrainer
  // sets it to the model's parameter names, shapes and dtypes.
  std::string fingerprint;
  // This member's name in logs and the store; default "<host>:<pid>:<random>".
  std::string member_id;
  // Options of each generation's Group (timeout, shared memory, host, ...).
  GroupOptions group;
  // When the members that held the job's state died while healing the others (whose state is
  // then a mix, -1), the next generation forms anyway, its Membership::lost_step saying so, for
  // the members to resume from a checkpoint; false: it cannot form (ElasticError). ElasticTrainer
  // sets it when it has a checkpoint_dir.
  bool resume_lost_state = false;

  // Fills defaults and the environment overrides above; throws ConfigError for bad values.
  ElasticOptions resolved() const;
};

// One member of a generation, by its rank there.
struct ElasticMember {
  std::string id;
  int previous_rank = -1;  // its rank in the last generation; -1 for a member that joined
  // The steps it had committed when it arrived (ElasticTrainer passes its committed_steps());
  // -1 for a new member, which holds no state.
  int64_t committed_step = -1;
};

// A generation as its members see it.
struct Membership {
  uint64_t generation = 0;
  int rank = 0;
  int size = 0;
  // Every member, by rank. Rank 0 holds the newest state: the largest committed_step, so it is
  // the source a joiner (or a survivor one step behind) heals from.
  std::vector<ElasticMember> members;
  std::vector<int> left;    // ranks of the last generation that are not in this one
  std::vector<int> joined;  // ranks of this generation that were not in the last one
  // >= 0: no member holds the job's state, which was at this committed step (those that held it
  // died while healing the others; ElasticOptions::resume_lost_state): resume it from a
  // checkpoint. -1: the members hold what committed_step() says.
  int64_t lost_step = -1;
  int64_t committed_step() const { return members.empty() ? -1 : members[0].committed_step; }
  // "generation 3: rank 2 left; 3 ranks go on from step 121", "generation 4: 1 rank joined (now
  // 3); 4 ranks go on from step 130" (the step counted from 1: committed_step() + 1)
  std::string describe() const;
};

class ElasticGroup {
 public:
  // Uses `store` (which must outlive every member: host it outside the ranks, as cohortrun does)
  // for the job's rendezvous. Joins nothing yet.
  ElasticGroup(std::shared_ptr<Store> store, ElasticOptions options = {});
  ~ElasticGroup();
  ElasticGroup(const ElasticGroup&) = delete;
  ElasticGroup& operator=(const ElasticGroup&) = delete;

  // Joins the next generation that forms (the first one, or the running job's next step
  // boundary) as a new member, and returns it. Throws ElasticError when refused or when no
  // generation with room for it forms by join_timeout; StoreError when the store is lost.
  const Membership& join();

  // After `cause` broke the current group on this member: leaves it and forms the next
  // generation with the other survivors (the rank that the group's own error names, a
  // PeerError's failed_rank, is not waited for; `cause` may come from another group, such as a
  // wrapper's subgroup, whose ranks are numbered otherwise) and any member waiting to join. A
  // failure while that generation's group is built moves on to the next one. Throws ElasticError
  // when this member was declared dead meanwhile, or when fewer than min_size members remain by
  // join_timeout.
  const Membership& recover(const Error& cause, int64_t committed_step);

  // Forms the next generation with every member and those waiting to join. Every member must
  // call it at the same step boundary (ElasticTrainer agrees on it in its commit vote).
  const Membership& grow(int64_t committed_step);

  // Whether members wait to join the next generation: one store lookup. Ask it on one rank and
  // share the answer, so that every member calls grow() at the same step.
  bool joiners_waiting();

  // Waits, on the store's keys and up to `timeout`, until `count` members are waiting to join
  // the next generation; returns whether they came. For a program that holds the job at a step
  // boundary until capacity is back (and for tests that need a join at a known step).
  bool wait_for_joiners(int count, Milliseconds timeout);

  // Marks the job finished: members that arrive later are refused instead of waiting.
  void finish();
  // Marks the job ended on an error that a new member would meet again (ElasticTrainer: a
  // checkpoint every member of the job's start refused): the job is finished, so cohortrun
  // restarts no rank, and a member that arrives later is refused at once with ElasticError
  // naming `reason`, instead of waiting out the join timeout for a generation that never forms.
  void fail(const std::string& reason);
  // ElasticOptions::resume_lost_state, before join().
  void set_resume_lost_state(bool resume);
  // Whether a member marked the job finished (one store lookup): a member whose recover() was
  // refused for it learns that the others ended the job.
  bool finished();

  // Sets ElasticOptions::fingerprint before join() (ElasticTrainer passes its model's).
  void set_fingerprint(std::string fingerprint);

  const Membership& membership() const;
  Group& group() const;
  std::shared_ptr<Group> group_ptr() const;
  const ElasticOptions& options() const;
  bool joined() const;

 private:
  const Membership& next_generation(int64_t committed_step, int failed_rank);
  struct State;
  std::unique_ptr<State> state_;
};

// An elastic group over the job's store, as cohortrun --min-ranks starts it (COHORT_ELASTIC=1,
// COHORT_STORE_HOSTED=1: the launcher hosts the store, so it outlives any rank). Reads
// COHORT_ELASTIC_MIN_RANKS / _MAX_RANKS, RANK and WORLD_SIZE (the first generation's size).
// Throws ConfigError when the store is not hosted by the launcher (a rank hosting it would take
// the job down with it). With no launcher, a job of one member over a store of its own.
std::unique_ptr<ElasticGroup> init_elastic(InitOptions init = {}, ElasticOptions options = {});

// The failed rank a collective error names (PeerError::failed_rank), or -1.
int failed_rank_of(const Error& error);

// What a launcher sees of an elastic job through the job's store, without taking part in it:
// cohortrun prints each membership change and stops restarting ranks once the job finished.
struct ElasticJobStatus {
  uint64_t generation = 0;  // the last generation formed; 0: none yet
  int size = 0;             // its members
  int left = 0;             // members of the generation before that are not in it
  int joined = 0;           // its members that were not in the generation before
  bool finished = false;    // a member called ElasticGroup::finish()
};

// Reads the status from `job_store` (the store the members use, with their prefix: cohortrun's
// ranks use COHORT_STORE_PREFIX). A few store round trips; reads the generation's record only
// when it is not `last`'s. Never waits for members; StoreError when the store is lost.
ElasticJobStatus elastic_job_status(Store& job_store, const ElasticJobStatus& last = {});

}  // namespace cohort
