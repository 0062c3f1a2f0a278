// Local SGD: every rank steps its own copy of the model on its own data, and the copies are
// averaged only every few steps instead of the gradients every step (Lin et al., "Don't use
// large mini-batches, use local SGD", 2020; PyTorch's
// torch.distributed.algorithms.model_averaging).
//
//   cohort::LocalSgdOptions options;
//   options.period = 4;            // average the models every 4 steps
//   options.warmup_steps = 100;    // from step 100 on
//   cohort::PeriodicModelAverager averager(group, options);
//   for (auto& batch : *loader) {
//     optimizer.zero_grad();
//     loss_fn(model->forward(batch.data), batch.target).backward();
//     optimizer.step();
//     averager.average(*model, &optimizer);   // every rank, every step
//   }
//
// Post-local SGD (Lin et al.): DDP averages gradients for the first K steps (the noisy start
// of training, where local SGD hurts), then each rank keeps its own gradient and the models are
// averaged every H steps:
//
//   cohort::DdpOptions ddp_options;
//   ddp_options.comm_hook = cohort::post_local_sgd_hook(/*start_step=*/K);
//   cohort::DistributedDataParallel ddp(model, group, ddp_options);
//   cohort::LocalSgdOptions options;
//   options.period = H;
//   options.warmup_steps = K;
//   cohort::PeriodicModelAverager averager(group, options);
//   ... backward, optimizer.step(), averager.average(*model, &optimizer) ...
//
// Averaging is collective: every rank of the group calls average() after every optimizer step,
// with the same parameters (same shapes and dtypes, in the same order). The first call checks
// that (a mismatch throws InvalidArgument on every rank naming the first difference); later
// averaging allreduces carry the group's usual call checks (MismatchError when ranks pass
// different counts or dtypes).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cohort/comm/group.h"
#include "cohort/torch/ddp/comm_hook.h"

namespace cohort {

struct LocalSgdOptions {
  // Average every `period` steps (H). 1: every step, which with plain SGD is the same as
  // averaging gradients (DDP), up to rounding.
  int64_t period = 8;
  // Steps (calls of average()) before the first averaging. Averaging happens at the calls
  // numbered warmup_steps, warmup_steps + period, ... (counting from 0), as PyTorch's
  // PeriodicModelAverager. For post-local SGD set it to the hook's start_step.
  int64_t warmup_steps = 0;
  // Also average the optimizer's state (momentum buffers, Adam's moments) in the same rounds.
  // Every floating-point tensor of optimizer.state() is averaged, for any torch::optim
  // optimizer (the state is walked through its serialize() entries, so optimizers cohort does
  // not know work too). Not averaged: integer and bool tensors and non-tensor entries (Adam's
  // `step` count, which is the same on every rank anyway), and lists of tensors (LBFGS's
  // history), and the state of a parameter some rank has not stepped yet (a step its
  // GradScaler skipped); unaveraged_state() names them.
  bool average_optimizer_state = false;
};

// Averages a model over the whole group every `period` steps, after `warmup_steps`. Averaging
// fuses the parameters into one flat buffer per dtype, runs one allreduce (ReduceOp::kAvg) per
// buffer and copies the average back, so the cost is one allreduce of the model's size no
// matter how many tensors it has. Buffers (BatchNorm statistics) are not averaged.
class PeriodicModelAverager {
 public:
  // Throws InvalidArgument for period < 1 or warmup_steps < 0, or a null group.
  PeriodicModelAverager(std::shared_ptr<Group> group, LocalSgdOptions options = {});

  // Call after every optimizer.step(). Returns whether it averaged on this call. `optimizer`
  // (may be null) is needed only with average_optimizer_state.
  bool average(const std::vector<torch::Tensor>& parameters,
               torch::optim::Optimizer* optimizer = nullptr);
  // The module's parameters that require grad (frozen ones never change, so never differ).
  bool average(torch::nn::Module& module, torch::optim::Optimizer* optimizer = nullptr);

  // Averages now, outside the schedule, without counting a step: before evaluating or saving
  // the model at the end of an epoch, say. Collective, like average().
  void average_now(const std::vector<torch::Tensor>& parameters,
                   torch::optim::Optimizer* optimizer = nullptr);
  void average_now(torch::nn::Module& module, torch::optim::Optimizer* optimizer = nullptr);

  // Calls of average() so far.
  int64_t step() const { return step_; }
  const LocalSgdOptions& options() const { return options_; }
  Group& group() const { return *group_; }
  // Entries of the optimizer state the last averaging left alone, as "param 3: step (Int)".
  const std::vector<std::string>& unaveraged_state() const { return unaveraged_state_; }

 private:
  std::shared_ptr<Group> group_;
  LocalSgdOptions options_;
  int64_t step_ = 0;
  bool checked_ = false;
  std::vector<std::string> unaveraged_state_;
};

// Where HierarchicalModelAverager::average averaged.
enum class AveragingScope { kNone, kNode, kGlobal };

struct HierarchicalLocalSgdOptions {
  // Average over the whole group every `period` steps (H).
  int64_t period = 8;
  // Average inside each node every `local_period` steps (cheap: shared memory, no network).
  int64_t local_period = 1;
  int64_t warmup_steps = 0;              // as LocalSgdOptions::warmup_steps, for both levels
  bool average_optimizer_state = false;  // as LocalSgdOptions
};

// Two-level local SGD for several ranks per node: the ranks of a node average among
// themselves every local_period steps, and the whole group every period steps (counted from
// warmup_steps as above; a step that is due for both averages globally only, which subsumes the
// node average).
//
// The node subgroup comes from the group's topology (Group::node_rank(): hosts, or
// GroupOptions::node_id), split once in the constructor. The global round is one allreduce over
// the whole group, not node average + allreduce over node leaders + broadcast in the node:
// the mean of the node means is the global mean only when every node has as many ranks, and the
// group's allreduce already goes through shared memory inside a node and over the network
// between nodes where its hierarchical algorithm applies (docs/algorithms.md), in one
// collective instead of three.
class HierarchicalModelAverager {
 public:
  // Collective (splits the group). Throws InvalidArgument for period or local_period < 1,
  // warmup_steps < 0, or a null group.
  HierarchicalModelAverager(std::shared_ptr<Group> group, HierarchicalLocalSgdOptions options = {});

  // Call after every optimizer.step(); returns where it averaged on this call.
  AveragingScope average(const std::vector<torch::Tensor>& parameters,
                         torch::optim::Optimizer* optimizer = nullptr);
  AveragingScope average(torch::nn::Module& module, torch::optim::Optimizer* optimizer = nullptr);

  int64_t step() const { return step_; }
  Group& group() const { return *group_; }
  Group& node_group() const { return *node_group_; }
  const std::vector<std::string>& unaveraged_state() const { return unaveraged_state_; }

 private:
  std::shared_ptr<Group> group_;
  std::shared_ptr<Group> node_group_;
  HierarchicalLocalSgdOptions options_;
  int64_t step_ = 0;
  bool checked_ = false;
  std::vector<std::string> unaveraged_state_;
};

// The gradient hook of post-local SGD (DdpOptions::comm_hook): while GradBucket::iteration <
// start_step, an averaging allreduce over DDP's group (as allreduce_hook()); from then on an
// averaging allreduce over `local_group` only (a node's ranks, say: Group::split), or, when
// local_group is null, no communication at all: each rank steps with its own gradient and a
// PeriodicModelAverager (warmup_steps = start_step) keeps the models together.
// local_group must contain this rank (its collectives run on it, beside DDP's group).
// Throws InvalidArgument for start_step < 0.
std::shared_ptr<CommHook> post_local_sgd_hook(int64_t start_step,
                                              std::shared_ptr<Group> local_group = nullptr);

}  // namespace cohort
