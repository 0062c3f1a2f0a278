// Which API call issued a collective, for errors that name it when ranks are out of step
// ("rank 0 called broadcast(...) in DistributedDataParallel's constructor").
//
// Note [Call site names]
// A call site is a small id that rides in every message's CallStamp (one byte), and a name that
// only errors print. comm owns three ids (the user's own calls, group creation, registered
// memory) and knows nothing of the layers above it: they pick their
// ids as constants (src/torch/call_sites.h) and register their names here. The ids are
// constants, not handed out in registration order, because a receiver names the sender's site
// from the id on the wire: every process must agree on them whatever it registered first. The
// names live in a table that a function-local static owns, so a registration from another
// library's static initializer (call_sites.h registers that way, before main) never meets an
// unconstructed table; the entries are atomics because any thread may read them while another
// library registers. A site is not compared across ranks: DDP's join() stands in for the
// gradient allreduces of ranks still training, from another call site.
#pragma once

#include <cstdint>

namespace cohort {

struct CallSite {
  uint8_t id = 0;

  // comm's own sites; user code leaves kUser.
  static const CallSite kUser;
  static const CallSite kGroupSetup;
  static const CallSite kRegisteredMemory;

  constexpr bool operator==(CallSite other) const { return id == other.id; }
  constexpr bool operator!=(CallSite other) const { return id != other.id; }
};
// The numbers are the ones the sites had as an enum; they travel on the wire.
inline constexpr CallSite CallSite::kUser{0};
inline constexpr CallSite CallSite::kGroupSetup{8};
inline constexpr CallSite CallSite::kRegisteredMemory{19};
// Every other id is free for the layers above (register_call_site).
inline constexpr int kNumCallSites = 256;

// Gives `site` its name in errors. The name must outlive the program (a literal). Registering
// the same name again is harmless; another name for a taken id, or one of comm's own ids, is a
// bug (COHORT_INTERNAL_ASSERT).
void register_call_site(CallSite site, const char* name);

// "DistributedDataParallel's constructor", ...; "" for kUser and for an id nobody registered.
const char* call_site_name(CallSite site);

}  // namespace cohort
