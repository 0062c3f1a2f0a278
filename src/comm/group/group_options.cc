#include "cohort/comm/group.h"
#include "cohort/core/env.h"
#include "cohort/core/error.h"

namespace cohort {

// Knobs read here (docs/env.md):
//   COHORT_TIMEOUT_S   default deadline of every collective, seconds (default 300)
//   COHORT_ALGO        algorithm for every collective that has it (auto, ring, tree, hd, direct)
//   COHORT_DEBUG       "detail": check that all ranks call matching collectives
//   COHORT_CHECK_CALLS 0: no call stamps on collective messages (GroupOptions::check_calls)
//   COHORT_HOST        address peers use to reach this rank over TCP
//   COHORT_JOB_TOKEN   secret every TCP connection of the job presents
//   COHORT_SHM         0: never use shared memory between ranks on one host
//   COHORT_NODE_ID     names this rank's node instead of the detected host
GroupOptions GroupOptions::resolved() const {
  GroupOptions out = *this;
  if (out.timeout.count() <= 0) {
    const auto seconds = env_double("COHORT_TIMEOUT_S");
    constexpr double kMaxSeconds = 30.0 * 24 * 3600;  // 30 days: beyond, a typo, not a wish
    if (seconds && (*seconds <= 0 || *seconds > kMaxSeconds)) {
      throw ConfigError("COHORT_TIMEOUT_S must be a number of seconds in (0, 2592000], got " +
                        std::to_string(*seconds));
    }
    out.timeout = Milliseconds(static_cast<int64_t>((seconds ? *seconds : 300.0) * 1000.0));
  }
  if (out.algorithm == Algorithm::kAuto) {
    if (auto algo_name = env_string("COHORT_ALGO")) {
      try {
        out.algorithm = parse_algorithm(*algo_name);
      } catch (const InvalidArgument& e) {
        throw ConfigError(std::string("COHORT_ALGO: ") + e.what());
      }
    }
  }
  if (!out.debug_checks) {
    const auto debug = env_string("COHORT_DEBUG");
    if (debug && *debug != "off" && *debug != "detail" && *debug != "0") {
      throw ConfigError("COHORT_DEBUG='" + *debug + "' is not understood: use 'detail' or 'off'");
    }
    out.debug_checks = debug && *debug == "detail";
  }
  if (out.check_calls) out.check_calls = env_int("COHORT_CHECK_CALLS").value_or(1) != 0;
  if (out.host.empty()) out.host = env_string("COHORT_HOST").value_or("");
  if (out.job_token.empty()) out.job_token = env_string("COHORT_JOB_TOKEN").value_or("");
  if (out.shared_memory) out.shared_memory = env_int("COHORT_SHM").value_or(1) != 0;
  if (out.node_id.empty()) out.node_id = env_string("COHORT_NODE_ID").value_or("");
  return out;
}

}  // namespace cohort
