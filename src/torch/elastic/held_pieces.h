// What a member of a sharded elastic job holds of the model: its own shards, and the buddy copy
// of its ring predecessor's (Note [Buddy copies] in buddy_copy.h). Each is a RankHoldings (the
// ranges, as sharded checkpoints describe them) with the optimizer whose state is kept for its
// tensors, labelled with whose ranges they are and the committed step they are at, so that the
// members of a new generation can tell which pieces still make the model.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>

#include "rank_holdings.h"

namespace cohort::detail {

struct HeldPieces {
  uint64_t generation = 0;  // the generation these ranges were cut for
  int rank = -1;            // whose ranges, in that generation (-1: nothing held)
  int world = 0;            // that generation's size
  int64_t committed = -1;   // the committed steps their values and state include
  RankHoldings holdings;    // shards (1-D ranges of the named parameters) only
  std::unique_ptr<torch::optim::Optimizer> optimizer;  // its state for holdings' tensors

  bool held() const { return rank >= 0; }
  void clear() {
    rank = -1;
    holdings = RankHoldings{};
    optimizer.reset();
  }
};

}  // namespace cohort::detail
