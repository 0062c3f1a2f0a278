#include "cohort/comm/options.h"

#include "cohort/core/error.h"

namespace cohort {

const char* algorithm_name(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kAuto: return "auto";
    case Algorithm::kRing: return "ring";
    case Algorithm::kTree: return "tree";
    case Algorithm::kHalvingDoubling: return "halving_doubling";
    case Algorithm::kDirect: return "direct";
    case Algorithm::kShm: return "shm";
  }
  return "unknown-algorithm";
}

Algorithm parse_algorithm(const std::string& name) {
  if (name == "auto") return Algorithm::kAuto;
  if (name == "ring") return Algorithm::kRing;
  if (name == "tree") return Algorithm::kTree;
  if (name == "hd" || name == "halving_doubling" || name == "rabenseifner") {
    return Algorithm::kHalvingDoubling;
  }
  if (name == "direct") return Algorithm::kDirect;
  if (name == "shm") return Algorithm::kShm;
  throw InvalidArgument("unknown algorithm '" + name +
                        "': use auto, ring, tree, halving_doubling (hd), direct or shm");
}

}  // namespace cohort
