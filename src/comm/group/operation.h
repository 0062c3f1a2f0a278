// One call of a group as it waits in the queue and runs: what it is (Signature), its place in
// the group's order, and the body that runs it (chosen by the dispatcher, dispatcher.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "algorithms/context.h"
#include "cohort/comm/options.h"
#include "cohort/comm/work.h"
#include "transport/call_stamp.h"

namespace cohort {

// What a rank believes it is calling; compared across ranks by COHORT_DEBUG=detail.
struct Signature {
  CollectiveKind kind = CollectiveKind::kBarrier;
  size_t count = 0;
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  int peer = -1;  // send/recv only
  CallSite site = CallSite::kUser;

  std::string describe() const;
  // What this rank's messages of the call carry (transport/call_stamp.h).
  CallStamp stamp() const;
};

struct Operation {
  Signature signature;
  bool collective = true;
  uint64_t sequence = 0;  // collectives: the group's sequence number at issue time
  uint64_t channel = 0;   // send/recv: kP2PChannelBit | user tag
  Milliseconds timeout{0};
  std::function<void(algo::Context&)> body;
  std::shared_ptr<Work> work;

  std::string describe() const;
};

}  // namespace cohort
