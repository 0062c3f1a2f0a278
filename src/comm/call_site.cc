// The table of call-site names (Note [Call site names] in cohort/comm/call_site.h).
#include "cohort/comm/call_site.h"

#include <array>
#include <atomic>
#include <cstring>

#include "cohort/core/check.h"

namespace cohort {

namespace {

struct NameTable {
  std::array<std::atomic<const char*>, kNumCallSites> names{};
  NameTable() {
    for (auto& name : names) name.store(nullptr, std::memory_order_relaxed);
    names[CallSite::kUser.id].store("", std::memory_order_relaxed);
    names[CallSite::kGroupSetup.id].store("group creation", std::memory_order_relaxed);
    names[CallSite::kRegisteredMemory.id].store("Group::allocate_registered",
                                                std::memory_order_relaxed);
  }
};

bool is_comm_site(CallSite site) {
  return site == CallSite::kUser || site == CallSite::kGroupSetup ||
         site == CallSite::kRegisteredMemory;
}

// A function-local static: constructed on first use, even from another library's static
// initializer (Note [Call site names]).
std::array<std::atomic<const char*>, kNumCallSites>& names() {
  static NameTable table;
  return table.names;
}

}  // namespace

void register_call_site(CallSite site, const char* name) {
  COHORT_INTERNAL_ASSERT(name != nullptr && !is_comm_site(site),
                         "call site " + std::to_string(site.id) + " belongs to comm");
  const char* expected = nullptr;
  if (names()[site.id].compare_exchange_strong(expected, name, std::memory_order_acq_rel)) return;
  COHORT_INTERNAL_ASSERT(std::strcmp(expected, name) == 0, "call site " + std::to_string(site.id) +
                                                               " is \"" + expected +
                                                               "\" already, not \"" + name + "\"");
}

const char* call_site_name(CallSite site) {
  const char* name = names()[site.id].load(std::memory_order_acquire);
  return name == nullptr ? "" : name;
}

}  // namespace cohort
