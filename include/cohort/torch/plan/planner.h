// The planner: predicts a data-parallel configuration's step time, peak memory per rank and
// bytes per link from a description of the model, one measured compute profile and the
// calibrated link model, and chooses the fastest configuration that fits a memory budget
// (docs/planner.md).
//
//   auto model = cohort::ModelSpec::of(*net, cohort::kAdamStateBytes);   // sizes, FSDP units
//   auto compute = cohort::ComputeProfile::measure(*net, step, 3);      // world 1, a few steps
//   auto machine = cohort::MachineSpec::of(*group);                     // shape, calibration
//   cohort::PlannerOptions options;
//   options.memory_budget_bytes = 8ll << 30;
//   cohort::Plan plan = cohort::plan(model, compute, machine, options);
//   std::cout << plan.table();                  // every candidate, predicted
//   plan.chosen.config                          // strategy, bucket cap, reduce dtype
#pragma once

#include <torch/torch.h>
#include <torch/version.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cohort/comm/cost_model.h"
#include "cohort/comm/group.h"
#include "cohort/torch/strategy/strategy_kind.h"

namespace cohort {

// Optimizer state per parameter element, in bytes (ModelSpec::optimizer_state_per_element).
inline constexpr int64_t kSgdStateBytes = 0;       // SGD without momentum
inline constexpr int64_t kMomentumStateBytes = 4;  // SGD with momentum (float32)
inline constexpr int64_t kAdamStateBytes = 8;      // Adam, AdamW: two float32 moments

// What libtorch's Optimizer::zero_grad() does by default in the release cohort is built with:
// 1.x zeroes the gradients in place, 2.x sets them to none.
inline constexpr bool kZeroGradKeepsGradients = TORCH_VERSION_MAJOR < 2;

struct ParameterSpec {
  std::string name;
  int64_t elements = 0;
  int64_t element_bytes = 4;
  int64_t unit = 0;  // the FSDP unit that holds it (ModelSpec::units)
  // Its first dimension where it has two or more, else 1: PowerSGD sees it as a rows x
  // (elements / rows) matrix (powersgd.h), and never compresses one of a single row.
  int64_t rows = 1;
  int64_t bytes() const { return elements * element_bytes; }
};

// One way FSDP can cut the model into units: the units FsdpOptions would make with
// auto_wrap.min_parameters = min_unit_parameters (and the children of every container).
struct UnitLayout {
  int64_t min_unit_parameters = 0;  // 0: the container children only
  std::vector<std::string> units;   // in order ("" is the root unit)
  std::vector<int64_t> unit_of;     // each parameter's unit, in ModelSpec::parameters' order
};

// The trainable parameters in registration order, the FSDP units over them, and what the
// optimizer keeps per element.
struct ModelSpec {
  std::vector<ParameterSpec> parameters;
  std::vector<std::string> units;   // FSDP's, in order ("" is the root unit)
  int64_t min_unit_parameters = 0;  // what cut `units` (UnitLayout::min_unit_parameters)
  int64_t optimizer_state_per_element = kAdamStateBytes;
  // Whether the optimizer's zero_grad() leaves the gradients allocated (zeroed) rather than
  // setting them to none: libtorch 1.x's Optimizer::zero_grad() zeroes them, 2.x's default sets
  // them to none. ZeRO's shards then keep gradient memory of their own between steps
  // (Note [ZeRO gradients] in src/torch/shard/zero.cc). The default is what the libtorch cohort
  // was built with does.
  bool zero_grad_keeps_gradients = kZeroGradKeepsGradients;
  // The 16-bit dtype the model computes and communicates in, over float32 masters that the
  // optimizer updates (amp::MasterWeights under DDP, FsdpOptions::mixed_precision.param_dtype
  // under the FSDP strategies); unset: none. The parameters' element_bytes stay the masters'.
  // ZeRO, local SGD, PowerSGD and a bfloat16 reduction are then not candidates (cohort runs none
  // of them over master weights).
  std::optional<torch::Dtype> master_weights;
  // Other ways to cut the units, each different from `units` and from one another: the planner
  // predicts the FSDP strategies under each (PlanConfig::min_unit_parameters).
  std::vector<UnitLayout> other_unit_layouts;
  // The module's trainable parameters, with FSDP's units as FsdpOptions{} would cut them
  // (every container child with parameters is a unit) unless `min_unit_parameters` > 0 (units of
  // at least that many parameters, as FsdpOptions::auto_wrap.min_parameters). Each of
  // `other_min_unit_parameters` that cuts the units differently adds a layout the planner may
  // choose (unit_thresholds() gives a spread of them).
  static ModelSpec of(torch::nn::Module& module, int64_t optimizer_state_per_element,
                      int64_t min_unit_parameters = 0,
                      const std::vector<int64_t>& other_min_unit_parameters = {});
  // Thresholds worth trying for `module`: 0 and half, a quarter, ... (down to 1/32) of its
  // parameter elements. ModelSpec::of keeps those that cut differently.
  static std::vector<int64_t> unit_thresholds(torch::nn::Module& module);
  // The same model with the layout cut by `min_unit_parameters` as its units; throws
  // InvalidArgument when the spec holds no such layout.
  ModelSpec with_units(int64_t min_unit_parameters) const;
  // Every layout's threshold: this spec's own first.
  std::vector<int64_t> unit_layout_thresholds() const;
  int64_t parameter_bytes() const;
  int64_t elements() const;
  // The bytes of a parameter as the model computes with it: its own, or under master_weights
  // its 16-bit copy's; and of all of them.
  int64_t model_bytes(const ParameterSpec& parameter) const;
  int64_t model_bytes() const;
};

// What PowerSGD's own arithmetic adds to a step at one rank (ComputeProfile::measure_powersgd).
struct PowerSgdCost {
  int rank = 0;
  double seconds = 0;
};

// One rank's compute for one step at its batch, measured at world 1 (no communication).
struct ComputeProfile {
  double forward_s = 0;
  double backward_s = 0;
  double optimizer_s = 0;  // the whole model's update (a sharded strategy's is 1/W of it)
  // Per parameter (registration order): when its gradient is ready, as a fraction of backward
  // (0: at its start, 1: at its end). Empty: in reverse registration order, spread by size.
  std::vector<double> gradient_ready;
  // What one step allocates beyond the model's state (activations, temporaries): measured when
  // CPU tensor memory is tracked (tensor_memory.h), else 0 unless you set it.
  int64_t activation_bytes = 0;
  // Forward and backward under FSDP over their time on the plain module: FSDP intercepts every
  // operator to find the units it reads (Note [FSDP interception]) and copies each unit's
  // parameters and gradients in and out of its flat storage, compute that the plain module does
  // not do. The planner times the FSDP strategies' forward and backward by it. 1: not measured.
  double sharded_compute_ratio = 1;
  // PowerSGD's arithmetic per step (compressing every bucket, orthogonalizing, decompressing,
  // error feedback), by the ranks measured: what a PowerSGD candidate adds to DDP's compute.
  std::vector<PowerSgdCost> powersgd;

  // Runs `step` (zero_grad, forward, backward, optimizer step: one training step at this rank's
  // batch) `steps` + 3 times, the first three a warm-up, and returns the medians; the forward and
  // backward times are told apart by the first gradient hook that fires, and each parameter's
  // ready time by its hook. Not collective: agree() makes every rank's the same.
  static ComputeProfile measure(torch::nn::Module& module, const std::function<void()>& step,
                                int steps = 5);
  // Times `sharded_step`, the same training step through a FullyShardedDataParallel over a group
  // of one (no communication: what is left is FSDP's own compute), as measure() times `step`, and
  // sets sharded_compute_ratio from its median: (sharded step - optimizer_s) / (forward_s +
  // backward_s), at least 1. Call it after measure(). Not collective.
  void measure_sharded(const std::function<void()>& sharded_step, int steps = 5);
  // Times `powersgd_step`, the training step through DDP with powersgd_hook at `rank` (start_iter
  // 0) over a group of one, against `plain_step`, the same through DDP with allreduce_hook(), in
  // turns, `steps` + 3 times each (the first three a warm-up), and records the median of their
  // differences (at least 0) for `rank`. Not collective.
  void measure_powersgd(int rank, const std::function<void()>& plain_step,
                        const std::function<void()>& powersgd_step, int steps = 5);
  // What measure_powersgd recorded for `rank`; throws InvalidArgument when it measured none.
  double powersgd_s(int rank) const;
  // The slowest rank's times (a step waits for every rank), the ranks' mean ready fractions and
  // FSDP ratio, and the largest activations, on every rank of `group`, so that every rank plans
  // the same. Collective. Throws InvalidArgument where the ranks measured models of different
  // sizes or PowerSGD at different ranks.
  void agree(Group& group);
};

// The machine: the group's shape and the calibrated link costs.
struct MachineSpec {
  GroupShape shape;
  CostModel links = CostModel::defaults();
  // `group`'s shape, and rank 0's calibration (at CostModel::default_path(): cohort-bench
  // --calibrate; the defaults where there is none) on every rank, so that every rank plans
  // alike even where the nodes hold different files. Collective.
  static MachineSpec of(Group& group);
};

struct PlanConfig {
  StrategyKind strategy = StrategyKind::kDdp;
  double bucket_cap_mb = 25.0;                  // DDP and ZeRO (DdpOptions::bucket_cap_mb)
  double first_bucket_cap_mb = 1.0;             // DdpOptions::first_bucket_cap_mb
  torch::Dtype reduce_dtype = torch::kFloat32;  // what gradients travel as (bf16: half)
  // DDP only: local SGD (docs/compression.md), the models averaged every this many steps (one
  // allreduce of the parameters after the optimizer step) instead of the gradients every step;
  // 0: off. It changes what training computes, so it is a candidate only where
  // PlannerOptions::local_sgd_periods allows it; its predicted step is the mean over a period.
  int local_sgd_period = 0;
  // DDP only: gradients reduced through powersgd_hook at this rank (docs/compression.md) instead
  // of allreduced whole; 0: off. Lossy, so a candidate only where PlannerOptions::powersgd_ranks
  // allows it; predicted after its start_iter plain steps.
  int powersgd_rank = 0;
  // The FSDP strategies: the unit layout (ModelSpec::units or one of its other_unit_layouts, by
  // threshold; unset: the spec's own units), and whether each unit's all-gather is issued while
  // the unit before it computes (FsdpOptions::forward_prefetch and backward_prefetch) or only
  // when the unit is needed, which holds one gathered unit fewer.
  std::optional<int64_t> min_unit_parameters;
  bool fsdp_prefetch = true;
  std::string describe() const;  // "ddp, 25 MiB buckets (first 1), float32"
};

// What the planner predicts for one configuration, per rank and step.
struct Prediction {
  PlanConfig config;
  double step_s = 0;              // compute + exposed communication
  double compute_s = 0;           // forward + backward + this rank's optimizer step
  double communication_s = 0;     // every collective's time, overlapped or not
  double exposed_s = 0;           // the communication that compute did not hide
  int64_t peak_memory_bytes = 0;  // parameters, gradients, optimizer state, gathered units,
                                  // buckets in flight, activations
  int64_t shm_bytes = 0;          // sent through shared memory (one node)
  int64_t network_bytes = 0;      // sent over TCP (between nodes, or loopback without shm)
  bool fits = true;               // within PlannerOptions::memory_budget_bytes
  // Each gradient reduction's time (DDP's and ZeRO's buckets, FSDP's units), in the order they
  // run: what DDP's IterationStats measure per bucket (BucketStats::comm_ms).
  std::vector<double> reduction_s;
};

struct PlannerOptions {
  int64_t memory_budget_bytes = 0;  // per rank; 0: no limit
  std::vector<StrategyKind> strategies = {StrategyKind::kDdp,         StrategyKind::kZero1,
                                          StrategyKind::kZero2,       StrategyKind::kFullShard,
                                          StrategyKind::kShardGradOp, StrategyKind::kHybridShard};
  std::vector<double> bucket_caps_mb = {1, 2, 4, 8, 16, 25, 50, 100};
  // DDP's first bucket (the buckets need not be equal): a small one starts backward's first
  // allreduce early, a larger one leaves less for the end. Each at most the bucket cap.
  std::vector<double> first_bucket_caps_mb = {1};
  std::vector<torch::Dtype> reduce_dtypes = {torch::kFloat32};  // add torch::kBFloat16 to allow
  std::vector<int> local_sgd_periods;  // e.g. {2, 4, 8, 16} to allow local SGD under DDP
  // e.g. {2} to allow PowerSGD at rank 2 under DDP, with each bucket size: each rank must be in
  // ComputeProfile::powersgd (measure_powersgd).
  std::vector<int> powersgd_ranks;
  // The FSDP strategies are predicted under every unit layout the ModelSpec holds, each with
  // prefetch and without; false: under the spec's own units, with prefetch as fsdp_prefetch says.
  bool search_fsdp_units = true;
  bool fsdp_prefetch = true;
  // A configuration to keep (a run's defaults, say) unless another that fits is predicted
  // faster by more than `min_gain`, a fraction of the baseline's predicted step: the model's
  // error between configurations (docs/planner.md, "Measured") makes a smaller predicted gain a
  // coin toss, and the baseline is known to work. Unset, or not among the candidates or not
  // fitting the budget: the fastest that fits.
  std::optional<PlanConfig> baseline;
  double min_gain = 0;
};

struct Plan {
  Prediction chosen;
  std::vector<Prediction> candidates;  // every configuration considered, fastest first
  // A table of the candidates: configuration, predicted step, communication (all of it, then
  // what compute did not hide), peak memory, bytes over shared memory and the network, and
  // whether it fits.
  std::string table(size_t rows = 20) const;
};

// What the planner needs of a job besides the machine, as a file: so that a job for a cluster can
// be planned on one node (cohort-plan, docs/planner.md "Planning a cluster job").
struct PlanInput {
  ModelSpec model;
  ComputeProfile compute;
  std::string to_json() const;
  // Throws InvalidArgument naming `origin` and the field that is missing or wrong.
  static PlanInput from_json(const std::string& text, const std::string& origin);
};

// What a run measured in its first steps (online correction, docs/planner.md).
struct StepMeasurement {
  double compute_s = 0;             // a step without loading data or exposed communication
  std::vector<double> reduction_s;  // per bucket or unit, as Prediction::reduction_s
};

// The model corrected by a measurement: the compute profile scaled by measured / predicted
// compute, the links' costs by measured / predicted reduction time (summed), and whether either
// is off by more than `threshold` (then plan again with these).
struct Refit {
  ComputeProfile compute;
  MachineSpec machine;
  double compute_ratio = 1;
  double link_ratio = 1;
  bool off = false;
};
Refit refit(const ComputeProfile& compute, const MachineSpec& machine, const Prediction& predicted,
            const StepMeasurement& measured, double threshold = 0.25);

// Predicts one configuration. Throws InvalidArgument for a strategy the machine cannot run
// (kHybridShard needs several nodes of equal size), an empty model, or a unit layout the model
// does not hold.
Prediction predict(const ModelSpec& model, const ComputeProfile& compute,
                   const MachineSpec& machine, const PlanConfig& config);

// Every allowed configuration, predicted; the fastest that fits the budget is chosen (ties go to
// the earlier strategy in PlannerOptions::strategies, then the larger bucket, then the spec's own
// unit layout and prefetch), unless it beats PlannerOptions::baseline by less than min_gain.
// Throws
// InvalidArgument naming the smallest configuration's memory when none fits.
Plan plan(const ModelSpec& model, const ComputeProfile& compute, const MachineSpec& machine,
          const PlannerOptions& options = {});

}  // namespace cohort
