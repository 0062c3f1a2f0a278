#include "backends/backend.h"

#include "transport/call_stamp.h"

namespace cohort {

std::string place_name(int device) {
  return device == kHostMemory ? "host memory" : "CUDA device " + std::to_string(device);
}

std::string CollectiveCall::describe() const {
  return describe_call(make_stamp(kind, count, dtype, op, root, CallSite::kUser));
}

}  // namespace cohort
