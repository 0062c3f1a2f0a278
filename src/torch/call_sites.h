// The call sites of the torch layer: which of its calls issued a collective, named in errors
// when ranks are out of step (Note [Call site names] in cohort/comm/call_site.h).
#pragma once

#include "cohort/comm/call_site.h"

namespace cohort {
namespace call_sites {

// Constant ids: a receiver names the sender's site from the id on the wire. They keep the
// numbers they had when comm listed them; comm owns 0, 8 and 19.
inline constexpr CallSite kDdpConstructor{1};
inline constexpr CallSite kDdpGradients{2};
inline constexpr CallSite kDdpUnusedParameters{3};
inline constexpr CallSite kDdpJoin{4};
inline constexpr CallSite kDdpBuffers{5};
inline constexpr CallSite kCheckpointSave{6};
inline constexpr CallSite kCheckpointLoad{7};
inline constexpr CallSite kZeroGradients{9};
inline constexpr CallSite kZeroParameters{10};
inline constexpr CallSite kGradNorm{11};
inline constexpr CallSite kFsdpConstructor{12};
inline constexpr CallSite kFsdpParameters{13};
inline constexpr CallSite kFsdpGradients{14};
inline constexpr CallSite kFsdpEndOfBackward{15};
inline constexpr CallSite kGradScaler{16};
inline constexpr CallSite kSyncBatchNormForward{17};
inline constexpr CallSite kSyncBatchNormBackward{18};
inline constexpr CallSite kZeroConstructor{20};
inline constexpr CallSite kElasticCommit{21};
inline constexpr CallSite kElasticHeal{22};
inline constexpr CallSite kElasticBuddy{23};
inline constexpr CallSite kDiLoCoConstructor{24};
inline constexpr CallSite kDiLoCoRound{25};
inline constexpr CallSite kAsyncCheckpoint{26};

// Registers the names of every site above with comm; idempotent.
bool register_names();

// Every file that uses a site includes this header, so the program that can send a site's id
// has registered every name before main (and so can name a peer's site in an error, even one
// this process never used). The ids are constants, so nothing depends on the order in which
// static initializers run.
inline const bool kNamesRegistered = register_names();

}  // namespace call_sites
}  // namespace cohort
