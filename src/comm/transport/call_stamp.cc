#include "transport/call_stamp.h"

#include <sstream>

#include "cohort/core/error.h"

namespace cohort {

namespace {

bool has_op(CollectiveKind kind) {
  return kind == CollectiveKind::kAllreduce || kind == CollectiveKind::kReduce ||
         kind == CollectiveKind::kReduceScatter;
}

bool has_root(CollectiveKind kind) {
  return kind == CollectiveKind::kBroadcast || kind == CollectiveKind::kReduce ||
         kind == CollectiveKind::kGather || kind == CollectiveKind::kScatter;
}

}  // namespace

CallStamp make_stamp(CollectiveKind kind, size_t count, DType dtype, ReduceOp op, int root,
                     CallSite site) {
  CallStamp stamp;
  stamp.kind = static_cast<uint8_t>(static_cast<uint8_t>(kind) + 1);
  stamp.count = count;
  stamp.dtype = static_cast<uint8_t>(dtype);
  // Parts that do not apply are left at zero, so that they cannot make two calls differ.
  stamp.op = has_op(kind) ? static_cast<uint8_t>(op) : 0;
  stamp.root = has_root(kind) ? root : 0;
  stamp.site = site.id;
  return stamp;
}

std::string describe_call(const CallStamp& stamp) {
  if (!stamp.stamped() || stamp.kind > static_cast<uint8_t>(CollectiveKind::kRecv) + 1 ||
      stamp.dtype >= kNumDTypes || stamp.op >= kNumReduceOps) {
    return "an unknown call";
  }
  const auto kind = static_cast<CollectiveKind>(stamp.kind - 1);
  std::ostringstream out;
  out << collective_name(kind) << "(count=" << stamp.count
      << ", dtype=" << dtype_name(static_cast<DType>(stamp.dtype));
  if (has_op(kind)) out << ", op=" << reduce_op_name(static_cast<ReduceOp>(stamp.op));
  if (has_root(kind)) out << ", root=" << stamp.root;
  out << ")";
  return out.str();
}

std::string describe_call_and_site(const CallStamp& stamp) {
  std::string text = describe_call(stamp);
  const char* site = call_site_name(CallSite{stamp.site});
  if (*site != '\0') text += std::string(" in ") + site;
  return text;
}

MismatchError call_mismatch(uint64_t mine_sequence, int mine_rank, const CallStamp& mine,
                            uint64_t theirs_sequence, int theirs_rank, const CallStamp& theirs) {
  std::string text = "collectives out of step";
  const std::string mine_call =
      "rank " + std::to_string(mine_rank) + " called " + describe_call_and_site(mine);
  const std::string theirs_call =
      "rank " + std::to_string(theirs_rank) + " called " + describe_call_and_site(theirs);
  if (mine_sequence == theirs_sequence) {
    text += " at collective #" + std::to_string(mine_sequence) + " of the group: " + mine_call +
            " but " + theirs_call;
  } else {
    text += ": " + mine_call + " as its collective #" + std::to_string(mine_sequence) + " but " +
            theirs_call + " as its collective #" + std::to_string(theirs_sequence);
  }
  return MismatchError(text +
                       ". Every rank must call the same collectives in the same order with the "
                       "same count, dtype, op and root (docs/errors.md, \"Collectives out of "
                       "step\")");
}

uint64_t call_fingerprint(uint64_t sequence, const CallStamp& stamp) {
  // FNV-1a over the fields that must agree.
  uint64_t hash = 1469598103934665603ULL;
  auto mix = [&hash](uint64_t value, int bytes) {
    for (int i = 0; i < bytes; ++i) {
      hash ^= (value >> (8 * i)) & 0xff;
      hash *= 1099511628211ULL;
    }
  };
  mix(sequence, 8);
  mix(stamp.count, 8);
  mix(static_cast<uint32_t>(stamp.root), 4);
  mix(stamp.kind, 1);
  mix(stamp.dtype, 1);
  mix(stamp.op, 1);
  return hash;
}

}  // namespace cohort
