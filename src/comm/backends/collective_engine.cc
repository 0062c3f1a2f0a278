#include "backends/collective_engine.h"

#include "cohort/core/check.h"

namespace cohort {

// The Group calls these only for engine_only() engines, which all override them.
void CollectiveEngine::send(const void*, size_t, int, const EngineCall&) {
  COHORT_INTERNAL_ASSERT(false, engine_name(), " has no send of its own");
}

void CollectiveEngine::recv(void*, size_t, int, const EngineCall&) {
  COHORT_INTERNAL_ASSERT(false, engine_name(), " has no recv of its own");
}

}  // namespace cohort
