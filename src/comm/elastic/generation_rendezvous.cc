#include "generation_rendezvous.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "cohort/comm/prefix_store.h"
#include "cohort/core/logging.h"
#include "generation_close.h"

namespace cohort::elastic {
namespace {

using nlohmann::json;

constexpr const char* kRoot = "elastic";
// How often a new member deciding a generation alone looks whether the job finished.
constexpr Milliseconds kFinishedPoll{250};

json to_json(const Arrival& a) {
  return {{"id", a.id},
          {"previous_generation", a.previous_generation},
          {"previous_rank", a.previous_rank},
          {"committed_step", a.committed_step},
          {"failed_rank", a.failed_rank},
          {"launch_rank", a.launch_rank},
          {"fingerprint", a.fingerprint}};
}

Arrival arrival_from(const json& j) {
  Arrival a;
  a.id = j.at("id").get<std::string>();
  a.previous_generation = j.at("previous_generation").get<uint64_t>();
  a.previous_rank = j.at("previous_rank").get<int>();
  a.committed_step = j.at("committed_step").get<int64_t>();
  a.failed_rank = j.at("failed_rank").get<int>();
  a.launch_rank = j.at("launch_rank").get<int>();
  a.fingerprint = j.at("fingerprint").get<std::string>();
  return a;
}

// Whether `a` stays from generation - 1 (else it joined `generation`; at the first generation
// every member joined).
bool stays_in(const Arrival& a, uint64_t generation) {
  return a.previous_generation != 0 && a.previous_generation + 1 == generation;
}

json outcome_json(const CloseDecision& d, const std::vector<std::optional<Arrival>>& arrivals) {
  if (d.kind == CloseDecision::Kind::kFail) return {{"ok", false}, {"error", d.error}};
  json members = json::array();
  for (size_t i : d.admitted) {
    json m = to_json(*arrivals[i]);
    m["index"] = i;
    members.push_back(std::move(m));
  }
  json refused = json::object();
  for (const auto& [index, why] : d.refused) refused[std::to_string(index)] = why;
  return {{"ok", true},
          {"members", members},
          {"left", d.left},
          {"refused", refused},
          {"fingerprint", d.fingerprint},
          {"lost_step", d.lost_step}};
}

Milliseconds at_most(Milliseconds a, Milliseconds b) {
  return a < b ? a : b;
}

}  // namespace

GenerationRendezvous::GenerationRendezvous(std::shared_ptr<Store> store,
                                           const ElasticOptions& options)
    : store_(std::move(store)), options_(options) {}

std::string GenerationRendezvous::key(uint64_t generation, const std::string& name) const {
  return std::string(kRoot) + "/g" + std::to_string(generation) + "/" + name;
}

std::shared_ptr<Store> GenerationRendezvous::group_store(uint64_t generation) const {
  return std::make_shared<PrefixStore>(key(generation, "group"), store_);
}

bool GenerationRendezvous::arrivals_after(uint64_t generation) {
  return store_->add(key(generation + 1, "arrive"), 0) > 0;
}

bool GenerationRendezvous::wait_for_arrivals_after(uint64_t generation, int count,
                                                   Milliseconds timeout) {
  if (count <= 0) return true;
  // The last one's record, not the "arrive" counter, which arrivals_after() creates.
  try {
    store_->wait({key(generation + 1, "member/" + std::to_string(count - 1))}, timeout);
    return true;
  } catch (const TimeoutError&) {
    return false;
  }
}

void GenerationRendezvous::mark_finished() {
  store_->add(std::string(kRoot) + "/finished", 1);
}

bool GenerationRendezvous::finished() {
  return store_->add(std::string(kRoot) + "/finished", 0) > 0;
}

// The reason first, then the count that says it is there, then finished.
void GenerationRendezvous::mark_failed(const std::string& reason) {
  const std::string root = kRoot;
  store_->set(root + "/failed_reason", to_bytes(reason));
  store_->add(root + "/failed", 1);
  mark_finished();
}

uint64_t GenerationRendezvous::first_open_generation(const Arrival& self) {
  if (self.previous_generation != 0) return self.previous_generation + 1;
  if (finished()) {
    const std::string root = kRoot;
    if (store_->add(root + "/failed", 0) > 0) {
      throw ElasticError("member " + self.id + " cannot join: the job ended on an error that " +
                         "a new member would meet again: " +
                         to_string(store_->get(root + "/failed_reason", Milliseconds(5000))));
    }
    throw ElasticError("member " + self.id +
                       " cannot join: the job has finished (its members marked it done)");
  }
  const int64_t current = store_->add(std::string(kRoot) + "/current", 0);
  return static_cast<uint64_t>(current) + 1;
}

Membership GenerationRendezvous::arrive(const Arrival& self) {
  const Deadline deadline = Deadline::after(options_.join_timeout + 2 * options_.settle);
  for (uint64_t generation = first_open_generation(self);; ++generation) {
    bool not_admitted = false;
    Membership membership = arrive_at(generation, self, not_admitted);
    if (!not_admitted) return membership;
    if (self.previous_generation != 0) {
      throw ElasticError("member " + self.id + " (rank " + std::to_string(self.previous_rank) +
                         " of generation " + std::to_string(self.previous_generation) +
                         ") was declared dead: generation " + std::to_string(generation) +
                         " formed without it (it arrived too late, after a stop or a hang); "
                         "its state is stale, so it is not merged back. Start it again as a "
                         "new member (cohortrun --min-ranks restarts it)");
    }
    if (deadline.expired()) {
      throw ElasticError("member " + self.id +
                         " found no room in the job within the join "
                         "timeout (ElasticOptions::join_timeout; the job may be at max_size)");
    }
  }
}

Membership GenerationRendezvous::arrive_at(uint64_t generation, const Arrival& self,
                                           bool& not_admitted) {
  const size_t index = static_cast<size_t>(store_->add(key(generation, "arrive"), 1) - 1);
  store_->set(key(generation, "member/" + std::to_string(index)), to_json(self).dump());
  if (index == 0) close(generation);
  const Milliseconds wait = options_.join_timeout + 2 * options_.settle + Milliseconds(5000);
  json outcome;
  try {
    outcome = json::parse(to_string(store_->get(key(generation, "closed"), wait)));
  } catch (const TimeoutError&) {
    throw ElasticError("generation " + std::to_string(generation) +
                       " never formed: its first "
                       "arrival, which decides who is in, stopped before deciding (member " +
                       self.id + " waited " + std::to_string(wait.count()) + " ms)");
  }
  if (!outcome.at("ok").get<bool>()) throw ElasticError(outcome.at("error").get<std::string>());
  const auto& refused = outcome.at("refused");
  if (refused.contains(std::to_string(index))) {
    throw ElasticError(refused.at(std::to_string(index)).get<std::string>());
  }
  Membership m;
  m.generation = generation;
  m.rank = -1;
  for (const auto& entry : outcome.at("members")) {
    const Arrival a = arrival_from(entry);
    const bool stayed = stays_in(a, generation);
    if (entry.at("index").get<size_t>() == index) m.rank = static_cast<int>(m.members.size());
    if (!stayed) m.joined.push_back(static_cast<int>(m.members.size()));
    m.members.push_back({a.id, stayed ? a.previous_rank : -1, a.committed_step});
  }
  m.size = static_cast<int>(m.members.size());
  m.left = outcome.at("left").get<std::vector<int>>();
  m.lost_step = outcome.value("lost_step", int64_t{-1});
  not_admitted = m.rank < 0;
  return m;
}

// The first arrival decides (Note [Elastic rendezvous]); it waits on the next arrival's key.
void GenerationRendezvous::close(uint64_t generation) {
  const Deadline overall = Deadline::after(options_.join_timeout);
  CloseInput input;
  input.generation = generation;
  if (generation > 1) {
    const json previous =
        json::parse(to_string(store_->get(key(generation - 1, "closed"), options_.join_timeout)));
    if (previous.at("ok").get<bool>()) {
      const json& members = previous.at("members");
      input.previous = PreviousGeneration{static_cast<int>(members.size()),
                                          previous.at("fingerprint").get<std::string>(),
                                          members.at(0).at("committed_step").get<int64_t>()};
    }
  }
  std::optional<Deadline> settle;
  for (;;) {
    const auto count = static_cast<size_t>(store_->add(key(generation, "arrive"), 0));
    while (input.arrivals.size() < count) {
      const std::string member = key(generation, "member/" + std::to_string(input.arrivals.size()));
      try {
        input.arrivals.push_back(
            arrival_from(json::parse(to_string(store_->get(member, options_.settle)))));
      } catch (const TimeoutError&) {
        input.arrivals.push_back(std::nullopt);  // it died between counting and writing
      }
    }
    if (!settle && previous_member_arrived(input)) settle = Deadline::after(options_.settle);
    input.settled = settle && settle->expired();
    input.out_of_time = overall.expired();
    input.finished = !settle && finished();
    const CloseDecision decision = decide_close(input, options_);
    if (decision.kind != CloseDecision::Kind::kWait) {
      store_->set(key(generation, "closed"), outcome_json(decision, input.arrivals).dump());
      if (decision.kind == CloseDecision::Kind::kClose) {
        store_->set(std::string(kRoot) + "/current", std::to_string(generation));
      }
      return;
    }
    Deadline until = overall;
    if (settle && !settle->expired()) until = settle->min(overall);
    // Until a running member arrives, look now and then whether the job finished meanwhile.
    if (!settle) until = until.min(Deadline::after(kFinishedPoll));
    const std::string next = key(generation, "member/" + std::to_string(count));
    try {
      store_->wait({next}, at_most(until.remaining(), Milliseconds(24LL * 3600 * 1000)));
    } catch (const TimeoutError&) {
      // a deadline passed: decide again with it
    }
  }
}

}  // namespace cohort::elastic

namespace cohort {

ElasticJobStatus elastic_job_status(Store& job_store, const ElasticJobStatus& last) {
  const std::string root = elastic::kRoot;
  ElasticJobStatus status = last;
  status.finished = job_store.add(root + "/finished", 0) > 0;
  const auto current = static_cast<uint64_t>(job_store.add(root + "/current", 0));
  if (current == 0 || current == last.generation) return status;
  // `current` is written after the generation's outcome (GenerationRendezvous::close).
  const std::string closed = root + "/g" + std::to_string(current) + "/closed";
  const elastic::json outcome =
      elastic::json::parse(to_string(job_store.get(closed, Milliseconds(5000))));
  status.generation = current;
  status.size = static_cast<int>(outcome.at("members").size());
  status.left = static_cast<int>(outcome.at("left").size());
  status.joined = 0;
  for (const auto& member : outcome.at("members")) {
    if (!elastic::stays_in(elastic::arrival_from(member), current)) ++status.joined;
  }
  if (current == 1) status.joined = 0;
  return status;
}

}  // namespace cohort
