// cohort's own algorithms as a CollectiveBackend (Note [Backends]): one table from (collective,
// algorithm) to the function that runs it, which is also what the automatic choice asks
// (NativeBackend::has) so that the choice and the dispatch cannot disagree.
#pragma once

#include <vector>

#include "backends/backend.h"

namespace cohort {

class NativeBackend final : public CollectiveBackend {
 public:
  const char* backend_name() const override { return "cohort"; }
  Backend kind() const override { return Backend::kNative; }
  // Host memory only; `plan.algorithm` must be one that has(call.kind, ...).
  void run(const CollectiveCall& call, const Plan& plan, algo::Context& ctx) override;

  // Whether cohort has `algorithm` for `kind` (whether the group can run it is the choice's
  // business: shared memory, several nodes).
  static bool has(CollectiveKind kind, Algorithm algorithm);
  // The algorithms cohort has for `kind`, for error messages.
  static std::vector<Algorithm> algorithms_for(CollectiveKind kind);
};

}  // namespace cohort
