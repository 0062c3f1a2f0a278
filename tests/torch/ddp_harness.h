// The DDP parity harness: W ranks (threads over an in-process or TCP group) train a model with
// DistributedDataParallel on disjoint slices of each global batch; one process trains a copy
// of the model on the whole batch; the parameters (and buffers) are compared after every step.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cohort/torch/ddp/ddp.h"
#include "cohort/torch/shard/fsdp.h"
#include "cohort/torch/shard/zero.h"
#include "cohort/torch/strategy/strategy_kind.h"

namespace cohort::testing {

// A model whose forward may depend on the step and the rank (to skip branches), so that the
// reference can replay exactly what each rank computed.
struct TestModel : torch::nn::Module {
  virtual torch::Tensor forward(torch::Tensor x, int step, int rank) = 0;
};
using ModelFactory = std::function<std::shared_ptr<TestModel>()>;

// 10 -> 32 -> 32 -> 4 with ReLUs.
ModelFactory mlp();
// conv(1->4, 3x3) -> BatchNorm2d -> ReLU -> linear(144 -> 4) on 1x8x8 inputs.
ModelFactory conv_batchnorm();
// trunk 10 -> 16, a branch 16 -> 16 taken when use_branch(step, rank), head 16 -> 4.
ModelFactory branchy(std::function<bool(int step, int rank)> use_branch);
// Registers layer "late" before "early" but runs early first, so gradients become ready in
// the opposite of reverse registration order.
ModelFactory reordered();

enum class OptimizerKind { kSgdMomentum, kAdamW };

struct ParityCase {
  int world = 2;
  int steps = 20;
  int samples_per_rank = 3;  // of each micro-batch
  ModelFactory make_model = mlp();
  bool image_inputs = false;  // 1x8x8 instead of 10 features
  DdpOptions options;
  // Backward passes per step; all but the last run under no_sync().
  int micro_batches = 1;
  // Every micro-batch's backward is synchronized (gradients accumulate in the reduced .grad).
  bool sync_every_micro_batch = false;
  // The reference computes each rank's slice separately (needed when the forward depends on
  // the rank, or for BatchNorm's per-rank statistics); else one forward on the whole batch.
  bool reference_per_slice = false;
  // The reference computes each rank's slice's gradient on its own, sums them in rank order
  // and divides by the world: what cohort's reductions compute on one host (Note [Reduction
  // order] in src/comm/algorithms/algorithms.h), so that with atol = rtol = 0 the comparison is
  // bitwise. One micro-batch, no BatchNorm, even inputs.
  bool reference_sums_in_rank_order = false;
  // Uneven inputs: rank r trains only this many steps, inside DistributedDataParallel::join.
  std::function<int(int rank)> steps_of_rank;
  // Tolerance of the comparison |ddp - reference| <= atol + rtol * |reference|.
  double rtol = 1e-5;
  double atol = 1e-6;
  // > 0: each tensor is compared as a whole instead, ||got - want|| <= norm_rtol * ||want||
  // (2-norms): for rounding noise that a few elements amplify (AdamW turns a gradient near
  // zero whose sign rounding flipped into a step of the learning rate's size).
  double norm_rtol = 0;
  // Threads over Group::create (TCP on loopback) instead of the in-process transport; with
  // shared_memory, allreduce goes through the shared memory window as for ranks on one host.
  bool over_tcp = false;
  bool shared_memory = false;
  // When set: the node of each rank (GroupOptions::node_id), over TCP.
  std::vector<std::string> node_of;
  // How each rank wraps its model (the reference is always plain one-process training).
  StrategyKind strategy = StrategyKind::kDdp;
  // An FSDP strategy's ShardingStrategy instead of fsdp_sharding_of(strategy). FSDP's NO_SHARD
  // (DDP underneath) is a ShardingStrategy but no StrategyKind: a case runs it as an FSDP kind
  // with this set to kNoShard. Only for FSDP kinds (is_fsdp).
  std::optional<ShardingStrategy> fsdp_sharding;
  // SGD: lr 0.05, momentum 0.9, weight decay 1e-3; AdamW: lr 0.01, weight decay 0.01.
  OptimizerKind optimizer = OptimizerKind::kSgdMomentum;
  // > 0: the learning rate instead of the one above.
  double lr = 0;
  // > 0: the gradients' 2-norm is clipped to this before each step (torch's clip_grad_norm_
  // in the reference, cohort::clip_grad_norm under ZeRO).
  double clip_norm = 0;
  // Parameters whose requires_grad is turned off (by name) before training, in every copy.
  std::vector<std::string> frozen;
  // FSDP strategies: the options (strategy is set from `strategy` and `fsdp_sharding`). With
  // neither units nor an auto-wrap rule of its own, every child module holding parameters is a
  // unit.
  FsdpOptions fsdp;
  // Mixed precision as PyTorch's FSDP MixedPrecision(param_dtype) computes: when set, the
  // reference copies its (float32) model each step into a copy whose parameters are of this
  // dtype (buffers keep theirs), runs forward and backward on the copy, and steps its own model
  // with the copy's gradients cast to float32. The ranks' own setting is
  // fsdp.mixed_precision.param_dtype. Both runs feed the model inputs of its parameters' dtype.
  c10::optional<torch::Dtype> reference_param_dtype;
  // Called on each rank after each step with its FSDP object (FSDP strategies only).
  std::function<void(int rank, int step, FullyShardedDataParallel& fsdp)> inspect_fsdp;
  // Where the models (the reference's too) train and the batches go: the CPU, or a CUDA
  // device (tests/gpu). States are compared on the CPU.
  torch::Device device = torch::kCPU;
  // When set: each rank's group is made from the harness's host group by this (collective over
  // the ranks), e.g. a staged or NCCL group for CUDA models.
  std::function<std::shared_ptr<Group>(std::shared_ptr<Group> host)> wrap_group;
};

// Runs the case; failures are reported through gtest (naming rank, step and tensor).
void expect_parity(const ParityCase& c);
// Runs the case's ranks alone (no reference): each rank's state (parameters, then buffers)
// after its last step.
std::vector<std::vector<torch::Tensor>> final_states(const ParityCase& c);
// This process's rank of the case on `group` (a job of c.world processes, e.g. under mpirun):
// trains its slice with DDP, trains the reference itself, and compares after every step.
void expect_parity_as_rank(const ParityCase& c, std::shared_ptr<Group> group);

// Builds W groups and runs fn(rank, group) on W threads with a hard deadline.
void run_with_groups(int world, const std::function<void(int, std::shared_ptr<Group>)>& fn,
                     bool over_tcp = false, bool shared_memory = false);

// As run_with_groups, over TCP on loopback with rank r on node node_of[r] (GroupOptions::
// node_id): kHybridShard's topology.
void run_with_groups_on_nodes(const std::vector<std::string>& node_of,
                              const std::function<void(int, std::shared_ptr<Group>)>& fn);

// Linear layers of these widths in a Sequential.
torch::nn::Sequential layers(const std::vector<int64_t>& widths);

// Runs `body` on every rank and returns what each rank threw ("" if nothing; a MismatchError's
// message is prefixed with "MismatchError: ").
std::vector<std::string> errors_of(int world,
                                   const std::function<void(int, std::shared_ptr<Group>)>& body,
                                   bool over_tcp = false, bool shared_memory = false);

}  // namespace cohort::testing
