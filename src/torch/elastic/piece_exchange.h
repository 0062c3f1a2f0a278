// Re-slicing the pieces that the members of a new generation hold (their own shards and buddy
// copies of the last one, Note [Buddy copies] in buddy_copy.h) into the new generation's
// ranges, as a sharded checkpoint saved at one world size loads at another: by (parameter name,
// element range), with the same code (shard_pieces.h, piece_install.h).
//
// Note [Piece exchange]
//  1. Every member describes what it holds (for its own and its buddy pieces: generation, rank,
//     world size, committed step and the ranges of every parameter) and its new ranges; one
//     all-gather. So every member reaches the same plan from the same table.
//  2. Pieces at the committed step of the newest generation count; each rank of that
//     generation is taken from one holder, the member itself before its buddy. Under
//     HYBRID_SHARD the ranks of different nodes hold the same ranges: a rank whose ranges equal
//     an earlier one's is not sent. A rank no member holds is lost, unless the ranks taken cover
//     every element (its replica on another node holds its ranges): the verdict names the lost
//     ranks, and nothing is changed.
//  3. Rank by rank of the plan, its holder encodes its pieces as a sharded checkpoint's shard
//     file does (encode_shard_payload) and sends them to each member whose new ranges, or whose
//     predecessor's, overlap them; each receiver keeps the overlaps (PieceCollector).
//  4. Each member installs its ranges (values, optimizer state) and builds its buddy copy of its
//     predecessor's new ranges with an optimizer of its own.
// Transient memory on a member: the collected ranges (its own and its predecessor's: about 2/W
// of the parameters and their state) and one encoded payload at a time (what one holder holds).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cohort/comm/group.h"
#include "cohort/torch/elastic/elastic_trainer.h"
#include "elastic/held_pieces.h"

namespace cohort::detail {

struct ExchangePlan {
  bool nothing_held = false;           // no member holds pieces (a job's start)
  uint64_t generation = 0;             // of the pieces taken
  std::vector<int> lost;               // ranks of that generation no member holds
  std::vector<int64_t> table;          // every member's row (Note [Piece exchange], step 1)
  static constexpr int kNone = -1;     // a rank no member holds
  static constexpr int kReplica = -2;  // a rank whose ranges an earlier rank holds (HYBRID_SHARD)
  std::vector<int> holder;        // by rank of that generation: the member that sends its pieces
  std::vector<int> slot;          // 0: the holder's own pieces, 1: its buddy copy
  std::string lost_text() const;  // "rank 3" / "ranks 1 and 2"
};

// Steps 1 and 2 (collective): what holds what, and what is lost. `held`: this member's own and
// buddy pieces (either may hold nothing); `fresh`: this member's new holdings.
ExchangePlan plan_exchange(Group& group, const HeldPieces* held[2], int64_t committed,
                           const HeldPieces& fresh);

// Steps 3 and 4 (collective): `own` (the new generation's holdings and optimizer) takes its
// values and state; `buddy`, when not null, is built for the predecessor's new ranges.
void exchange_pieces(Group& group, const ExchangePlan& plan, const HeldPieces* held[2],
                     HeldPieces& own, HeldPieces* buddy, const ElasticOptimizerFactory& factory);

}  // namespace cohort::detail
