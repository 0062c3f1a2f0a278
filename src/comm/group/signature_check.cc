// COHORT_DEBUG=detail: before each collective, every rank publishes what it is about to call
// and compares with all the others, so a mismatch (another count, dtype, op, root or another
// collective altogether) is named instead of showing up as a hang or a size error.
#include <map>

#include "backends/collective_engine.h"
#include "cohort/core/error.h"
#include "group/group_impl.h"

namespace cohort {

namespace {
constexpr size_t kSignatureRecordBytes = 256;

std::string signature_key(uint64_t sequence, int rank) {
  return "debug/" + std::to_string(sequence) + "/" + std::to_string(rank);
}

// What a rank publishes: its call, then where cohort issued it ("" for the user's own). Ranks
// are compared on the call alone (a finished rank's join shadows the others' gradient
// allreduces from another site), and the site is named in the error (issue 35: a rank that
// skipped FSDP's constructor saw only "allgather" against "barrier").
std::string record_of(const Signature& signature) {
  return signature.describe() + '\n' + call_site_name(signature.site);
}
std::string call_of(const std::string& record) {
  return record.substr(0, record.find('\n'));
}
std::string site_of(const std::string& record) {
  const size_t newline = record.find('\n');
  return newline == std::string::npos ? "" : record.substr(newline + 1);
}
}  // namespace

std::vector<std::string> Group::Impl::gather_signatures(const Operation& op, Deadline deadline) {
  const std::string mine = record_of(op.signature);
  std::vector<std::string> calls;
  if (!store_) {
    // Fixed-size records through the engine's all-gather (every description is far shorter).
    std::string record = mine;
    record.resize(kSignatureRecordBytes, '\0');
    std::string all(kSignatureRecordBytes * static_cast<size_t>(size()), '\0');
    engine()->allgather(record.data(), all.data(), kSignatureRecordBytes, DType::kUInt8, deadline);
    for (int r = 0; r < size(); ++r) {
      calls.push_back(all.substr(r * kSignatureRecordBytes, kSignatureRecordBytes).c_str());
    }
    return calls;
  }
  store_->set(signature_key(op.sequence, rank()), mine);
  std::vector<std::string> keys;
  for (int r = 0; r < size(); ++r) keys.push_back(signature_key(op.sequence, r));
  store_->wait(keys, deadline.remaining());
  for (int r = 0; r < size(); ++r) {
    calls.push_back(to_string(store_->get(keys[r], deadline.remaining())));
  }
  // Every rank has read the keys of the previous collective before publishing this one's, so
  // our key from two collectives ago is no longer needed by anyone.
  if (op.sequence >= 2) store_->delete_key(signature_key(op.sequence - 2, rank()));
  return calls;
}

void Group::Impl::check_signatures(const Operation& op, Deadline deadline) {
  const std::vector<std::string> records = gather_signatures(op, deadline);
  std::map<std::string, std::string> ranks_by_call;  // call -> "0, 2"
  std::map<std::string, std::string> site_of_call;   // call -> its first rank's site
  for (int r = 0; r < size(); ++r) {
    const std::string& record = records[static_cast<size_t>(r)];
    auto& ranks = ranks_by_call[call_of(record)];
    ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    site_of_call.emplace(call_of(record), site_of(record));
  }
  if (ranks_by_call.size() == 1) return;

  std::string detail;
  for (const auto& [call, ranks] : ranks_by_call) {
    const std::string& site = site_of_call[call];
    detail += "\n  ranks " + ranks + " called " + call + (site.empty() ? "" : " in " + site);
  }
  throw InvalidArgument("COHORT_DEBUG=detail: ranks disagree on collective #" +
                        std::to_string(op.sequence) + ":" + detail);
}

}  // namespace cohort
