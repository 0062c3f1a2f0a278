#include "cohort/comm/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "cohort/core/env.h"
#include "cohort/core/error.h"
#include "transport/shm/shm_window.h"

namespace cohort {

namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();
constexpr int kFormatVersion = 1;

double log2_ceil(int n) {
  return std::ceil(std::log2(static_cast<double>(n)));
}

// The flat algorithms over TCP, `world` ranks, `bytes` per rank. `link_bytes` is what crosses
// the busiest link per rank's share (bytes, or more when several ranks share one link).
double flat_allreduce(Algorithm algorithm, double bytes, double link_bytes, int world,
                      const CostModel& m) {
  const double n = world;
  const double a = m.tcp.alpha_s, b = m.tcp.beta_s_per_byte, g = m.gamma_s_per_byte;
  switch (algorithm) {
    case Algorithm::kRing:  // 2(n-1) steps of 1/n of the buffer; (n-1)/n reduced
      return 2 * (n - 1) * a + 2 * (n - 1) / n * link_bytes * b + (n - 1) / n * bytes * g;
    case Algorithm::kHalvingDoubling: {  // fold to p ranks, then 2 log2 p steps
      const double p = std::exp2(std::floor(std::log2(n)));
      const double fold = n > p ? 2 * a + 2 * link_bytes * b + bytes * g : 0;
      return fold + 2 * std::log2(p) * a + 2 * (p - 1) / p * link_bytes * b +
             (p - 1) / p * bytes * g;
    }
    case Algorithm::kTree:  // two pipelined trees of half the data: depth log2(n+1) each way
      return 2 * log2_ceil(world + 1) * a + 2 * link_bytes * b + bytes * g;
    case Algorithm::kDirect:  // one round of whole buffers, reduced after, staged in scratch
      return a + (n - 1) * link_bytes * b + (n - 1) * bytes * g + 2 * bytes * m.shm.beta_s_per_byte;
    default: return kInfinity;
  }
}

double shm_rounds(double bytes) {
  return std::max(1.0, std::ceil(bytes / static_cast<double>(ShmWindow::kSlotBytes)));
}

// Reduce-scatter then all-gather through one node's window of `local` ranks: each rank copies
// the (local-1)/local it does not own in, its own piece out, and the others back; it reduces
// (local-1) copies of its piece. Two waits per round.
double shm_allreduce(double bytes, int local, const CostModel& m) {
  const double others = (local - 1.0) / local;
  return 2 * shm_rounds(bytes) * m.shm.alpha_s +
         (2 * others + 1.0 / local) * bytes * m.shm.beta_s_per_byte +
         others * bytes * m.gamma_s_per_byte;
}

int ranks_sharing_a_link(const GroupShape& shape) {
  if (shape.nodes <= 1) return 1;  // loopback: no shared network link
  return (shape.world + shape.nodes - 1) / shape.nodes;
}

// Hierarchical's middle phase: each rank allreduces its piece (n / L) with its peers on the
// other nodes, and the L pieces of a node share its link, so n crosses the link in all.
double across_nodes(Algorithm algorithm, double bytes, const GroupShape& shape,
                    const CostModel& model) {
  return flat_allreduce(algorithm, bytes / shape.local_size, bytes, shape.nodes, model);
}

// Note [Gather and scatter across nodes]
// Between nodes, what a collective costs is what the busiest node sends to the others, round by
// round (every rank of a node shares its link; ranks are placed in node order, L per node, as
// the groups of cohortrun and the examples are). The algorithms differ there though each rank
// sends (n-1)/n of the buffer: the ring has one rank per node send across per step; the direct
// exchange sends L (n - L) blocks across from each node at once; Bruck's round at distance d
// sends min(d, n-d) blocks from each rank whose target r - d is on another node; recursive
// halving's step at distance d sends half of what is left from each participant whose partner
// is on another node, so it crosses with its largest halves when d spans nodes. Inside a node
// (loopback) the rounds are not counted: they are much faster than the link between nodes.
class NodePlacement {
 public:
  explicit NodePlacement(const GroupShape& shape)
      : n_(shape.world), nodes_(shape.nodes), per_node_(ranks_sharing_a_link(shape)) {}
  int node(int rank) const { return std::min(rank / per_node_, nodes_ - 1); }
  bool across(int from, int to) const { return node(from) != node(to); }
  // The most `blocks` any node sends across when each rank r with `sends(r)` sends them.
  template <typename Sends>
  double busiest(Sends sends) const {
    std::vector<double> out(static_cast<size_t>(nodes_), 0);
    for (int r = 0; r < n_; ++r) out[static_cast<size_t>(node(r))] += sends(r);
    return *std::max_element(out.begin(), out.end());
  }
  int world() const { return n_; }
  int per_node() const { return per_node_; }

 private:
  int n_, nodes_, per_node_;
};

// Seconds on the busiest node's link: one alpha per round, its bytes across at beta.
struct LinkRounds {
  double rounds = 0, bytes = 0;
  double seconds(const LinkCost& link) const {
    return rounds * link.alpha_s + bytes * link.beta_s_per_byte;
  }
};

LinkRounds bruck_across(const NodePlacement& at, double block) {
  const int n = at.world();
  LinkRounds t;
  for (int d = 1; d < n; d *= 2, ++t.rounds) {
    const double blocks = std::min(d, n - d);
    t.bytes +=
        block * at.busiest([&](int r) { return at.across(r, (r - d + n) % n) ? blocks : 0; });
  }
  return t;
}

LinkRounds halving_across(const NodePlacement& at, double block) {
  const int n = at.world();
  const int p = 1 << static_cast<int>(std::floor(std::log2(n)));
  const int rem = n - p;
  const auto rank_of = [rem](int i) { return i < rem ? 2 * i + 1 : i + rem; };
  const double total = n * block;
  LinkRounds t;
  if (rem > 0) {  // the fold and the unfold
    t.rounds += 2;
    t.bytes +=
        total * at.busiest([&](int r) { return r < 2 * rem && r % 2 == 0 && at.across(r, r + 1); });
    t.bytes +=
        block * at.busiest([&](int r) { return r < 2 * rem && r % 2 == 1 && at.across(r, r - 1); });
  }
  double half = total / 2;
  for (int d = p / 2; d >= 1; d /= 2, half /= 2, ++t.rounds) {
    std::vector<double> sends(static_cast<size_t>(n), 0);
    for (int i = 0; i < p; ++i) {
      if (at.across(rank_of(i), rank_of(i ^ d))) sends[static_cast<size_t>(rank_of(i))] = 1;
    }
    t.bytes += half * at.busiest([&](int r) { return sends[static_cast<size_t>(r)]; });
  }
  return t;
}

// The busiest node's rounds and bytes across for an all-gather or reduce-scatter of blocks of
// `block` bytes (Note [Gather and scatter across nodes]).
LinkRounds gather_or_scatter_across(CollectiveKind kind, Algorithm algorithm,
                                    const NodePlacement& at, double block) {
  const int n = at.world(), local = at.per_node();
  switch (algorithm) {
    case Algorithm::kDirect: return {1, static_cast<double>(local) * (n - local) * block};
    case Algorithm::kRing: return {n - 1.0, (n - 1.0) * block};
    case Algorithm::kHalvingDoubling:
      return kind == CollectiveKind::kAllgather ? bruck_across(at, block)
                                                : halving_across(at, block);
    default: return {0, std::numeric_limits<double>::infinity()};
  }
}

double positive(const nlohmann::json& json, const char* section, const char* field,
                const std::string& origin) {
  const auto missing = [&] {
    return ConfigError(origin + ": cost model field " + section + "." + field +
                       " is missing or not a positive number; run `cohort-bench --calibrate` "
                       "again or remove the file");
  };
  if (!json.contains(section) || !json[section].contains(field)) throw missing();
  const auto& value = json[section][field];
  if (!value.is_number() || !(value.get<double>() > 0)) throw missing();
  return value.get<double>();
}

}  // namespace

CostModel CostModel::defaults() {
  // Medians of three `cohort-bench --calibrate --ranks 2` runs on the 2-core development VM
  // (docs/algorithms.md, "Cost model").
  CostModel model;
  model.tcp = {35e-6, 1.0 / 1.98e9};
  model.shm = {0.30e-6, 1.0 / 23.5e9};
  model.gamma_s_per_byte = 1.0 / 26.9e9;
  return model;
}

CostModel CostModel::from_json(const std::string& text, const std::string& origin) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(origin + ": not a cost model (invalid JSON: " + e.what() + ")");
  }
  if (!json.is_object() || json.value("version", 0) != kFormatVersion) {
    throw ConfigError(origin + ": not a version " + std::to_string(kFormatVersion) +
                      " cost model; run `cohort-bench --calibrate` again");
  }
  CostModel model;
  model.tcp.alpha_s = positive(json, "tcp", "alpha_us", origin) * 1e-6;
  model.tcp.beta_s_per_byte = 1.0 / (positive(json, "tcp", "gbytes_per_s", origin) * 1e9);
  model.shm.alpha_s = positive(json, "shm", "alpha_us", origin) * 1e-6;
  model.shm.beta_s_per_byte = 1.0 / (positive(json, "shm", "gbytes_per_s", origin) * 1e9);
  model.gamma_s_per_byte = 1.0 / (positive(json, "reduce", "gbytes_per_s", origin) * 1e9);
  model.source = origin;
  return model;
}

CostModel CostModel::from_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError("cannot read the cost model " + path);
  std::stringstream text;
  text << in.rdbuf();
  CostModel model = from_json(text.str(), path);
  model.source = "calibration " + path;
  return model;
}

std::string CostModel::to_json() const {
  nlohmann::json json;
  json["version"] = kFormatVersion;
  json["tcp"] = {{"alpha_us", tcp.alpha_s * 1e6}, {"gbytes_per_s", 1e-9 / tcp.beta_s_per_byte}};
  json["shm"] = {{"alpha_us", shm.alpha_s * 1e6}, {"gbytes_per_s", 1e-9 / shm.beta_s_per_byte}};
  json["reduce"] = {{"gbytes_per_s", 1e-9 / gamma_s_per_byte}};
  return json.dump(2) + "\n";
}

// Knob read here (docs/env.md):
//   COHORT_COST_MODEL   path of the cost model file (`cohort-bench --calibrate` writes it)
std::string CostModel::default_path() {
  if (auto path = env_string("COHORT_COST_MODEL")) return *path;
  if (auto cache = env_string("XDG_CACHE_HOME")) return *cache + "/cohort/cost_model.json";
  if (auto home = env_string("HOME")) return *home + "/.cache/cohort/cost_model.json";
  return "cost_model.json";
}

CostModel CostModel::load_default() {
  const std::string path = default_path();
  if (!env_string("COHORT_COST_MODEL") && !std::ifstream(path)) return defaults();
  return from_file(path);  // named explicitly, or present: a broken file is an error
}

double predict_allreduce(Algorithm algorithm, size_t bytes, const GroupShape& shape,
                         const CostModel& model) {
  const double n = static_cast<double>(bytes);
  if (shape.world <= 1) return 0;
  switch (algorithm) {
    case Algorithm::kShm:
      return shape.nodes == 1 && shape.shared_memory ? shm_allreduce(n, shape.world, model)
                                                     : kInfinity;
    case Algorithm::kHierarchical: {
      if (shape.nodes < 2 || shape.local_size < 2 || !shape.shared_memory) return kInfinity;
      const Algorithm across = cheapest_across_nodes(bytes, shape, model);
      return shm_allreduce(n, shape.local_size, model) + across_nodes(across, n, shape, model);
    }
    case Algorithm::kRing:  // ranks in node order: one rank per node sends across at a time
      return flat_allreduce(algorithm, n, n, shape.world, model);
    default:  // the others send from every rank of a node across at once: they share the link
      return flat_allreduce(algorithm, n, n * ranks_sharing_a_link(shape), shape.world, model);
  }
}

Algorithm cheapest_allreduce(size_t bytes, const GroupShape& shape, const CostModel& model) {
  Algorithm best = Algorithm::kDirect;
  double best_time = predict_allreduce(best, bytes, shape, model);
  for (Algorithm a : {Algorithm::kRing, Algorithm::kHalvingDoubling, Algorithm::kTree,
                      Algorithm::kShm, Algorithm::kHierarchical}) {
    const double time = predict_allreduce(a, bytes, shape, model);
    if (time < best_time) {
      best = a;
      best_time = time;
    }
  }
  return best;
}

double predict_gather_or_scatter(CollectiveKind kind, Algorithm algorithm, size_t bytes,
                                 const GroupShape& shape, const CostModel& model) {
  if (shape.world <= 1) return 0;
  const double n = shape.world, total = static_cast<double>(bytes), moved = (n - 1) / n * total;
  const double reduce = kind == CollectiveKind::kReduceScatter ? moved * model.gamma_s_per_byte : 0;
  const LinkCost& tcp = model.tcp;
  if (algorithm == Algorithm::kShm) {  // the rank's piece in, the whole buffer out (or reverse)
    if (shape.nodes != 1 || !shape.shared_memory) return kInfinity;
    return 2 * shm_rounds(total) * model.shm.alpha_s +
           (1 + 1 / n) * total * model.shm.beta_s_per_byte + reduce;
  }
  if (shape.nodes > 1) {
    return gather_or_scatter_across(kind, algorithm, NodePlacement(shape), total / n).seconds(tcp) +
           reduce;
  }
  switch (algorithm) {  // loopback: each rank's own connections
    case Algorithm::kDirect: return tcp.alpha_s + moved * tcp.beta_s_per_byte + reduce;
    case Algorithm::kHalvingDoubling:
      return log2_ceil(shape.world) * tcp.alpha_s + moved * tcp.beta_s_per_byte + reduce;
    case Algorithm::kRing: return (n - 1) * tcp.alpha_s + moved * tcp.beta_s_per_byte + reduce;
    default: return kInfinity;
  }
}

// Note [Ring across nodes]: the ring is taken whenever the model predicts it within
// kRingAcrossMargin of the fastest. Where the bytes dominate, the model sees the ring and
// halving-doubling alike (the same bytes per link, a few latency terms apart), but on real links
// the ring's 1 MiB segments keep every link busy in both directions while halving-doubling's
// large halves do not: 4 hosts x 2 ranks on 1 Gbit/s links (bench/compare_hierarchical.sh),
// hierarchical allreduce at 64 MiB, 0.099 GB/s busbw with halving-doubling across the hosts
// against 0.120 with the ring.
constexpr double kRingAcrossMargin = 1.05;

Algorithm cheapest_across_nodes(size_t bytes, const GroupShape& shape, const CostModel& model) {
  const auto n = static_cast<double>(bytes);
  Algorithm best = Algorithm::kDirect;
  for (Algorithm a : {Algorithm::kRing, Algorithm::kHalvingDoubling, Algorithm::kTree}) {
    if (across_nodes(a, n, shape, model) < across_nodes(best, n, shape, model)) best = a;
  }
  const bool ring_close_enough = across_nodes(Algorithm::kRing, n, shape, model) <=
                                 kRingAcrossMargin * across_nodes(best, n, shape, model);
  return ring_close_enough ? Algorithm::kRing : best;
}

}  // namespace cohort
