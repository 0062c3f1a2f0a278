#include "group/operation.h"

#include "transport/call_stamp.h"

namespace cohort {

std::string Signature::describe() const {
  std::string text = describe_call(stamp());
  if (peer >= 0) text.insert(text.size() - 1, ", peer=" + std::to_string(peer));
  return text;
}

CallStamp Signature::stamp() const {
  return make_stamp(kind, count, dtype, op, root, site);
}

std::string Operation::describe() const {
  if (!collective) return signature.describe();
  return std::string(collective_name(signature.kind)) + " #" + std::to_string(sequence) + " " +
         signature.describe();
}

}  // namespace cohort
