// ElasticGroup (cohort/comm/elastic.h): one Group per generation, formed by
// GenerationRendezvous (Note [Elastic rendezvous]).
#include <unistd.h>

#include <random>

#include "cohort/comm/elastic.h"
#include "cohort/comm/job_store.h"
#include "cohort/comm/launch_env.h"
#include "cohort/comm/memory_store.h"
#include "cohort/core/check.h"
#include "cohort/core/env.h"
#include "cohort/core/logging.h"
#include "generation_rendezvous.h"

namespace cohort {
namespace {

std::string default_member_id() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::random_device random;
  return std::string(host) + ":" + std::to_string(getpid()) + ":" +
         std::to_string(random() % 100000);
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    out += (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") + std::to_string(ranks[i]);
  }
  return out;
}

int positive_env(const char* name, int fallback) {
  const auto value = env_int(name);
  if (!value) return fallback;
  if (*value < 0) {
    throw ConfigError(std::string(name) + "=" + std::to_string(*value) + ": must be >= 0");
  }
  return static_cast<int>(*value);
}

}  // namespace

ElasticOptions ElasticOptions::resolved() const {
  ElasticOptions r = *this;
  r.group = group.resolved();
  r.min_size = positive_env("COHORT_ELASTIC_MIN_RANKS", r.min_size);
  r.max_size = positive_env("COHORT_ELASTIC_MAX_RANKS", r.max_size);
  if (r.min_size < 1) throw ConfigError("ElasticOptions::min_size must be at least 1");
  if (r.max_size > 0 && r.max_size < r.min_size) {
    throw ConfigError("ElasticOptions: max_size " + std::to_string(r.max_size) +
                      " is below min_size " + std::to_string(r.min_size));
  }
  if (r.initial_size <= 0) r.initial_size = r.min_size;
  if (r.settle.count() <= 0) {
    r.settle = Milliseconds(positive_env("COHORT_ELASTIC_SETTLE_MS", 2000));
  }
  if (r.join_timeout.count() <= 0) {
    const int seconds = positive_env("COHORT_ELASTIC_TIMEOUT_S", 0);
    r.join_timeout = seconds > 0 ? Milliseconds(seconds * 1000LL) : r.group.timeout;
  }
  if (r.member_id.empty()) r.member_id = default_member_id();
  return r;
}

std::string Membership::describe() const {
  std::string out = "generation " + std::to_string(generation) + ":";
  if (!left.empty()) {
    out += std::string(left.size() == 1 ? " rank " : " ranks ") + rank_list(left) + " left;";
  }
  if (!joined.empty() && generation > 1) {
    out += " " + std::to_string(joined.size()) + (joined.size() == 1 ? " rank" : " ranks") +
           " joined (now " + rank_list(joined) + ");";
  }
  out += " " + std::to_string(size) + (size == 1 ? " rank goes on" : " ranks go on");
  if (committed_step() >= 0) out += " from step " + std::to_string(committed_step() + 1);
  if (lost_step >= 0) {
    out += "; no member holds the job's state of step " + std::to_string(lost_step + 1) +
           " (those that held it died while healing the others)";
  }
  return out;
}

int failed_rank_of(const Error& error) {
  const auto* peer = dynamic_cast<const PeerError*>(&error);
  return peer ? peer->failed_rank() : -1;
}

namespace {

// The dead rank that the generation's own group names, if it failed: the error that reached
// the caller may come from another group (a wrapper's subgroup, whose PeerError numbers its own
// ranks), and naming a live member dead would let the next generation form without waiting
// for it.
int failed_rank_in(const Group& group) {
  const std::exception_ptr own = group.error();
  if (!own) return -1;
  try {
    std::rethrow_exception(own);
  } catch (const Error& e) {
    return failed_rank_of(e);
  } catch (...) {
    return -1;
  }
}

}  // namespace

struct ElasticGroup::State {
  ElasticOptions options;
  elastic::GenerationRendezvous rendezvous;
  Membership membership;
  std::shared_ptr<Group> group;

  State(std::shared_ptr<Store> store, ElasticOptions resolved)
      : options(std::move(resolved)), rendezvous(std::move(store), options) {}
};

ElasticGroup::ElasticGroup(std::shared_ptr<Store> store, ElasticOptions options)
    : state_(std::make_unique<State>(std::move(store), options.resolved())) {}

ElasticGroup::~ElasticGroup() = default;

const Membership& ElasticGroup::join() {
  COHORT_CHECK(state_->membership.generation == 0, "ElasticGroup::join: member ",
               state_->options.member_id, " has joined already; after a failure call recover()");
  return next_generation(-1, -1);
}

const Membership& ElasticGroup::recover(const Error& cause, int64_t committed_step) {
  COHORT_CHECK(state_->group, "ElasticGroup::recover before join()");
  COHORT_LOG(kWarn, "rank ", state_->membership.rank, " of generation ",
             state_->membership.generation, " leaves its group after: ", cause.what());
  return next_generation(committed_step, failed_rank_in(*state_->group));
}

const Membership& ElasticGroup::grow(int64_t committed_step) {
  COHORT_CHECK(state_->group, "ElasticGroup::grow before join()");
  return next_generation(committed_step, -1);
}

bool ElasticGroup::joiners_waiting() {
  return state_->group && state_->rendezvous.arrivals_after(state_->membership.generation);
}

bool ElasticGroup::wait_for_joiners(int count, Milliseconds timeout) {
  COHORT_CHECK(joined(), "ElasticGroup::wait_for_joiners before join()");
  return state_->rendezvous.wait_for_arrivals_after(state_->membership.generation, count, timeout);
}

void ElasticGroup::finish() {
  state_->rendezvous.mark_finished();
}

void ElasticGroup::fail(const std::string& reason) {
  state_->rendezvous.mark_failed(reason);
}

bool ElasticGroup::finished() {
  return state_->rendezvous.finished();
}

void ElasticGroup::set_resume_lost_state(bool resume) {
  COHORT_CHECK(state_->membership.generation == 0,
               "ElasticGroup::set_resume_lost_state after join(): the closer reads it");
  state_->options.resume_lost_state = resume;  // the rendezvous reads these options
}

void ElasticGroup::set_fingerprint(std::string fingerprint) {
  COHORT_CHECK(state_->membership.generation == 0,
               "ElasticGroup::set_fingerprint after join(): members compare it when they arrive");
  state_->options.fingerprint = std::move(fingerprint);
}

// Arrives at the next generation and builds its group; a failure while building it (a member
// died meanwhile) is one more failure, met by the generation after.
const Membership& ElasticGroup::next_generation(int64_t committed_step, int failed_rank) {
  for (;;) {
    elastic::Arrival self;
    self.id = state_->options.member_id;
    self.launch_rank = state_->options.launch_rank;
    self.fingerprint = state_->options.fingerprint;
    self.committed_step = committed_step;
    self.failed_rank = failed_rank;
    if (state_->membership.generation != 0) {
      self.previous_generation = state_->membership.generation;
      self.previous_rank = state_->membership.rank;
    }
    state_->group.reset();  // the old generation's connections and memory go first
    Membership membership = state_->rendezvous.arrive(self);
    try {
      state_->group = Group::create(state_->rendezvous.group_store(membership.generation),
                                    membership.rank, membership.size, state_->options.group);
      state_->membership = std::move(membership);
      COHORT_LOG(kInfo, state_->membership.describe());
      return state_->membership;
    } catch (const PeerError& e) {
      failed_rank = e.failed_rank();
    } catch (const TimeoutError&) {
      failed_rank = -1;
    }
    // Building the group failed: arrive at the next generation as a member of this one.
    state_->membership = std::move(membership);
    committed_step = state_->membership.members[state_->membership.rank].committed_step;
    COHORT_LOG(kWarn, "generation ", state_->membership.generation,
               ": a member failed while its group was being built; forming the next one");
  }
}

const Membership& ElasticGroup::membership() const {
  return state_->membership;
}

Group& ElasticGroup::group() const {
  COHORT_CHECK(state_->group, "ElasticGroup::group before join()");
  return *state_->group;
}

std::shared_ptr<Group> ElasticGroup::group_ptr() const {
  return state_->group;
}
const ElasticOptions& ElasticGroup::options() const {
  return state_->options;
}
bool ElasticGroup::joined() const {
  return state_->group != nullptr;
}

std::unique_ptr<ElasticGroup> init_elastic(InitOptions init, ElasticOptions options) {
  const LaunchEnv env = read_launch_env();
  options.group = init.group.resolved();
  if (env.world_size == 1 && env.launcher == "none") {
    options.initial_size = 1;
    return std::make_unique<ElasticGroup>(std::make_shared<MemoryStore>(), options);
  }
  if (!env.store_hosted && env.rdzv_backend == "tcp") {
    throw ConfigError(
        "init_elastic: the job's store must be hosted by the launcher (COHORT_STORE_HOSTED=1, as "
        "cohortrun --min-ranks does) or be etcd (COHORT_RDZV_BACKEND=etcd), not hosted by a "
        "rank: a rank that hosted it would take the whole job down when it dies");
  }
  if (options.group.host.empty() && env.rdzv_backend == "tcp" &&
      env.master_addr.rfind("127.", 0) == 0) {
    options.group.host = "127.0.0.1";
  }
  std::shared_ptr<Store> job_store = connect_job_store(env, options.group, false);
  if (options.initial_size <= 0) options.initial_size = env.world_size;
  if (options.launch_rank < 0) options.launch_rank = env.rank;
  return std::make_unique<ElasticGroup>(std::move(job_store), options);
}

}  // namespace cohort
