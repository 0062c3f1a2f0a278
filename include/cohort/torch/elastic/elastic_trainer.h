// cohort::ElasticTrainer: data-parallel training (DDP) that goes on when ranks die or join:
// a dead rank costs the step it broke, not a restart (docs/elastic.md).
//
//   auto elastic = cohort::init_elastic();                 // under cohortrun --min-ranks 2
//   cohort::ElasticTrainerOptions options;
//   options.sampler.batch_per_rank = 64;
//   cohort::ElasticTrainer trainer(*elastic, model, optimizer, dataset.size(), options);
//   while (trainer.epoch() < epochs) {
//     trainer.step([&](const cohort::ElasticStep& step) {  // this rank's share of the step
//       auto batch = cohort::elastic_batch(dataset, step);  // data/elastic_batch.h
//       loss_fn(model->forward(batch.data), batch.target).backward();  // DDP reduces
//     });                                                  // false: rolled back, redone next
//   }
//   trainer.finish(cohort::ElasticFinish{});               // the end, survivors finish it
//
// Each step commits or rolls back everywhere (Note [Elastic commit] in
// src/torch/elastic/elastic_trainer.cc): the optimizer steps only after a small allreduce
// after backward shows that every member finished its gradient reduction. A failure before
// that (a member killed in forward, backward or the reduction, or stopped past the timeout)
// makes every survivor drop the step's gradients, form the next generation with the members
// left (and any waiting to join), and redo the step at the new world size with the same
// samples. Members that join (a restarted rank, a new one) receive the parameters, buffers,
// optimizer state, step and sampler position from rank 0 of the new generation, over the
// group, not from disk. So the parameters always equal a replay, on one process, of the
// committed steps with the world size each was committed at.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cohort/comm/elastic.h"
#include "cohort/torch/checkpoint/checkpoint.h"
#include "cohort/torch/data/elastic_sampler.h"
#include "cohort/torch/ddp/ddp.h"
#include "cohort/torch/local_sgd/diloco.h"
#include "cohort/torch/optim/lr_schedule.h"
#include "cohort/torch/shard/fsdp.h"
#include "cohort/torch/shard/zero.h"
#include "cohort/torch/sharded_parameters.h"
#include "cohort/torch/strategy/strategy.h"
#include "cohort/torch/strategy/strategy_kind.h"

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace cohort {

namespace amp {
class MasterWeights;  // cohort/torch/amp/master_weights.h
}  // namespace amp

struct ElasticTrainerOptions {
  ElasticSamplerOptions sampler;  // batch size policy, shuffle, seed
  // How each generation trains (docs/elastic.md, "What is kept where"): kDdp (replicas, healed
  // from rank 0), kZero1 or kZero2 (ZeroDataParallel of that stage), or an FSDP kind
  // (FullyShardedDataParallel with that ShardingStrategy: under kHybridShard each node is a
  // replica, so a node lost whole loses nothing).
  StrategyKind strategy = StrategyKind::kDdp;
  DdpOptions ddp;    // of each generation's DistributedDataParallel (kDdp)
  ZeroOptions zero;  // of each generation's ZeroDataParallel (its stage is the strategy's)
  // Of each generation's FullyShardedDataParallel; its `strategy` is the kind's (one that says
  // otherwise than its default is refused).
  FsdpOptions fsdp;
  // Set (under kDdp): DiLoCo instead of DDP (local_sgd/diloco.h). Each member takes inner steps
  // with its own optimizer and the members synchronize every inner_steps steps; a member lost
  // between two synchronizations takes its progress since the last one with it, the survivors
  // keep theirs, and a joiner starts from the outer parameters (Note [Elastic DiLoCo] in
  // src/torch/elastic/elastic_diloco.h). One DiLoCo for the job, its rounds over each
  // generation's group: overlap_steps must stay 0 and hierarchical false.
  std::optional<DiLoCoOptions> diloco;
  // Every torch::nn::BatchNorm1d/2d/3d of the module replaced by a cohort::nn::SyncBatchNorm
  // (nn/sync_batch_norm.h) when the trainer is made, so that each step normalizes over the
  // step's global batch at whatever world size it commits at. The layers reduce over each
  // generation's group: so do SyncBatchNorm layers the module already holds, whatever group
  // they were made with (Note [Following the generation]). The module itself may not be a
  // BatchNorm (hold it in a Sequential).
  bool sync_batchnorm = false;
  // The precision forwards compute in: float32 (the default) or bfloat16 (autocast, the
  // parameters, gradients and optimizer state staying float32), through forward_scope(), which
  // the step's forward runs in. Also master weights (master_weights with bfloat16): under kDdp
  // the trainer makes the module 16-bit and the optimizer, through the factory, over float32
  // masters (master_weights()), which it heals and checkpoints; under FSDP's strategies the
  // units are gathered in bfloat16 (FsdpOptions' param_dtype) and their float32 shards are the
  // masters. Master weights under ZeRO or DiLoCo, and float16's loss scaling, are not elastic:
  // refused by name when the trainer is made.
  PrecisionOptions precision;
  // Sharded strategies: after each committed step every member holds a copy of its ring
  // predecessor's shards (values and optimizer state, Note [Buddy copies] in
  // src/torch/elastic/buddy_copy.h), so that the state of one dead member, or of several that
  // are not neighbours, is still held by the survivors. Off: a change that loses shards
  // resumes from the checkpoint in checkpoint_dir, or throws ElasticError naming the lost ranks.
  bool buddy_copies = true;
  // How many committed steps a buddy copy is kept as a log of its predecessor's gradients
  // before the predecessor sends it its values and optimizer state afresh (Note [Buddy
  // copies]). Each step costs the copy only its gradients' transfer; each refresh costs one
  // transfer of 1/W of the parameters and their optimizer state. Memory: up to this many 1/W
  // gradients besides the copy; a change replays up to this many optimizer steps over 1/W.
  // At least 1.
  int64_t buddy_refresh_steps = 8;
  // Where the trainer writes a checkpoint of the committed state every checkpoint_every
  // committed steps (0: only when save_checkpoint() is called), and from where it resumes at
  // the job's start and (sharded strategies) when a change lost shards that no survivor holds.
  // kDdp: rank 0 writes one file; sharded: a sharded checkpoint. Empty: no checkpoints.
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  // Which checkpoint in checkpoint_dir the job's start resumes (the first generation, whose
  // members hold nothing): by default one this job wrote (its COHORT_JOB_ID: a job that
  // cohortrun restarted); any_job: whichever is there; start_afresh: one it may not resume is
  // left (and replaced by the first save) instead of refused with CheckpointError.
  LoadOptions resume;
  // Rank 0 looks in the store for members waiting to join at most this often (one store round
  // trip); they join at the step boundary after it sees them.
  std::chrono::milliseconds joiner_poll{200};
  // A learning-rate schedule (warm-up and decay, cohort::optim::scheduled_lr) that is part of
  // the job's state: before each step the trainer sets every param group's LR to
  // scheduled_lr(*lr_schedule, base, committed_steps()), where base is the group's LR in the
  // optimizer as the user made it (a sharded strategy's: one its factory makes over the whole
  // model when the trainer is constructed, before any checkpoint is resumed). Its
  // position is the committed step count, so a joiner, a survivor that redoes a step and a job
  // resumed from a checkpoint all train each step at the LR the same step has without faults.
  // Use it instead of a WarmupDecayLR, which is bound to one optimizer (a sharded strategy makes
  // a new one for each generation) and counts the steps its own process took.
  std::optional<optim::LrScheduleOptions> lr_schedule;
};

// The strategy layer's choice (docs/strategy.md) as the elastic trainer takes it: sets
// `options.strategy` to `kind`, and `ddp`, `zero`, `fsdp`, `diloco`, `sync_batchnorm` and
// `precision` as make_strategy(kind, ..., wrapping) would make its wrapper (buckets, timeline,
// comm hook, FSDP's units and prefetching, DiLoCo with the hook for its rounds, SyncBatchNorm,
// the autocast dtype, master weights); the rest of `options` stays. So one
// StrategyOptions trains a model with or without ElasticTrainer. Throws InvalidArgument, naming
// the option, for a combination make_strategy refuses and for what ElasticTrainer does not do:
// float16 (its loss scaling), local SGD, and
// activation checkpointing (apply cohort::checkpoint_modules to the module before making the
// trainer).
void train_elastic_as(ElasticTrainerOptions& options, StrategyKind kind,
                      const StrategyOptions& wrapping);

// One step as a rank runs it.
struct ElasticStep {
  int64_t step = 0;             // the step's number: committed steps before it
  uint64_t epoch = 0;           // the sampler's epoch
  std::vector<size_t> indices;  // this rank's samples (data set indices)
  int rank = 0;
  int world_size = 1;
  uint64_t generation = 0;
};

// How an elastic run ends: ElasticTrainer::finish(const ElasticFinish&) (docs/elastic.md, "The
// end of a run"). Each part is redone by the survivors when a member is lost during it, as a
// step is.
struct ElasticFinish {
  // Under DiLoCo: synchronizes every fragment that took inner steps since its last synchronization,
  // so that every member ends with the outer parameters. It is one more committed step, with no
  // samples (committed_steps() counts it), so that members that saw it through and members that
  // did not are told apart as after any step.
  bool synchronize = true;
  // Writes the checkpoint of the final state to checkpoint_dir (when set), unless the last
  // committed step wrote it (checkpoint_every). A save that fails is an error on every member.
  bool save_checkpoint = true;
  // Collective over the final generation's group (say a validation loss summed over the
  // members and printed by rank 0). When a member is lost during it, the survivors form the next
  // generation and call it again from the start, over the new group: it may only read the model
  // and must not count on a previous call having finished.
  std::function<void(Group& group)> evaluate;
};

// Builds the optimizer of a sharded strategy over the wrapper's shards (named as the module's
// parameters); called for each generation, whose shards are cut anew, and for the buddy copy.
using ElasticOptimizerFactory = std::function<std::unique_ptr<torch::optim::Optimizer>(
    const torch::OrderedDict<std::string, torch::Tensor>& named_parameters)>;

class ElasticTrainer {
 public:
  // Any strategy (options.strategy), with or without DiLoCo; sharded ones need this form, since
  // their optimizer steps shards that change with the world size: `make_optimizer` is called for
  // each generation (and for the buddy copy) with the wrapper's named_parameters(). SGD, Adam,
  // AdamW, Adagrad and RMSprop (whose state is kept per element, so that it can be re-sliced).
  // Under kDdp it is called once, over the module's parameters, and the trainer keeps the
  // optimizer (optimizer()).
  ElasticTrainer(ElasticGroup& elastic, std::shared_ptr<torch::nn::Module> module,
                 ElasticOptimizerFactory make_optimizer, size_t dataset_size,
                 ElasticTrainerOptions options);
  template <typename ModuleType>
  ElasticTrainer(ElasticGroup& elastic, const torch::nn::ModuleHolder<ModuleType>& module,
                 ElasticOptimizerFactory make_optimizer, size_t dataset_size,
                 ElasticTrainerOptions options)
      : ElasticTrainer(elastic, std::static_pointer_cast<torch::nn::Module>(module.ptr()),
                       std::move(make_optimizer), dataset_size, std::move(options)) {}
  // kDdp, with or without DiLoCo (whose inner optimizer it is). Joins the elastic job (waits for
  // its next generation; a member joining a running job is healed from it). Every member passes the
  // same kind of model and optimizer: a member whose parameters (names, shapes, dtypes) differ is
  // refused with ElasticError.
  ElasticTrainer(ElasticGroup& elastic, std::shared_ptr<torch::nn::Module> module,
                 torch::optim::Optimizer& optimizer, size_t dataset_size,
                 ElasticTrainerOptions options = {});
  template <typename ModuleType>
  ElasticTrainer(ElasticGroup& elastic, const torch::nn::ModuleHolder<ModuleType>& module,
                 torch::optim::Optimizer& optimizer, size_t dataset_size,
                 ElasticTrainerOptions options = {})
      : ElasticTrainer(elastic, std::static_pointer_cast<torch::nn::Module>(module.ptr()),
                       optimizer, dataset_size, std::move(options)) {}
  ~ElasticTrainer();

  // Runs one step: zeroes the gradients, calls `forward_backward` with this rank's samples,
  // votes, and steps the optimizer. Returns true when the step committed; false when a member
  // failed and the step was rolled back (the next call redoes it at the new world size).
  // Throws ElasticError when the job cannot go on (below min_size, this member declared dead),
  // and rethrows any error that is not a member's failure (an InvalidArgument of the model).
  bool step(const std::function<void(const ElasticStep&)>& forward_backward);

  // The scope the forward runs in under ElasticTrainerOptions::precision (autocast to
  // bfloat16; nothing under float32). Hold it over the forward and the loss, not the backward:
  //   torch::Tensor loss;
  //   { auto autocast = trainer.forward_scope(); loss = loss_fn(model->forward(x), y); }
  //   loss.backward();
  amp::Autocast forward_scope() const;

  // Calls `callback` now, with the membership this member joined (healed already: a joiner's
  // committed_steps() is the job's), and on every member after each later change, once the
  // state is healed and before the next step: adjust what depends on the world size or the
  // step (the learning rate when the global batch follows the world, a schedule's position).
  void on_membership_change(std::function<void(const Membership&)> callback);

  // Extra state to heal a joining member with (a learning-rate schedule's counters, an EMA of
  // the weights, ...): broadcast from rank 0 after each change of membership. Contiguous CPU
  // tensors, the same shapes on every member, registered before the first step.
  void add_state(const std::string& name, torch::Tensor tensor);

  int64_t committed_steps() const;
  uint64_t epoch() const;
  const ElasticSampler& sampler() const;
  const Membership& membership() const;
  DistributedDataParallel& ddp();  // kDdp without DiLoCo only
  DiLoCo& diloco();                // under DiLoCo only (sent_bytes(), the outer optimizer, ...)
  // The optimizer that steps this member's parameters or shards now (a sharded strategy's is
  // made anew for each generation).
  torch::optim::Optimizer& optimizer();
  // Under PrecisionOptions::master_weights and kDdp: the float32 masters the optimizer steps,
  // of which the module holds the 16-bit rounding (evaluate through forward_scope(); save the
  // masters, not the module, to keep what they add). Null otherwise (under FSDP's strategies
  // the masters are the shards: sharded_parameters()).
  amp::MasterWeights* master_weights();
  // The current generation's wrapper as the cross-cutting features see it (clipping, loss
  // scaling, checkpoints); sharded strategies only.
  ShardedParameters sharded_parameters();
  // Writes a checkpoint of the committed state to options.checkpoint_dir, between steps: under
  // kDdp (with or without DiLoCo) rank 0 writes it, under a sharded strategy every member writes
  // its shards; call it on every member (collective: every member learns the outcome). A save that
  // fails (a full disk, say) throws CheckpointError on every member and leaves the previous
  // checkpoint as it was. The saves every checkpoint_every steps are skipped with a warning
  // instead (failed_saves() counts them), so that a full disk does not end the job.
  void save_checkpoint();
  // Periodic saves (checkpoint_every) that failed and were skipped.
  int64_t failed_saves() const;
  // The committed step of the last checkpoint this job wrote or resumed from (-1: none).
  int64_t checkpoint_step() const;
  ElasticGroup& elastic();

  // Steps rolled back by failures so far (each redone), and membership changes.
  int64_t rolled_back_steps() const;
  int64_t membership_changes() const;
  // Wall time of the last change on this member: from the failure (or the agreed step boundary)
  // to the healed state of the new generation (rendezvous, new group, DDP, healing).
  double last_change_seconds() const;

  // Runs `collective` (an evaluation that reduces over `group`, say) between steps, on every
  // member. Returns false, without throwing, when a member is lost during it: the group is then
  // broken, and the next step() (or finish()) forms the next generation as after a failure in a
  // step, on every member alike (those that saw the collective through too). Redo it after that
  // step if its result is needed. Any other error is rethrown.
  bool between_steps(const std::function<void(Group& group)>& collective);

  // Marks the job finished (cohort::ElasticGroup::finish): call it once training is done, so
  // that members arriving later are refused instead of waiting. Nothing after the last step is
  // protected: a member lost in a collective after it fails the others (use the form below).
  void finish();
  // Ends the run on every member: `end`'s final synchronization, checkpoint and evaluation, then
  // a vote that every member saw them through, then finish(). A member lost meanwhile costs what
  // it costs during a step: the survivors form the next generation (healed) and redo what had
  // not ended everywhere. Returns true; false on a member whose last collective failed while
  // the others had finished the job (they saw every part through; this member's state is the
  // same but it saw no evaluation). Throws ElasticError as step() does, and CheckpointError
  // (on every member) when the final checkpoint cannot be written.
  bool finish(const ElasticFinish& end);

 private:
  void make_replica_run();
  void start();
  struct State;
  std::unique_ptr<State> state_;
};

// What ElasticTrainer compares between members: parameter names, shapes and dtypes, as text.
std::string model_fingerprint(const torch::nn::Module& module);

}  // namespace cohort
