// Note [Call stamps] under an engine (MPI): before each collective, one allreduce of 16 bytes
// tells every rank whether all made the same call; only when they did not does a second,
// all-gather of the calls, find out who called what, so that every rank throws the same error.
#include <array>

#include "backends/collective_engine.h"
#include "group/group_impl.h"
#include "transport/call_stamp.h"

namespace cohort {

namespace {

// What each rank contributes when the fingerprints differ.
struct CallRecord {
  uint64_t sequence;
  CallStamp stamp;
};

}  // namespace

void Group::Impl::check_call_through_engine(uint64_t sequence, const CallStamp& stamp,
                                            Deadline deadline) {
  CollectiveEngine& engine = *this->engine();
  // max(f) and max(~f) = ~min(f) in one call: all fingerprints agree iff min == max.
  const auto fingerprint = static_cast<int64_t>(call_fingerprint(sequence, stamp));
  std::array<int64_t, 2> extremes{fingerprint, ~fingerprint};
  engine.allreduce(extremes.data(), extremes.data(), extremes.size(), DType::kInt64, ReduceOp::kMax,
                   deadline);
  if (extremes[0] == ~extremes[1]) return;

  const CallRecord mine{sequence, stamp};
  std::vector<CallRecord> all(static_cast<size_t>(size()));
  engine.allgather(&mine, all.data(), sizeof mine, DType::kUInt8, deadline);
  // Every rank names the same pair: the lowest rank and the first rank whose call differs.
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r].sequence == all[0].sequence && all[r].stamp.same_call(all[0].stamp)) continue;
    throw call_mismatch(all[0].sequence, 0, all[0].stamp, all[r].sequence, static_cast<int>(r),
                        all[r].stamp);
  }
}

}  // namespace cohort
