// The planner's arithmetic (step_model.h, Note [Planned step]).
#include "plan/step_model.h"

#include <algorithm>
#include <functional>

#include "cohort/torch/compress/powersgd.h"
#include "ddp/bucket_plan.h"

namespace cohort::detail {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

size_t cap_bytes(double mebibytes) {
  return static_cast<size_t>(mebibytes * kMiB);
}

// What a gradient sends: the model's dtype (16-bit under master weights), or bfloat16.
int64_t wire_bytes(const ModelSpec& model, const ParameterSpec& p, const PlanConfig& config) {
  return config.reduce_dtype == torch::kBFloat16 ? p.elements * 2 : model.model_bytes(p);
}

// A bucket's parameters' bytes, in their own dtype.
double bytes_of(const ModelSpec& model, const std::vector<size_t>& bucket) {
  double bytes = 0;
  for (size_t i : bucket) bytes += static_cast<double>(model.parameters[i].bytes());
  return bytes;
}

// When each gradient is ready, as a fraction of backward: the profile's, or reverse
// registration order with each parameter taking its share of the elements.
std::vector<double> ready_fractions(const ModelSpec& model, const ComputeProfile& compute) {
  if (compute.gradient_ready.size() == model.parameters.size()) return compute.gradient_ready;
  const double total = std::max<int64_t>(1, model.elements());
  std::vector<double> ready(model.parameters.size());
  double after = 0;  // elements of the parameters registered after this one
  for (size_t i = model.parameters.size(); i-- > 0;) {
    after += static_cast<double>(model.parameters[i].elements);
    ready[i] = after / total;
  }
  return ready;
}

// The parameters' indices in the order backward makes their gradients ready (ties keep
// registration order).
std::vector<size_t> ready_order(const std::vector<double>& ready) {
  std::vector<size_t> order(ready.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return ready[a] < ready[b]; });
  return order;
}

// Compute and the group's collectives, each a timeline of work done one piece at a time.
class Timelines {
 public:
  double compute(double ready, double seconds) {
    compute_free_ = std::max(ready, compute_free_) + seconds;
    return compute_free_;
  }
  double communicate(double ready, double seconds) {
    comm_free_ = std::max(ready, comm_free_) + seconds;
    comm_total_ += seconds;
    return comm_free_;
  }
  double compute_free() const { return compute_free_; }
  double end() const { return std::max(compute_free_, comm_free_); }
  double comm_total() const { return comm_total_; }

 private:
  double compute_free_ = 0, comm_free_ = 0, comm_total_ = 0;
};

bool shm_only(const GroupShape& shape) {
  return shape.nodes == 1 && shape.shared_memory;
}

// The bytes a rank sends for an allreduce of `bytes`, by the link they take.
void count_allreduce(StepTimes& t, double bytes, const GroupShape& shape, const CostModel& links) {
  const double n = shape.world;
  if (n <= 1) return;
  const Algorithm algorithm = cheapest_allreduce(static_cast<size_t>(bytes), shape, links);
  if (algorithm == Algorithm::kShm) {
    t.shm_bytes += static_cast<int64_t>(2 * (n - 1) / n * bytes);
  } else if (algorithm == Algorithm::kHierarchical) {
    const double local = shape.local_size, nodes = shape.nodes;
    t.shm_bytes += static_cast<int64_t>(2 * (local - 1) / local * bytes);
    t.network_bytes += static_cast<int64_t>(2 * (nodes - 1) / nodes * bytes / local);
  } else {
    t.network_bytes += static_cast<int64_t>(2 * (n - 1) / n * bytes);
  }
}

void count_gather_or_scatter(StepTimes& t, double bytes, const GroupShape& shape) {
  const double n = shape.world;
  if (n <= 1) return;
  (shm_only(shape) ? t.shm_bytes : t.network_bytes) += static_cast<int64_t>((n - 1) / n * bytes);
}

double collective_s(CollectiveKind kind, double bytes, const GroupShape& shape,
                    const CostModel& links) {
  return predict_automatic(kind, static_cast<size_t>(bytes), shape, links);
}

// When backward makes `bucket` ready: when the last of its parameters' gradients is.
double bucket_ready_s(const std::vector<size_t>& bucket, const std::vector<double>& ready,
                      const ComputeProfile& compute) {
  double last = 0;
  for (size_t i : bucket) last = std::max(last, ready[i]);
  return compute.forward_s + last * compute.backward_s;
}

// DDP and ZeRO-1/2 (Note [Planned step]).
StepTimes bucketed_step(const ModelSpec& model, const ComputeProfile& compute,
                        const MachineSpec& machine, const PlanConfig& config) {
  const GroupShape& shape = machine.shape;
  const bool zero = config.strategy != StrategyKind::kDdp;
  const std::vector<double> ready = ready_fractions(model, compute);
  const double backward_end = compute.forward_s + compute.backward_s;
  StepTimes t;
  Timelines lines;
  lines.compute(0, backward_end);
  const auto buckets = planned_buckets(model, compute, config);
  for (const auto& bucket : buckets) {
    double bytes = 0;
    for (size_t i : bucket)
      bytes += static_cast<double>(wire_bytes(model, model.parameters[i], config));
    const double seconds =
        collective_s(zero ? CollectiveKind::kReduceScatter : CollectiveKind::kAllreduce, bytes,
                     shape, machine.links);
    lines.communicate(bucket_ready_s(bucket, ready, compute), seconds);
    t.reduction_s.push_back(seconds);
    if (zero) {
      count_gather_or_scatter(t, bytes, shape);
    } else {
      count_allreduce(t, bytes, shape, machine.links);
    }
  }
  const double ranks = zero ? std::max(1, shape.world) : 1;
  t.compute_s = backward_end + compute.optimizer_s / ranks;
  if (!zero) {
    lines.compute(lines.end(), compute.optimizer_s);
  } else {  // step() waits for the reductions, then steps and all-gathers bucket by bucket
    double at = lines.end();
    const double total = std::max<int64_t>(1, model.elements());
    for (const auto& bucket : buckets) {
      double elements = 0;
      for (size_t i : bucket) elements += static_cast<double>(model.parameters[i].elements);
      const double bytes = bytes_of(model, bucket);
      at = lines.compute(at, compute.optimizer_s / ranks * elements / total);
      lines.communicate(at, collective_s(CollectiveKind::kAllgather, bytes, shape, machine.links));
      count_gather_or_scatter(t, bytes, shape);
    }
  }
  t.communication_s = lines.comm_total();
  t.exposed_s = std::max(0.0, lines.end() - t.compute_s);
  return t;
}

// DDP under local SGD: no communication in backward; every `period` steps one allreduce of
// the parameters (fused, PeriodicModelAverager) after the optimizer step, which nothing hides.
// The step is the mean over a period.
StepTimes local_sgd_step(const ModelSpec& model, const ComputeProfile& compute,
                         const MachineSpec& machine, const PlanConfig& config) {
  const double bytes = static_cast<double>(model.parameter_bytes());
  const double period = config.local_sgd_period;
  StepTimes t;
  t.compute_s = compute.forward_s + compute.backward_s + compute.optimizer_s;
  t.communication_s = t.exposed_s =
      collective_s(CollectiveKind::kAllreduce, bytes, machine.shape, machine.links) / period;
  count_allreduce(t, bytes / period, machine.shape, machine.links);
  return t;
}

// What parameters send under PowerSGD at `rank` with its default options (powersgd_matrix_rank):
// round 1 carries every compressed matrix's P and the tensors sent whole, round 2 every Q; in
// elements.
struct PowerSgdRounds {
  double round1 = 0, round2 = 0;
};

PowerSgdRounds powersgd_rounds(const ModelSpec& model, const std::vector<size_t>& parameters,
                               int rank) {
  PowerSgdOptions options;
  options.rank = rank;
  PowerSgdRounds r;
  for (size_t i : parameters) {
    const ParameterSpec& p = model.parameters[i];
    const int64_t cols = p.elements / std::max<int64_t>(1, p.rows);
    const int64_t compressed = p.rows > 1 ? powersgd_matrix_rank(p.rows, cols, options) : 0;
    r.round1 += static_cast<double>(compressed > 0 ? p.rows * compressed : p.elements);
    r.round2 += static_cast<double>(cols * compressed);
  }
  return r;
}

// Every matrix's Q, which PowerSGD keeps from step to step (the warm start).
double powersgd_q_bytes(const ModelSpec& model, int rank) {
  std::vector<size_t> every(model.parameters.size());
  for (size_t i = 0; i < every.size(); ++i) every[i] = i;
  return powersgd_rounds(model, every, rank).round2 * sizeof(float);
}

// DDP with PowerSGD (Note [Planned step]): each bucket's first round (its P and the tensors sent
// whole) is allreduced when the bucket is ready; the hook's arithmetic (measured, in compute's
// timeline at the end of backward: on these cores it takes their time) comes before the second
// rounds, which run bucket by bucket after it and after the bucket's first round.
StepTimes powersgd_step(const ModelSpec& model, const ComputeProfile& compute,
                        const MachineSpec& machine, const PlanConfig& config) {
  const GroupShape& shape = machine.shape;
  const std::vector<double> ready = ready_fractions(model, compute);
  const double hook_s = compute.powersgd_s(config.powersgd_rank);
  StepTimes t;
  Timelines lines;
  lines.compute(0, compute.forward_s + compute.backward_s);
  const auto buckets = planned_buckets(model, compute, config);
  std::vector<PowerSgdRounds> rounds;
  std::vector<double> first_done;
  for (const auto& bucket : buckets) {
    rounds.push_back(powersgd_rounds(model, bucket, config.powersgd_rank));
    const double bytes = rounds.back().round1 * sizeof(float);
    const double seconds = collective_s(CollectiveKind::kAllreduce, bytes, shape, machine.links);
    first_done.push_back(lines.communicate(bucket_ready_s(bucket, ready, compute), seconds));
    t.reduction_s.push_back(seconds);
    count_allreduce(t, bytes, shape, machine.links);
  }
  const double arithmetic_end = lines.compute(lines.compute_free(), hook_s);
  for (size_t b = 0; b < buckets.size(); ++b) {
    const double bytes = rounds[b].round2 * sizeof(float);
    if (bytes == 0) continue;  // nothing compressed in it: no second round
    const double seconds = collective_s(CollectiveKind::kAllreduce, bytes, shape, machine.links);
    lines.communicate(std::max(arithmetic_end, first_done[b]), seconds);
    t.reduction_s[b] += seconds;
    count_allreduce(t, bytes, shape, machine.links);
  }
  t.compute_s = compute.forward_s + compute.backward_s + hook_s + compute.optimizer_s;
  lines.compute(lines.end(), compute.optimizer_s);
  t.communication_s = lines.comm_total();
  t.exposed_s = std::max(0.0, lines.end() - t.compute_s);
  return t;
}

// Each parameter's share of the compute: the part of backward from the gradient ready before
// its own to its own (the layer that made it), as the profile measured the ready times; by its
// elements where the profile has none (ready_fractions spreads them so). A convolution's few
// parameters take most of a CNN's compute, the large linear layer after it little.
std::vector<double> compute_shares(const ModelSpec& model, const ComputeProfile& compute) {
  const std::vector<double> ready = ready_fractions(model, compute);
  std::vector<double> shares(ready.size(), 0);
  double before = 0, total = 0;
  for (size_t i : ready_order(ready)) {
    shares[i] = ready[i] - before;
    before = ready[i];
    total += shares[i];
  }
  for (double& share : shares) share = total > 0 ? share / total : 1.0 / shares.size();
  return shares;
}

struct UnitSizes {
  // Per unit: its parameters' bytes as gathered (the model's dtype), its gradients' on the wire,
  // its share of forward's and backward's compute (compute_shares).
  std::vector<double> bytes, wire, share;
  std::vector<bool> root;
};

UnitSizes unit_sizes(const ModelSpec& model, const ComputeProfile& compute,
                     const PlanConfig& config) {
  const size_t units = std::max<size_t>(1, model.units.size());
  UnitSizes s{std::vector<double>(units), std::vector<double>(units), std::vector<double>(units),
              std::vector<bool>(units, false)};
  const std::vector<double> shares = compute_shares(model, compute);
  for (size_t i = 0; i < model.parameters.size(); ++i) {
    const ParameterSpec& p = model.parameters[i];
    const auto u =
        static_cast<size_t>(std::clamp<int64_t>(p.unit, 0, static_cast<int64_t>(units) - 1));
    s.bytes[u] += static_cast<double>(model.model_bytes(p));
    s.wire[u] += static_cast<double>(wire_bytes(model, p, config));
    s.share[u] += shares[i];
  }
  for (size_t u = 0; u < model.units.size(); ++u) s.root[u] = model.units[u].empty();
  return s;
}

// The group a unit's collectives run over: every rank, or (HYBRID_SHARD) this node's.
GroupShape shard_shape(const MachineSpec& machine, const PlanConfig& config) {
  if (config.strategy != StrategyKind::kHybridShard) return machine.shape;
  GroupShape node;
  node.world = node.local_size = machine.shape.local_size;
  node.nodes = 1;
  node.shared_memory = machine.shape.shared_memory;
  return node;
}

GroupShape across_nodes_shape(const GroupShape& shape) {
  GroupShape across;
  across.world = across.nodes = shape.nodes;
  across.local_size = 1;
  return across;
}

// FSDP (Note [Planned step]).
StepTimes sharded_step(const ModelSpec& model, const ComputeProfile& compute,
                       const MachineSpec& machine, const PlanConfig& config) {
  const UnitSizes units = unit_sizes(model, compute, config);
  const GroupShape shard = shard_shape(machine, config);
  const bool hybrid = config.strategy == StrategyKind::kHybridShard;
  const bool regather = config.strategy != StrategyKind::kShardGradOp;
  const size_t count = units.bytes.size();
  StepTimes t;
  Timelines lines;
  auto gather = [&](size_t u, double at) {
    count_gather_or_scatter(t, units.bytes[u], shard);
    return lines.communicate(
        at, collective_s(CollectiveKind::kAllgather, units.bytes[u], shard, machine.links));
  };
  const double forward_s = compute.forward_s * compute.sharded_compute_ratio;
  const double backward_s = compute.backward_s * compute.sharded_compute_ratio;
  // Forward: with prefetch each unit's all-gather is issued when the unit before it starts
  // computing, without it when the unit is needed.
  const bool prefetch = config.fsdp_prefetch;
  std::vector<double> gathered(count, 0);
  gathered[0] = gather(0, 0);
  for (size_t u = 0; u < count; ++u) {
    if (!prefetch && u > 0) gathered[u] = gather(u, lines.compute_free());
    const double start = std::max(lines.compute_free(), gathered[u]);
    if (prefetch && u + 1 < count) gathered[u + 1] = gather(u + 1, start);
    lines.compute(start, forward_s * units.share[u]);
  }
  // The unit forward used last stays gathered into backward (FSDP frees a unit when an
  // operator uses another): backward starts on it without gathering. Without prefetch a unit's
  // gather is issued when the unit after it has finished, behind that unit's reduce-scatter.
  std::vector<double> regathered(count, lines.compute_free());
  for (size_t u = count; u-- > 0;) {  // backward, in reverse: prefetch, compute, reduce
    const bool gathers_next = u > 0 && regather && !units.root[u - 1];
    const double start = std::max(lines.compute_free(), regathered[u]);
    if (prefetch && gathers_next) regathered[u - 1] = gather(u - 1, start);
    const double end = lines.compute(start, backward_s * units.share[u]);
    const double scatter_s =
        collective_s(CollectiveKind::kReduceScatter, units.wire[u], shard, machine.links);
    lines.communicate(end, scatter_s);
    t.reduction_s.push_back(scatter_s);
    count_gather_or_scatter(t, units.wire[u], shard);
    if (!prefetch && gathers_next) regathered[u - 1] = gather(u - 1, end);
  }
  if (hybrid) {  // at the end of backward, unit by unit, each rank's shard with its peers on
                 // the other nodes: a node's L allreduces run at once and share its link, as
                 // one of the whole unit would
    const GroupShape across = across_nodes_shape(machine.shape);
    for (size_t u = count; u-- > 0;) {
      lines.communicate(lines.compute_free(), collective_s(CollectiveKind::kAllreduce,
                                                           units.wire[u], across, machine.links));
      count_allreduce(t, units.wire[u] / std::max(1, shard.world), across, machine.links);
    }
  }
  const double ranks = std::max(1, shard.world);
  lines.compute(lines.end(), compute.optimizer_s / ranks);  // once every reduction has ended
  t.compute_s = forward_s + backward_s + compute.optimizer_s / ranks;
  t.communication_s = lines.comm_total();
  t.exposed_s = std::max(0.0, lines.end() - t.compute_s);
  return t;
}

std::vector<double> sorted_descending(std::vector<double> values) {
  std::sort(values.begin(), values.end(), std::greater<>());
  return values;
}

double largest(const std::vector<double>& sorted, size_t count) {
  double sum = 0;
  for (size_t i = 0; i < std::min(count, sorted.size()); ++i) sum += sorted[i];
  return sum;
}

// The units' gradients on the wire in FSDP's reduce-scatter order: the units in reverse, the
// root last (FullyShardedDataParallel's).
std::vector<double> wire_in_reduce_order(const UnitSizes& units) {
  std::vector<double> order;
  for (size_t u = units.wire.size(); u-- > 0;) {
    if (!units.root[u]) order.push_back(units.wire[u]);
  }
  for (size_t u = 0; u < units.wire.size(); ++u) {
    if (units.root[u]) order.push_back(units.wire[u]);
  }
  return order;
}

// The most gradient bytes FSDP holds at once in backward (Note [FSDP gradients in flight] in
// src/torch/shard/fsdp_backward.cc): when a unit's flat gradient arrives, the two before it in
// reduce order may still be in flight; every unit reduced before those keeps `kept_fraction` of
// its gradient to the end of backward (HYBRID_SHARD's blocks, 1/L, wait there for the average
// across the nodes; the other strategies land theirs in the shards' .grad at once: 0).
double fsdp_gradients_held(const std::vector<double>& wire_in_order, double kept_fraction) {
  constexpr size_t kHeld = 3;  // the unit that arrived and two reduce-scatters in flight
  double in_flight = 0, kept = 0, most = 0;
  for (size_t i = 0; i < wire_in_order.size(); ++i) {
    in_flight += wire_in_order[i];
    if (i >= kHeld) {
      in_flight -= wire_in_order[i - kHeld];
      kept += wire_in_order[i - kHeld] * kept_fraction;
    }
    most = std::max(most, in_flight + kept);
  }
  return most;
}

}  // namespace

std::vector<std::vector<size_t>> planned_buckets(const ModelSpec& model,
                                                 const ComputeProfile& compute,
                                                 const PlanConfig& config) {
  BucketPlanInput input;
  input.order = ready_order(ready_fractions(model, compute));
  for (const ParameterSpec& p : model.parameters) {
    input.bytes.push_back(static_cast<size_t>(p.bytes()));
    input.kind.push_back(static_cast<int>(p.element_bytes));
  }
  input.first_cap_bytes = cap_bytes(config.first_bucket_cap_mb);
  input.cap_bytes = cap_bytes(config.bucket_cap_mb);
  return plan_buckets(input);
}

StepTimes predict_step(const ModelSpec& model, const ComputeProfile& compute,
                       const MachineSpec& machine, const PlanConfig& config) {
  if (config.local_sgd_period > 0) return local_sgd_step(model, compute, machine, config);
  if (config.powersgd_rank > 0) return powersgd_step(model, compute, machine, config);
  return uses_buckets(config.strategy) ? bucketed_step(model, compute, machine, config)
                                       : sharded_step(model, compute, machine, config);
}

int64_t predict_peak_memory(const ModelSpec& model, const ComputeProfile& compute,
                            const MachineSpec& machine, const PlanConfig& config) {
  const double params = static_cast<double>(model.parameter_bytes());
  const double grads = params;
  const double state = static_cast<double>(model.elements() * model.optimizer_state_per_element);
  // What the model itself holds: under master weights a 16-bit copy of the parameters and of
  // their gradients, beside the float32 masters (DDP's) or shards (FSDP's) the optimizer steps.
  const double model_params = static_cast<double>(model.model_bytes());
  const double model_grads = model_params;
  const double masters = model.master_weights ? params : 0;
  const double activations = static_cast<double>(compute.activation_bytes);
  const double world = std::max(1, machine.shape.world);
  std::vector<double> buckets;  // in the parameters' dtype
  if (uses_buckets(config.strategy) && config.local_sgd_period == 0) {
    for (const auto& b : planned_buckets(model, compute, config)) {
      buckets.push_back(bytes_of(model, b));
    }
  }
  buckets = sorted_descending(buckets);
  const double bucket = largest(buckets, 1);
  // ZeRO's shards' gradients, where zero_grad() keeps them: they live in memory of their own
  // from one step to the next (Note [ZeRO gradients] in src/torch/shard/zero.cc).
  const double kept_shard_grads = model.zero_grad_keeps_gradients ? grads / world : 0;
  const UnitSizes units = unit_sizes(model, compute, config);
  const auto unit_bytes = sorted_descending(units.bytes);
  const auto wire_in_order = wire_in_reduce_order(units);
  const size_t gathered_units = config.fsdp_prefetch ? 2 : 1;  // in use (+ the one prefetched)
  double bytes = 0;
  double transient = activations;  // what a step allocates and frees
  switch (config.strategy) {
    case StrategyKind::kDdp:  // gradients are views of the buckets; bfloat16 adds a copy of one;
                              // local SGD averages through a flat copy of the parameters after
                              // the step, when the activations are gone
      bytes = model_params + model_grads + masters + state +
              (config.reduce_dtype == torch::kBFloat16 ? bucket / 2 : 0) +
              (config.local_sgd_period > 0 ? std::max(0.0, params - activations) : 0);
      if (config.powersgd_rank > 0) {  // each bucket's residual and Q stay; its compensated
                                       // copy is made when the bucket is ready, in backward,
                                       // beside the activations, and lives to its second round
        bytes += grads + powersgd_q_bytes(model, config.powersgd_rank);
        transient = activations + grads;
      }
      break;
    case StrategyKind::kZero1:  // the buckets hold the gradients; the shards' own copies
      bytes = params + grads + kept_shard_grads + state / world;
      break;
    case StrategyKind::kZero2:  // at most two buckets at once (one filling, one reducing) and
                                // the reduced blocks, beside the shards' kept gradients
      bytes = params + largest(buckets, 2) + grads / world + kept_shard_grads + state / world;
      break;
    case StrategyKind::kFullShard:
      bytes = (params + grads + state) / world + largest(unit_bytes, gathered_units) +
              fsdp_gradients_held(wire_in_order, 0);
      break;
    case StrategyKind::kShardGradOp:
      bytes =
          (params + grads + state) / world + model_params + fsdp_gradients_held(wire_in_order, 0);
      break;
    case StrategyKind::kHybridShard: {
      const double local = std::max(1, machine.shape.local_size);
      bytes = (params + grads + state) / local + largest(unit_bytes, gathered_units) +
              fsdp_gradients_held(wire_in_order, 1 / local);
      break;
    }
  }
  return static_cast<int64_t>(bytes + transient);
}

}  // namespace cohort::detail
