#include "generation_close.h"

#include <algorithm>
#include <limits>
#include <set>
#include <tuple>

namespace cohort::elastic {
namespace {

bool from_previous(const CloseInput& input, const Arrival& arrival) {
  return input.previous && arrival.previous_generation + 1 == input.generation &&
         arrival.previous_rank >= 0 && arrival.previous_rank < input.previous->size;
}

// The fingerprint every member must have: the last generation's, else the first launcher rank's.
std::string reference_fingerprint(const CloseInput& input) {
  if (input.previous) return input.previous->fingerprint;
  const Arrival* first = nullptr;
  for (const auto& arrival : input.arrivals) {
    if (!arrival) continue;
    const auto order = [](const Arrival& a) {
      return a.launch_rank < 0 ? std::numeric_limits<int>::max() : a.launch_rank;
    };
    if (!first || order(*arrival) < order(*first)) first = &*arrival;
  }
  return first ? first->fingerprint : std::string();
}

// Whether the closer may stop waiting for members of the last generation.
bool previous_members_in(const CloseInput& input) {
  std::set<int> accounted;
  bool any = false;
  for (const auto& arrival : input.arrivals) {
    if (!arrival || !from_previous(input, *arrival)) continue;
    any = true;
    accounted.insert(arrival->previous_rank);
    if (arrival->failed_rank >= 0) accounted.insert(arrival->failed_rank);
  }
  if (!any) return false;
  return input.settled || static_cast<int>(accounted.size()) >= input.previous->size;
}

std::string refusal(const CloseInput& input, const Arrival& arrival, const std::string& reference) {
  if (arrival.previous_generation != 0 && !from_previous(input, arrival)) {
    return "member " + arrival.id + " was rank " + std::to_string(arrival.previous_rank) +
           " of generation " + std::to_string(arrival.previous_generation) +
           ", which the job left behind: it was declared dead and cannot come back (start it "
           "again as a new member)";
  }
  if (arrival.fingerprint != reference) {
    return "member " + arrival.id + " has another model than the job: its fingerprint is '" +
           arrival.fingerprint + "' but the job's is '" + reference +
           "' (start it with the same model and options)";
  }
  return "";
}

// Survivors with the newest state first, then by old rank, then new members by arrival.
void order_admitted(const CloseInput& input, std::vector<size_t>& indices) {
  const auto key = [&](size_t i) {
    const Arrival& a = *input.arrivals[i];
    const bool member = from_previous(input, a);
    const int launch = a.launch_rank < 0 ? std::numeric_limits<int>::max() : a.launch_rank;
    return std::make_tuple(-a.committed_step, member ? 0 : 1, member ? a.previous_rank : launch, i);
  };
  std::sort(indices.begin(), indices.end(), [&](size_t x, size_t y) { return key(x) < key(y); });
}

}  // namespace

bool previous_member_arrived(const CloseInput& input) {
  for (const auto& arrival : input.arrivals) {
    if (arrival && from_previous(input, *arrival)) return true;
  }
  return false;
}

CloseDecision decide_close(const CloseInput& input, const ElasticOptions& options) {
  CloseDecision decision;
  const std::string g = "generation " + std::to_string(input.generation);
  if (input.previous && !previous_member_arrived(input)) {
    if (input.finished) {
      decision.kind = CloseDecision::Kind::kFail;
      decision.error = g + " cannot form: the job has finished (its members marked it done)";
      return decision;
    }
    if (!input.out_of_time) return decision;
    decision.kind = CloseDecision::Kind::kFail;
    decision.error = g + " cannot form: no member of generation " +
                     std::to_string(input.generation - 1) +
                     " arrived within the join timeout, so the job's state is gone (restart "
                     "it from a checkpoint)";
    return decision;
  }
  const bool ready =
      input.previous
          ? previous_members_in(input)
          : static_cast<int>(input.arrivals.size()) >= options.initial_size || input.out_of_time;
  if (!ready) return decision;

  decision.fingerprint = reference_fingerprint(input);
  std::vector<size_t> candidates;
  for (size_t i = 0; i < input.arrivals.size(); ++i) {
    if (!input.arrivals[i]) continue;
    std::string why = refusal(input, *input.arrivals[i], decision.fingerprint);
    if (why.empty()) {
      candidates.push_back(i);
    } else {
      decision.refused[i] = std::move(why);
    }
  }
  order_admitted(input, candidates);
  if (options.max_size > 0 && static_cast<int>(candidates.size()) > options.max_size) {
    candidates.resize(options.max_size);
  }
  if (static_cast<int>(candidates.size()) < options.min_size) {
    if (!input.out_of_time) return decision;  // wait for more members (restarted ones, joiners)
    decision.kind = CloseDecision::Kind::kFail;
    decision.error = g + " cannot form: " + std::to_string(candidates.size()) +
                     " member(s) arrived within the join timeout but the job needs at least " +
                     std::to_string(options.min_size) + " (ElasticOptions::min_size, --min-ranks)";
    return decision;
  }
  if (input.previous && input.previous->committed_step >= 0 && !candidates.empty() &&
      input.arrivals[candidates.front()]->committed_step < 0) {
    // Members that arrive holding no state (-1) are new, or were being healed when the
    // generation broke: what they hold is partly overwritten, and none may be a source.
    if (!options.resume_lost_state) {
      decision.kind = CloseDecision::Kind::kFail;
      decision.error = g + " cannot form: no member that arrived holds the job's state (of step " +
                       std::to_string(input.previous->committed_step + 1) +
                       "): those that held it left while healing the others (restart the job "
                       "from a checkpoint)";
      return decision;
    }
    decision.lost_step = input.previous->committed_step;  // they resume from a checkpoint
  }
  decision.kind = CloseDecision::Kind::kClose;
  decision.admitted = std::move(candidates);
  if (input.previous) {
    std::set<int> kept;
    for (size_t i : decision.admitted) {
      if (from_previous(input, *input.arrivals[i])) kept.insert(input.arrivals[i]->previous_rank);
    }
    for (int r = 0; r < input.previous->size; ++r) {
      if (!kept.count(r)) decision.left.push_back(r);
    }
  }
  return decision;
}

}  // namespace cohort::elastic
