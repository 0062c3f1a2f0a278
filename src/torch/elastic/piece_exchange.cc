#include "elastic/piece_exchange.h"

#include <algorithm>
#include <unordered_set>

#include "call_sites.h"
#include "checkpoint/checkpoint_collectives.h"
#include "checkpoint/piece_install.h"
#include "checkpoint/shard_pieces.h"
#include "checkpoint/sharded_common.h"
#include "cohort/core/check.h"
#include "elastic/buddy_copy.h"

namespace cohort::detail {
namespace {

constexpr CallSite kHeal = call_sites::kElasticHeal;
constexpr int kSlotHeader = 5;  // present, generation, rank, world, committed

// A view of the all-gathered table: row of member m, slot s (0 own, 1 buddy), and new ranges.
struct PieceTable {
  const std::vector<int64_t>& all;
  size_t tensors;
  size_t slot_size() const { return kSlotHeader + 2 * tensors; }
  size_t row_size() const { return 2 * slot_size() + 2 * tensors; }
  const int64_t* slot(int member, int s) const {
    return all.data() + static_cast<size_t>(member) * row_size() +
           static_cast<size_t>(s) * slot_size();
  }
  const int64_t* fresh(int member) const {
    return all.data() + static_cast<size_t>(member) * row_size() + 2 * slot_size();
  }
  int members() const { return static_cast<int>(all.size() / row_size()); }
};

void append_ranges(std::vector<int64_t>& row, const RankHoldings& holdings) {
  for (const ParameterShard& shard : holdings.shards) {
    row.push_back(shard.offset);
    row.push_back(shard.length);
  }
}

void append_slot(std::vector<int64_t>& row, const HeldPieces* pieces, size_t tensors) {
  if (pieces == nullptr || !pieces->held()) {
    row.insert(row.end(), kSlotHeader + 2 * tensors, 0);
    return;
  }
  COHORT_INTERNAL_ASSERT(pieces->holdings.shards.size() == tensors, "held pieces of ",
                         pieces->holdings.shards.size(), " tensors, the model has ", tensors);
  row.insert(row.end(), {1, static_cast<int64_t>(pieces->generation), pieces->rank, pieces->world,
                         pieces->committed});
  append_ranges(row, pieces->holdings);
}

const int64_t* planned_ranges(const ExchangePlan& plan, const PieceTable& table, size_t r) {
  return table.slot(plan.holder[r], plan.slot[r]) + kSlotHeader;
}

// HYBRID_SHARD: the members of different nodes hold the same ranges (replicas). A rank whose
// ranges equal an earlier planned rank's adds nothing: it is not sent (kReplica).
void drop_replica_ranks(ExchangePlan& plan, const PieceTable& table) {
  for (size_t r = 0; r < plan.holder.size(); ++r) {
    if (plan.holder[r] < 0) continue;
    const int64_t* mine = planned_ranges(plan, table, r);
    for (size_t earlier = 0; earlier < r; ++earlier) {
      if (plan.holder[earlier] < 0) continue;
      const int64_t* theirs = planned_ranges(plan, table, earlier);
      if (std::equal(mine, mine + 2 * table.tensors, theirs)) {
        plan.holder[r] = ExchangePlan::kReplica;
        break;
      }
    }
  }
}

// Whether the planned ranks' ranges cover every element of every tensor: then a rank that no
// member holds lost nothing (its replicas hold it).
bool planned_ranges_cover(const ExchangePlan& plan, const PieceTable& table,
                          const RankHoldings& fresh) {
  for (size_t i = 0; i < table.tensors; ++i) {
    std::vector<std::pair<int64_t, int64_t>> spans;
    for (size_t r = 0; r < plan.holder.size(); ++r) {
      if (plan.holder[r] < 0) continue;
      const int64_t* ranges = planned_ranges(plan, table, r);
      if (ranges[2 * i + 1] > 0)
        spans.emplace_back(ranges[2 * i], ranges[2 * i] + ranges[2 * i + 1]);
    }
    std::sort(spans.begin(), spans.end());
    int64_t reached = 0;
    for (const auto& [begin, end] : spans) {
      if (begin > reached) return false;
      reached = std::max(reached, end);
    }
    if (reached < fresh.shards[i].numel()) return false;
  }
  return true;
}

bool overlaps(const int64_t* a, const int64_t* b, size_t tensors) {
  for (size_t i = 0; i < tensors; ++i) {
    const int64_t a0 = a[2 * i], a1 = a0 + a[2 * i + 1], b0 = b[2 * i], b1 = b0 + b[2 * i + 1];
    if (a1 > a0 && b1 > b0 && a0 < b1 && b0 < a1) return true;
  }
  return false;
}

std::unordered_set<const void*> stepped_tensors(const HeldPieces& own) {
  std::unordered_set<const void*> stepped;
  if (!own.optimizer) return stepped;
  for (const auto& group : own.optimizer->param_groups()) {
    for (const auto& tensor : group.params()) stepped.insert(tensor.unsafeGetTensorImpl());
  }
  return stepped;
}

// The manifest-like table of the pieces the plan takes: rank r of the plan's generation is
// "saved rank" r, as if it had written a shard file.
std::vector<ManifestTensor> planned_pieces(const ExchangePlan& plan, const PieceTable& table,
                                           const RankHoldings& fresh) {
  std::vector<ManifestTensor> tensors;
  for (const ParameterShard& shard : fresh.shards) {
    tensors.push_back({shard.name, false, shard.shape, c10::toString(shard.dtype), {}});
  }
  for (size_t r = 0; r < plan.holder.size(); ++r) {
    if (plan.holder[r] < 0) continue;
    const int64_t* ranges = planned_ranges(plan, table, r);
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (ranges[2 * i + 1] > 0) {
        tensors[i].pieces.push_back({static_cast<int>(r), ranges[2 * i], ranges[2 * i + 1]});
      }
    }
  }
  return tensors;
}

// The buddy copy of the predecessor's new ranges, from what was collected for them.
void build_buddy(const RankHoldings& fresh, const int64_t* ranges,
                 const std::unordered_set<const void*>& stepped, std::vector<Collected>& collected,
                 HeldPieces& buddy, const ElasticOptimizerFactory& factory) {
  const size_t first = fresh.shards.size();
  buddy.holdings = RankHoldings{};
  for (size_t i = 0; i < fresh.shards.size(); ++i) {
    ParameterShard shard = fresh.shards[i];
    shard.offset = ranges[2 * i];
    shard.length = ranges[2 * i + 1];
    shard.full_parameter = torch::Tensor();
    shard.tensor = collected[first + i].values.clone().set_requires_grad(
        stepped.count(fresh.shards[i].tensor.unsafeGetTensorImpl()) != 0);
    buddy.holdings.shards.push_back(std::move(shard));
  }
  buddy.optimizer = factory(named_tensors(buddy));
  const OptimizerCodec* codec = codec_of(*buddy.optimizer);
  install_optimizer_state(*buddy.optimizer, *codec, buddy.holdings, collected, first);
}

}  // namespace

std::string ExchangePlan::lost_text() const {
  std::string text = lost.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < lost.size(); ++i) {
    if (i > 0) text += i + 1 == lost.size() ? " and " : ", ";
    text += std::to_string(lost[i]);
  }
  return text;
}

ExchangePlan plan_exchange(Group& group, const HeldPieces* held[2], int64_t committed,
                           const HeldPieces& fresh) {
  const size_t tensors = fresh.holdings.shards.size();
  std::vector<int64_t> mine;
  append_slot(mine, held[0], tensors);
  append_slot(mine, held[1], tensors);
  append_ranges(mine, fresh.holdings);
  ExchangePlan plan;
  plan.table = allgather_rows(group, mine, kHeal);
  const PieceTable table{plan.table, tensors};
  // The newest generation among the pieces at the committed step (Note [Piece exchange]).
  bool any = false, valid = false;
  int world = 0;
  for (int m = 0; m < table.members(); ++m) {
    for (int s = 0; s < 2; ++s) {
      const int64_t* slot = table.slot(m, s);
      if (slot[0] == 0) continue;
      any = true;
      const auto generation = static_cast<uint64_t>(slot[1]);
      if (slot[4] != committed || (valid && generation < plan.generation)) continue;
      valid = true;
      plan.generation = generation;
      world = static_cast<int>(slot[3]);
    }
  }
  plan.nothing_held = !any;
  if (!any) return plan;
  plan.holder.assign(static_cast<size_t>(world), ExchangePlan::kNone);
  plan.slot.assign(static_cast<size_t>(world), 0);
  for (int s = 0; s < 2; ++s) {
    for (int m = 0; m < table.members(); ++m) {
      const int64_t* slot = table.slot(m, s);
      if (slot[0] == 0 || slot[4] != committed || static_cast<uint64_t>(slot[1]) != plan.generation)
        continue;
      const auto r = static_cast<size_t>(slot[2]);
      if (plan.holder[r] < 0) {
        plan.holder[r] = m;
        plan.slot[r] = s;
      }
    }
  }
  drop_replica_ranks(plan, table);
  for (int r = 0; r < world; ++r) {
    if (plan.holder[static_cast<size_t>(r)] == ExchangePlan::kNone) plan.lost.push_back(r);
  }
  if (!plan.lost.empty() && planned_ranges_cover(plan, table, fresh.holdings)) plan.lost.clear();
  if (!valid) plan.lost = {-1};  // pieces, but none at the committed step: a bug upstream
  return plan;
}

void exchange_pieces(Group& group, const ExchangePlan& plan, const HeldPieces* held[2],
                     HeldPieces& own, HeldPieces* buddy, const ElasticOptimizerFactory& factory) {
  COHORT_INTERNAL_ASSERT(plan.lost.empty() && !plan.nothing_held, "exchange of an incomplete plan");
  const size_t tensors = own.holdings.shards.size();
  const PieceTable table{plan.table, tensors};
  const int me = group.rank(), world = group.size();
  auto predecessor = [&](int m) { return (m + world - 1) % world; };
  const bool buddies = buddy != nullptr && world > 1;
  const auto stepped = stepped_tensors(own);
  std::vector<PieceNeed> needs;
  for (int copy = 0; copy < (buddies ? 2 : 1); ++copy) {
    const int64_t* ranges = table.fresh(copy == 0 ? me : predecessor(me));
    for (size_t i = 0; i < tensors; ++i) {
      const ParameterShard& shard = own.holdings.shards[i];
      needs.push_back({i, ranges[2 * i], ranges[2 * i + 1], shard.dtype,
                       stepped.count(shard.tensor.unsafeGetTensorImpl()) != 0});
    }
  }
  const auto pieces = planned_pieces(plan, table, own.holdings);
  PieceCollector collector(pieces, std::move(needs), -1);
  for (size_t r = 0; r < plan.holder.size(); ++r) {
    const int holder = plan.holder[r];
    if (holder < 0) continue;  // a replica of a rank sent already
    const int64_t* source = planned_ranges(plan, table, r);
    std::vector<int> receivers;
    for (int m = 0; m < world; ++m) {
      const bool wants = overlaps(source, table.fresh(m), tensors) ||
                         (buddies && overlaps(source, table.fresh(predecessor(m)), tensors));
      if (wants) receivers.push_back(m);
    }
    if (receivers.empty()) continue;
    const bool receiving = std::find(receivers.begin(), receivers.end(), me) != receivers.end();
    const std::string name = "the pieces of rank " + std::to_string(r);
    std::string payload;
    int64_t status = kStatusOk;
    if (me == holder) {
      const HeldPieces& from = *held[plan.slot[r]];
      std::vector<SavedRange> ranges;
      for (const auto& shard : from.holdings.shards) ranges.push_back({shard.offset, shard.length});
      payload = encode_shard_payload(name, from.holdings, ranges, from.optimizer.get(),
                                     codec_of(*from.optimizer), torch::Tensor());
      for (int m : receivers) {
        if (m != me) send_outcome(group, m, status, payload, kHeal);
      }
    } else if (receiving) {
      recv_outcome(group, holder, status, payload, kHeal);
    }
    if (receiving) {
      collector.consume(static_cast<int>(r), name, payload);
    }
  }
  collector.check_complete("the elastic job's pieces");
  auto& collected = collector.collected();
  restore_shard_values(own.holdings, collected, 0);
  install_optimizer_state(*own.optimizer, *codec_of(*own.optimizer), own.holdings, collected, 0);
  if (keeps_full_parameters(own.holdings)) {
    gather_full_parameters(group, own.holdings, all_shard_ranges(group, own.holdings, kHeal),
                           kHeal);
  }
  if (own.holdings.after_load) own.holdings.after_load();
  if (buddies) {
    build_buddy(own.holdings, table.fresh(predecessor(me)), stepped, collected, *buddy, factory);
  }
}

}  // namespace cohort::detail
