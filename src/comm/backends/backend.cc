#include "backends/backend.h"

#include "call_stamp.h"

namespace cohort {

std::string CollectiveCall::describe() const {
  return describe_call(make_stamp(kind, count, dtype, op, root, CallSite::kUser));
}

}  // namespace cohort
