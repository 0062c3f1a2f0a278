// cohort::ElasticTrainer (include/cohort/torch/elastic/elastic_trainer.h).
//
// Note [Elastic commit]
// A step commits when the allreduce after backward (the vote) completes on a member: a rank
// finishes an allreduce only once every rank's contribution is in, and each rank contributes
// only after its backward, and so its gradient reduction, has finished. So a member that
// finished the vote knows that every member finished the reduction, and it steps the
// optimizer. A member whose vote (or anything before it) failed drops the step's gradients
// and recovers. Can members disagree? Only at the vote itself: one may complete it while
// another's fails (the ring's last message was lost with a dying peer). The one that failed
// arrives at the next generation with a committed step one lower; the rendezvous orders the
// members by committed step, so rank 0 is one that committed, and every member heals from it
// (parameters through DDP's constructor, optimizer state, counters and sampler position by
// broadcast). Whatever happened, every member of the new generation starts from the state of
// the same committed step, and the step it redoes takes the same samples (the sampler's
// position moves only on commit). A failure during healing (the source dying, say) is one
// more failure: a member being healed holds a mix of its old state and rank 0's, so it
// counts as holding none (committed step -1) until the whole state is in, and the next
// generation heals it again from a member that holds the state; if none is left, that
// generation cannot form (ElasticError) rather than go on from a mix. The vote also carries rank
// 0's answer to "are members waiting to join?", so every member grows the group at the same step
// boundary.
#include "cohort/torch/elastic/elastic_trainer.h"

#include <torch/torch.h>

#include <sstream>

#include "call_sites.h"
#include "checkpoint/checkpoint_collectives.h"
#include "coalesced_broadcast.h"
#include "cohort/core/check.h"
#include "cohort/core/logging.h"
#include "cohort/torch/amp/master_weights.h"
#include "cohort/torch/tensor_buffer.h"
#include "elastic/elastic_checkpoint.h"
#include "elastic/elastic_diloco.h"
#include "elastic/follow_generation.h"
#include "elastic/optimizer_broadcast.h"
#include "elastic/sharded_run.h"

namespace cohort {
namespace {

// FNV-1a: a short, stable summary of the parameter list for the store's records.
uint64_t fnv1a(const std::string& text) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A member that receives rank 0's state: its own is overwritten piece by piece while healing.
bool receives_state(const Membership& m) {
  if (m.rank == 0) return false;
  for (int joined : m.joined) {
    if (joined == m.rank) return true;
  }
  return m.members[m.rank].committed_step != m.committed_step();
}

bool needs_healing(const Membership& m) {
  if (!m.joined.empty() || m.lost_step >= 0) return true;
  for (const auto& member : m.members) {
    if (member.committed_step != m.committed_step()) return true;
  }
  return false;
}

}  // namespace

std::string model_fingerprint(const torch::nn::Module& module) {
  std::string text;
  int64_t elements = 0;
  const auto parameters = module.named_parameters();
  for (const auto& item : parameters) {
    std::ostringstream line;
    line << item.key() << ' ' << item.value().sizes() << ' ' << item.value().scalar_type() << ';';
    text += line.str();
    elements += item.value().numel();
  }
  std::ostringstream out;
  out << parameters.size() << " parameters, " << elements << " elements, #" << std::hex
      << fnv1a(text);
  return out.str();
}

// Note [Elastic runs]: what differs between the strategies is one Run per trainer, chosen when
// it is made: ReplicaRun (kDdp: each generation's DistributedDataParallel, healed from rank 0),
// DiLoCoRun (kDdp with ElasticTrainerOptions::diloco: the replicas' DiLoCo rounds) and
// ShardedStrategyRun (ZeRO and FSDP through detail::ShardedRun: pieces, buddy copies). The
// State keeps what every strategy shares: the group, the sampler, the counters, the vote, the
// healing of counters, the checkpoint's agreement, the recovery and the end.
struct ElasticTrainer::State {
  struct Run {
    virtual ~Run() = default;
    // The optimizer the steps update (a sharded strategy's is its generation's).
    virtual torch::optim::Optimizer& optimizer() = 0;
    // The wrapper of a broken (by `cause`) or growing generation goes.
    virtual void drop_wrapper(std::exception_ptr cause) = 0;
    // A new generation's wrapper over its group, and (`heal`) rank 0's state on every member;
    // sets the committed step.
    virtual void adopt(bool heal) = 0;
    // One step (ElasticTrainer::step); `done` once it committed.
    virtual bool step(const std::function<void(const ElasticStep&)>& forward_backward,
                      bool& done) = 0;
    // This member's part of a checkpoint of the committed state.
    virtual void write_checkpoint(const Membership& m) = 0;
    // Parts of replica checkpoints besides the model and optimizer.
    virtual std::vector<std::pair<std::string, CheckpointPart*>> checkpoint_parts() { return {}; }
    // ElasticFinish::synchronize: whether a last synchronization is due, and the synchronization
    // as a step of its own.
    virtual bool final_synchronization_due() const { return false; }
    virtual void synchronize_final(bool /*redo*/) {}
    // The wrappers behind the accessors of ElasticTrainer; null where the strategy has none.
    virtual DistributedDataParallel* ddp() { return nullptr; }
    virtual detail::ElasticDiLoCo* diloco() { return nullptr; }
    virtual detail::ShardedRun* sharded() { return nullptr; }
  };
  struct ReplicaRun;
  struct DiLoCoRun;
  struct ShardedStrategyRun;

  ElasticGroup& elastic;
  std::shared_ptr<torch::nn::Module> module;
  torch::optim::Optimizer* optimizer;  // kDdp's (DiLoCo's inner one); null when sharded
  // kDdp under PrecisionOptions::master_weights (Note [Elastic master weights]).
  std::unique_ptr<amp::MasterWeights> master;
  // kDdp's optimizer when the trainer was given a factory (ElasticOptimizerFactory) for it.
  std::unique_ptr<torch::optim::Optimizer> made_optimizer;
  ElasticTrainerOptions options;
  ElasticSampler sampler;
  std::unique_ptr<Run> run;
  // DiLoCo (Note [Elastic DiLoCo]): the step whose inner step is done and whose synchronization
  // is not (-1: none), and the world size its samples were taken at.
  int64_t sync_pending = -1;
  int64_t pending_world = 0;
  std::function<void(const Membership&)> callback;
  std::vector<std::pair<std::string, torch::Tensor>> extra;
  std::vector<double> base_lrs;  // lr_schedule's, per param group (take_base_lrs)
  torch::Tensor ballot = torch::zeros({2}, torch::kInt64);
  int64_t committed = 0;
  int64_t rolled_back = 0;
  int64_t changes = -1;  // the first generation is not a change
  double last_change_s = 0;
  bool grow_pending = false;
  int64_t failed_saves = 0;
  int64_t saved_step = -1;  // of the last checkpoint written (healed: the same on every member)
  std::chrono::steady_clock::time_point last_poll{};

  State(ElasticGroup& e, std::shared_ptr<torch::nn::Module> m, torch::optim::Optimizer* o,
        size_t dataset_size, ElasticTrainerOptions opts)
      : elastic(e),
        module(std::move(m)),
        optimizer(o),
        options(std::move(opts)),
        sampler(dataset_size, options.sampler) {}

  torch::optim::Optimizer& current_optimizer() { return run->optimizer(); }

  // What kDdp's checkpoints hold: the module, or under master weights a module of its names
  // whose trainable parameters are the float32 masters.
  torch::nn::Module& checkpoint_module() { return master ? *master->checkpoint_module() : *module; }

  // The base LRs of ElasticTrainerOptions::lr_schedule: the groups' LRs of an optimizer as the
  // user made it, before any checkpoint or healing member gave it a scheduled LR.
  void take_base_lrs(const torch::optim::Optimizer& made) {
    for (const auto& group : made.param_groups()) base_lrs.push_back(group.options().get_lr());
  }

  // ElasticTrainerOptions::lr_schedule: the LR of step `committed` in every param group.
  void apply_lr_schedule() {
    if (!options.lr_schedule) return;
    auto& groups = current_optimizer().param_groups();
    COHORT_CHECK(groups.size() == base_lrs.size(), "ElasticTrainer: the optimizer has ",
                 groups.size(), " param groups, the first one had ", base_lrs.size(),
                 " when the trainer was made; ElasticTrainerOptions::lr_schedule needs the same "
                 "groups in every generation");
    for (size_t i = 0; i < groups.size(); ++i) {
      groups[i].options().set_lr(optim::scheduled_lr(*options.lr_schedule, base_lrs[i], committed));
    }
  }

  // The wrapper of a broken (by `cause`) or growing generation goes; a sharded strategy keeps
  // its pieces.
  void drop_wrapper(std::exception_ptr cause = nullptr) {
    run->drop_wrapper(std::move(cause));
    drop_gradients();
  }

  void drop_gradients() {
    for (auto& parameter : module->parameters()) parameter.mutable_grad() = torch::Tensor();
  }

  // A new generation: the strategy's wrapper over its group (ReplicaRun: a DDP, whose
  // constructor copies rank 0's parameters and buffers to every member), then the rest of rank
  // 0's state where some member lacks it.
  // `since`: when the change began (the failure, the agreed boundary, the constructor).
  void adopt_generation(std::chrono::steady_clock::time_point since) {
    const auto start = std::chrono::steady_clock::now();
    drop_wrapper();
    const Membership& m = elastic.membership();
    const bool heal = needs_healing(m);
    detail::follow_generation(*module, elastic.group_ptr(), options);
    run->adopt(heal);
    if (m.lost_step >= 0) resumed_lost_state(m);
    ++changes;
    if (m.rank == 0) {
      COHORT_LOG(kInfo, m.describe(), "; state ", heal ? "healed" : "kept", " from rank 0 in ",
                 seconds_since(start), " s");
    }
    last_change_s = seconds_since(since);
    if (callback) callback(m);
  }

  // Note [Lost state]: the members that held the job's state died while healing the others, so
  // no member holds it (each holds a mix). With a checkpoint_dir the generation forms anyway
  // (ElasticOptions::resume_lost_state, Membership::lost_step) and run->adopt resumes the
  // checkpoint as at a job's start, since every member arrives holding nothing; the steps after
  // it are redone. Without a checkpoint of this job there, the job ends on every member.
  void resumed_lost_state(const Membership& m) {
    if (committed < 0) {
      const std::string reason = detail::concat(
          "no member of generation ", m.generation, " holds the job's state of step ",
          m.lost_step + 1, " (those that held it died while healing the others), and '",
          options.checkpoint_dir, "' holds no checkpoint of this job to resume");
      elastic.fail(reason);
      throw ElasticError("ElasticTrainer: " + reason);
    }
    if (m.rank == 0) {
      COHORT_LOG(kWarn, "no member held the job's state of step ", m.lost_step + 1,
                 " (those that held it died while healing the others): resumed from the "
                 "checkpoint of step ",
                 committed, " in '", options.checkpoint_dir, "'; ", m.lost_step + 1 - committed,
                 " committed step(s) are redone");
    }
  }

  // kDdp (and DiLoCo) at a job's start: rank 0 loads the checkpoint in checkpoint_dir, if there is
  // one it may resume, and heals the others from it (every member of a start is healed). Its error
  // (another job's checkpoint, a corrupt one) is every member's.
  void resume_at_start() {
    if (options.checkpoint_dir.empty()) return;
    Group& group = elastic.group();
    int64_t status = detail::kStatusOk;
    std::string error;
    if (group.rank() == 0) {
      try {
        if (const auto step = detail::load_replica_checkpoint(
                options.checkpoint_dir, checkpoint_module(), *optimizer, sampler, options.resume,
                run->checkpoint_parts())) {
          if (master) master->loaded_into_masters();
          committed = *step;
          saved_step = *step;
          COHORT_LOG(kInfo, "resumed from the checkpoint in '", options.checkpoint_dir,
                     "' of step ", committed);
        }
      } catch (const std::exception& e) {
        status = detail::kStatusFailed;
        error = e.what();
      }
    }
    detail::broadcast_outcome(group, status, error, 0, call_sites::kElasticHeal);
    if (status == detail::kStatusFailed) throw CheckpointError(error);
  }

  // Note [Elastic saves]: whoever writes (rank 0 alone under kDdp, every member
  // under a sharded strategy), every member learns the outcome from rank 0 after the write, so
  // that a failed save (a full disk) is the same CheckpointError on every member, once, and not
  // the end of whichever member wrote (which would make the next rank 0 fail the same way at
  // its next save). The writers leave the previous checkpoint as it was (detail::
  // save_replica_checkpoint, save_sharded_checkpoint).
  void save_checkpoint() {
    COHORT_CHECK(!options.checkpoint_dir.empty(),
                 "ElasticTrainer::save_checkpoint: set ElasticTrainerOptions::checkpoint_dir");
    const Membership& m = elastic.membership();
    int64_t status = detail::kStatusOk;
    std::string error;
    try {
      run->write_checkpoint(m);
    } catch (const PeerError&) {
      throw;  // a member lost: the step's or the end's recovery, not the disk's
    } catch (const TimeoutError&) {
      throw;
    } catch (const std::exception& e) {
      status = detail::kStatusFailed;
      error = e.what();
    }
    detail::broadcast_outcome(elastic.group(), status, error, 0, call_sites::kElasticHeal);
    if (status == detail::kStatusFailed) {
      throw CheckpointError(detail::concat("ElasticTrainer: the checkpoint of step ", committed,
                                           " could not be written to '", options.checkpoint_dir,
                                           "' (the previous checkpoint there is kept): ", error));
    }
    saved_step = committed;
  }

  bool checkpoint_due() const {
    return options.checkpoint_every > 0 && !options.checkpoint_dir.empty() &&
           committed % options.checkpoint_every == 0;
  }

  // A periodic save that fails is skipped: the job goes on, the previous checkpoint stays.
  void maybe_save_checkpoint() {
    if (!checkpoint_due()) return;
    try {
      save_checkpoint();
    } catch (const CheckpointError& e) {
      ++failed_saves;
      if (elastic.membership().rank == 0) {
        COHORT_LOG(kWarn, e.what(), "; training goes on (", failed_saves,
                   " periodic save(s) failed so far)");
      }
    }
  }

  // Rank 0's sampler place, add_state tensors and (DiLoCo) pending synchronization on every
  // member; returns rank 0's step.
  int64_t heal_counters() {
    Group& group = elastic.group();
    auto counters = torch::tensor(
        {committed, static_cast<int64_t>(sampler.epoch()), static_cast<int64_t>(sampler.position()),
         static_cast<int64_t>(sampler.skipped()), rolled_back, sync_pending, pending_world,
         saved_step},
        torch::kInt64);
    CollectiveOptions root0;
    root0.site = call_sites::kElasticHeal;
    group.broadcast(tensor_buffer(counters), root0);
    sampler.restore(static_cast<uint64_t>(counters[1].item<int64_t>()),
                    static_cast<size_t>(counters[2].item<int64_t>()),
                    static_cast<size_t>(counters[3].item<int64_t>()));
    rolled_back = counters[4].item<int64_t>();
    sync_pending = counters[5].item<int64_t>();
    pending_world = counters[6].item<int64_t>();
    saved_step = counters[7].item<int64_t>();
    std::vector<torch::Tensor> tensors;
    for (auto& item : extra) tensors.push_back(item.second);
    if (!tensors.empty()) broadcast_coalesced(group, tensors, 0, call_sites::kElasticHeal);
    return counters[0].item<int64_t>();
  }

  // Rank 0 looks for waiting members at most every joiner_poll (a store round trip).
  int64_t joiners_seen() {
    if (elastic.membership().rank != 0) return 0;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_poll < options.joiner_poll) return 0;
    last_poll = now;
    return elastic.joiners_waiting() ? 1 : 0;
  }

  // Note [Elastic commit]: returns once every member finished its gradient reduction.
  void vote() {
    Group& group = elastic.group();
    auto* v = ballot.data_ptr<int64_t>();
    v[0] = 1;
    v[1] = joiners_seen();
    CollectiveOptions sum;
    sum.site = call_sites::kElasticCommit;
    group.allreduce(tensor_buffer(ballot), sum);
    COHORT_INTERNAL_ASSERT(v[0] == group.size(), "commit vote counted ", v[0], " of ", group.size(),
                           " members");
    grow_pending = v[1] > 0;
  }

  ElasticStep next_step() {
    const Membership& m = elastic.membership();
    sampler.skip_small_tail(m.size);
    return ElasticStep{committed, sampler.epoch(), sampler.step_indices(m.rank, m.size),
                       m.rank,    m.size,          m.generation};
  }

  // Note [Elastic end]: ElasticTrainer::finish(const ElasticFinish&). The end is one sequence,
  // run again from its start by every member of the next generation when a member is lost:
  //   the final DiLoCo synchronization (a committed step of its own: a member that saw its vote
  //     through is ahead of one that did not, so the rendezvous makes it rank 0 and heals the
  //     other, as after any step; a member that has it skips it),
  //   the checkpoint (written again: the same state),
  //   the evaluation (read-only),
  //   a vote that every member saw all of it through, then the job is marked finished.
  // The members that redo it all run the same collectives in the same order. A member whose last
  // vote failed while the others' passed finds the job finished when it looks for the next
  // generation: the others saw everything through, and it ends too.
  bool finish_run(const ElasticFinish& end) {
    const bool synchronizes = end.synchronize && run->final_synchronization_due();
    const int64_t final_step = committed + (synchronizes ? 1 : 0);
    bool redo = false;
    for (;;) {
      try {
        if (committed < final_step) run->synchronize_final(redo);
        if (end.save_checkpoint && !options.checkpoint_dir.empty() && saved_step != committed) {
          save_checkpoint();
        }
        if (end.evaluate) end.evaluate(elastic.group());
        vote();
        elastic.finish();
        return true;
      } catch (const PeerError&) {
        if (!recover_unless_finished(std::current_exception())) return false;
      } catch (const TimeoutError&) {
        if (!recover_unless_finished(std::current_exception())) return false;
      }
      redo = true;
    }
  }

  // recover(), or false when the others finished the job meanwhile (Note [Elastic end]).
  bool recover_unless_finished(std::exception_ptr cause) {
    try {
      recover(std::move(cause), /*count_rollback=*/false);
      return true;
    } catch (const ElasticError&) {
      if (elastic.finished()) return false;
      throw;
    }
  }

  // Note [Failures that do not heal]: a failure that loses no member heals nothing when the
  // next generation forms, and one that comes back at the same step in generation after
  // generation (a collective over a group of a past generation, something failing alike on
  // every member) would form generations forever, redoing one step (Note [Following the
  // generation] rebinds what the library knows of). After kFailuresWithoutLoss such failures
  // in a row at one step, every member (each sees the same) ends the job with the cause.
  static constexpr int kFailuresWithoutLoss = 3;
  int64_t lossless_failure_step = -1;
  int lossless_failures = 0;

  void end_a_failure_that_does_not_heal(const Membership& next, const std::string& cause) {
    if (!next.left.empty() || committed != lossless_failure_step) lossless_failures = 0;
    lossless_failure_step = next.left.empty() ? committed : -1;
    if (!next.left.empty() || ++lossless_failures < kFailuresWithoutLoss) return;
    const std::string reason = detail::concat(
        "step ", committed + 1, " failed in ", lossless_failures,
        " generations in a row with every member alive, the last time with: ", cause,
        "; a failure that loses no member is not healed by another generation (does the step "
        "use a group of an earlier generation? docs/elastic.md, \"What follows a "
        "generation\")");
    elastic.fail(reason);
    throw ElasticError("ElasticTrainer: " + reason);
  }

  // After `cause` broke the step: the next generation, healed. A failure meanwhile (while
  // healing) is met the same way.
  void recover(std::exception_ptr cause, bool count_rollback = true) {
    const auto start = std::chrono::steady_clock::now();
    if (count_rollback) ++rolled_back;
    drop_wrapper(cause);
    for (;;) {
      try {
        try {
          std::rethrow_exception(cause);
        } catch (const Error& e) {
          end_a_failure_that_does_not_heal(elastic.recover(e, committed), e.what());
        }
        adopt_generation(start);
        return;
      } catch (const PeerError&) {
        cause = std::current_exception();
      } catch (const TimeoutError&) {
        cause = std::current_exception();
      }
      drop_wrapper(cause);
    }
  }
};

// kDdp: each generation's DistributedDataParallel over the user's optimizer; a generation that
// needs healing takes rank 0's parameters (DDP's constructor), optimizer state and counters.
struct ElasticTrainer::State::ReplicaRun : Run {
  explicit ReplicaRun(State& state) : s(state) {}

  torch::optim::Optimizer& optimizer() override { return *s.optimizer; }
  void drop_wrapper(std::exception_ptr /*cause*/) override { ddp_.reset(); }

  // A receiver's parameters and optimizer state are overwritten piece by piece: until the whole
  // state is in, it holds none (-1), so that a failure meanwhile never makes it the source of the
  // next generation (Note [Elastic commit]).
  void adopt(bool heal) override {
    const Membership& m = s.elastic.membership();
    if (heal && receives_state(m)) s.committed = -1;
    before_resume();
    if (m.committed_step() < 0) s.resume_at_start();
    build_wrapper();
    if (!heal) return;
    const int64_t step = s.heal_counters();
    heal_state(m);
    s.committed = step;
  }

  bool step(const std::function<void(const ElasticStep&)>& forward_backward, bool& done) override {
    s.apply_lr_schedule();
    const ElasticStep step = s.next_step();
    if (s.master) {
      s.master->zero_grad();
    } else {
      s.optimizer->zero_grad();
    }
    forward_backward(step);
    s.vote();
    if (s.master) {
      s.master->step(*s.optimizer);
    } else {
      s.optimizer->step();
    }
    ++s.committed;
    done = true;  // what follows (the save's agreement) may still meet a lost member
    s.sampler.advance(step.world_size);
    s.maybe_save_checkpoint();
    return true;
  }

  // Rank 0 alone writes the file (Note [Elastic saves]).
  void write_checkpoint(const Membership& m) override {
    if (m.rank != 0) return;
    detail::save_replica_checkpoint(s.options.checkpoint_dir, s.checkpoint_module(), *s.optimizer,
                                    s.committed, s.sampler, m, checkpoint_parts());
  }

  DistributedDataParallel* ddp() override { return ddp_.get(); }

 protected:
  virtual void before_resume() {}
  virtual void build_wrapper() {
    ddp_ =
        std::make_unique<DistributedDataParallel>(s.module, s.elastic.group_ptr(), s.options.ddp);
  }
  // Note [Elastic master weights]: under master weights the DDP constructor gave every member
  // rank 0's 16-bit model, which is only the rounding of rank 0's float32 masters; the masters
  // themselves come from rank 0 too (a joiner's own would be its start's, and rounding the
  // model would lose what the masters add), and the model is then their rounding on every
  // member. The optimizer steps the masters (its state heals above), the checkpoints hold them
  // (checkpoint_module), so a member, a survivor and a resumed job all go on as the job
  // without faults.
  virtual void heal_state(const Membership& /*m*/) {
    detail::broadcast_optimizer_state(s.elastic.group(), *s.optimizer);
    if (!s.master) return;
    broadcast_coalesced(s.elastic.group(), s.master->parameters(), 0, call_sites::kElasticHeal);
    s.master->loaded_into_masters();
  }

  State& s;

 private:
  std::unique_ptr<DistributedDataParallel> ddp_;
};

// kDdp with ElasticTrainerOptions::diloco (Note [Elastic DiLoCo]): the replicas take inner steps
// with the user's optimizer and synchronize through the job's one DiLoCo, whose rounds run over
// each generation's group and whose outer state heals from rank 0 and travels in checkpoints.
struct ElasticTrainer::State::DiLoCoRun : ReplicaRun {
  DiLoCoRun(State& state, const DiLoCoOptions& options)
      : ReplicaRun(state), diloco_(*state.module, options) {}

  void drop_wrapper(std::exception_ptr /*cause*/) override { diloco_.drop_rounds(); }

  // The inner step, unless only its synchronization is left (the generation it ran in broke);
  // then, where a fragment is due, the rounds, the vote and the outer steps.
  bool step(const std::function<void(const ElasticStep&)>& forward_backward, bool& done) override {
    const bool redo = s.sync_pending == s.committed;
    if (!redo) {
      s.apply_lr_schedule();
      const ElasticStep step = s.next_step();
      s.optimizer->zero_grad();
      forward_backward(step);
      s.optimizer->step();
      diloco_.note_progress(s.committed);
      s.pending_world = step.world_size;
    }
    if (diloco_.synchronizes_at(s.committed)) {
      s.sync_pending = s.committed;
      diloco_.reduce_rounds(s.committed, redo);
      s.vote();
      diloco_.apply_rounds();
    }
    s.sync_pending = -1;
    ++s.committed;
    done = true;
    s.sampler.advance(static_cast<int>(s.pending_world));
    s.maybe_save_checkpoint();
    return true;
  }

  std::vector<std::pair<std::string, CheckpointPart*>> checkpoint_parts() override {
    return {{"diloco", diloco_.part()}};
  }

  bool final_synchronization_due() const override {
    return diloco_.needs_synchronization(s.committed);
  }

  // ElasticFinish::synchronize, as a step without an inner step.
  void synchronize_final(bool redo) override {
    diloco_.reduce_unsynchronized(s.committed, redo);
    s.vote();
    diloco_.apply_rounds();
    ++s.committed;
  }

  detail::ElasticDiLoCo* diloco() override { return &diloco_; }

 protected:
  void before_resume() override { diloco_.adopt(s.elastic.group_ptr()); }  // a resume loads into it
  void build_wrapper() override {}
  void heal_state(const Membership& m) override {
    diloco_.heal(s.elastic.group(), receives_state(m));
  }

 private:
  detail::ElasticDiLoCo diloco_;
};

// The sharded strategies (sharded_run.h): each generation's ZeRO or FSDP over optimizers the
// factory makes, the pieces each member holds exchanged after a change (Note [Piece exchange]).
struct ElasticTrainer::State::ShardedStrategyRun : Run {
  ShardedStrategyRun(State& state, std::unique_ptr<detail::ShardedRun> sharded)
      : s(state), sharded_(std::move(sharded)) {}

  torch::optim::Optimizer& optimizer() override { return sharded_->optimizer(); }
  void drop_wrapper(std::exception_ptr cause) override { sharded_->drop_wrapper(std::move(cause)); }

  // The pieces say what a member holds (Note [Piece exchange]); the step counts once they are
  // in, so that a joiner that fails meanwhile still arrives as holding nothing.
  void adopt(bool heal) override {
    int64_t step = heal ? s.heal_counters() : s.committed;
    const int64_t held = step;
    sharded_->adopt(s.elastic.group_ptr(), s.elastic.membership(), step, s.sampler);
    if (step != held) s.saved_step = step;  // resumed from the checkpoint of that step
    s.committed = step;
  }

  // The buddy gradients before the vote, the local optimizer steps after it, and what
  // communicates after the commit.
  bool step(const std::function<void(const ElasticStep&)>& forward_backward, bool& done) override {
    s.apply_lr_schedule();
    const ElasticStep step = s.next_step();
    sharded_->before_step();
    forward_backward(step);
    sharded_->after_backward();
    s.vote();
    sharded_->commit();
    ++s.committed;
    s.sampler.advance(step.world_size);
    done = true;
    sharded_->publish();
    s.maybe_save_checkpoint();
    return true;
  }

  // Every member writes its shards.
  void write_checkpoint(const Membership& m) override {
    sharded_->save_checkpoint(s.committed, s.sampler, m);
  }

  detail::ShardedRun* sharded() override { return sharded_.get(); }

 private:
  State& s;
  std::unique_ptr<detail::ShardedRun> sharded_;
};

ElasticTrainer::ElasticTrainer(ElasticGroup& elastic, std::shared_ptr<torch::nn::Module> module,
                               torch::optim::Optimizer& optimizer, size_t dataset_size,
                               ElasticTrainerOptions options)
    : state_(std::make_unique<State>(elastic, std::move(module), &optimizer, dataset_size,
                                     std::move(options))) {
  COHORT_CHECK(state_->options.strategy == StrategyKind::kDdp,
               "ElasticTrainer: a sharded strategy builds its optimizer for each generation; pass "
               "an optimizer factory (ElasticOptimizerFactory) instead of an optimizer");
  COHORT_CHECK(!state_->options.precision.master_weights,
               "ElasticTrainer: under master weights the optimizer steps the float32 masters, "
               "which the trainer makes from the module; pass an optimizer factory "
               "(ElasticOptimizerFactory) instead of an optimizer");
  make_replica_run();
}

ElasticTrainer::ElasticTrainer(ElasticGroup& elastic, std::shared_ptr<torch::nn::Module> module,
                               ElasticOptimizerFactory make_optimizer, size_t dataset_size,
                               ElasticTrainerOptions options)
    : state_(std::make_unique<State>(elastic, std::move(module), nullptr, dataset_size,
                                     std::move(options))) {
  COHORT_CHECK(state_->module, "ElasticTrainer: the module is null");
  COHORT_CHECK(make_optimizer != nullptr, "ElasticTrainer: the optimizer factory is empty");
  if (state_->options.strategy == StrategyKind::kDdp) {
    // The replicas' optimizer is made once, over the whole model (under master weights its
    // float32 masters: the model becomes 16-bit here, before any wrapper), and kept.
    detail::refuse_inelastic_precision(state_->options);
    if (state_->options.precision.master_weights) {
      state_->master = std::make_unique<amp::MasterWeights>(
          state_->module, state_->options.precision.compute_dtype);
    }
    state_->made_optimizer = make_optimizer(state_->master ? state_->master->named_parameters()
                                                           : state_->module->named_parameters());
    COHORT_CHECK(state_->made_optimizer != nullptr,
                 "ElasticTrainer: the optimizer factory returned null");
    state_->optimizer = state_->made_optimizer.get();
    make_replica_run();
    return;
  }
  COHORT_CHECK(!state_->options.diloco, "ElasticTrainer: DiLoCo runs under kDdp, not ",
               strategy_name(state_->options.strategy),
               " (ElasticTrainerOptions::diloco with a sharded strategy)");
  // The factory over the whole model, once: its groups' LRs are the schedule's bases.
  if (state_->options.lr_schedule) {
    const auto probe = make_optimizer(state_->module->named_parameters());
    COHORT_CHECK(probe != nullptr, "ElasticTrainer: the optimizer factory returned null");
    state_->take_base_lrs(*probe);
  }
  state_->run = std::make_unique<State::ShardedStrategyRun>(
      *state_, std::make_unique<detail::ShardedRun>(state_->module, std::move(make_optimizer),
                                                    state_->options));
  start();
}

// kDdp, with or without DiLoCo, over state_->optimizer.
void ElasticTrainer::make_replica_run() {
  COHORT_CHECK(state_->module, "ElasticTrainer: the module is null");
  if (state_->options.diloco) {
    state_->run = std::make_unique<State::DiLoCoRun>(*state_, *state_->options.diloco);
  } else {
    state_->run = std::make_unique<State::ReplicaRun>(*state_);
  }
  state_->take_base_lrs(*state_->optimizer);
  start();
}

void ElasticTrainer::start() {
  ElasticGroup& elastic = state_->elastic;
  const auto start = std::chrono::steady_clock::now();
  COHORT_CHECK(state_->module, "ElasticTrainer: the module is null");
  detail::refuse_what_cannot_follow(state_->options);
  detail::refuse_inelastic_precision(state_->options);
  if (state_->options.lr_schedule) state_->options.lr_schedule->validate();
  if (!elastic.joined()) {
    elastic.set_fingerprint(model_fingerprint(*state_->module));
    elastic.set_resume_lost_state(!state_->options.checkpoint_dir.empty());
    elastic.join();
  }
  if (state_->options.sync_batchnorm) {
    detail::convert_batch_norms(state_->module, elastic.group_ptr());
  }
  try {
    state_->adopt_generation(start);
  } catch (const PeerError&) {
    state_->recover(std::current_exception());
  } catch (const TimeoutError&) {
    state_->recover(std::current_exception());
  } catch (const CheckpointError& e) {
    // Every member of the job's start refused the checkpoint (another job's, a corrupt one):
    // a restarted or new member would refuse it again, so the job ends here for all of them.
    if (elastic.membership().committed_step() < 0) elastic.fail(e.what());
    throw;
  }
}

ElasticTrainer::~ElasticTrainer() {
  state_->run.reset();
}

bool ElasticTrainer::step(const std::function<void(const ElasticStep&)>& forward_backward) {
  State& s = *state_;
  bool committed = false;  // a sharded step meets failures after its commit too (publish)
  try {
    if (s.grow_pending) {
      const auto start = std::chrono::steady_clock::now();
      s.grow_pending = false;
      s.drop_wrapper();
      s.elastic.grow(s.committed);
      s.adopt_generation(start);
    }
    return s.run->step(forward_backward, committed);
  } catch (const PeerError&) {
    s.recover(std::current_exception());
  } catch (const TimeoutError&) {
    s.recover(std::current_exception());
  }
  return committed;
}

amp::Autocast ElasticTrainer::forward_scope() const {
  return cohort::forward_scope(state_->options.precision);
}

void ElasticTrainer::on_membership_change(std::function<void(const Membership&)> callback) {
  state_->callback = std::move(callback);
  if (state_->callback) state_->callback(state_->elastic.membership());
}

void ElasticTrainer::add_state(const std::string& name, torch::Tensor tensor) {
  COHORT_CHECK(tensor.defined() && tensor.device().is_cpu() && tensor.is_contiguous(),
               "ElasticTrainer::add_state('", name, "'): pass a defined, contiguous CPU tensor");
  state_->extra.emplace_back(name, std::move(tensor));
}

int64_t ElasticTrainer::committed_steps() const {
  return state_->committed;
}
uint64_t ElasticTrainer::epoch() const {
  return state_->sampler.epoch();
}
const ElasticSampler& ElasticTrainer::sampler() const {
  return state_->sampler;
}
const Membership& ElasticTrainer::membership() const {
  return state_->elastic.membership();
}
DistributedDataParallel& ElasticTrainer::ddp() {
  DistributedDataParallel* ddp = state_->run->ddp();
  COHORT_CHECK(ddp, "ElasticTrainer::ddp(): the strategy is not kDdp without DiLoCo");
  return *ddp;
}
DiLoCo& ElasticTrainer::diloco() {
  detail::ElasticDiLoCo* diloco = state_->run->diloco();
  COHORT_CHECK(diloco, "ElasticTrainer::diloco(): ElasticTrainerOptions::diloco is not set");
  return diloco->diloco();
}
torch::optim::Optimizer& ElasticTrainer::optimizer() {
  return state_->current_optimizer();
}
amp::MasterWeights* ElasticTrainer::master_weights() {
  return state_->master.get();
}
ShardedParameters ElasticTrainer::sharded_parameters() {
  detail::ShardedRun* sharded = state_->run->sharded();
  COHORT_CHECK(sharded, "ElasticTrainer::sharded_parameters(): the strategy is kDdp");
  return sharded->view();
}
void ElasticTrainer::save_checkpoint() {
  state_->save_checkpoint();
}
ElasticGroup& ElasticTrainer::elastic() {
  return state_->elastic;
}
int64_t ElasticTrainer::rolled_back_steps() const {
  return state_->rolled_back;
}
int64_t ElasticTrainer::membership_changes() const {
  return state_->changes;
}
double ElasticTrainer::last_change_seconds() const {
  return state_->last_change_s;
}

void ElasticTrainer::finish() {
  state_->elastic.finish();
}

bool ElasticTrainer::between_steps(const std::function<void(Group&)>& collective) {
  try {
    collective(state_->elastic.group());
    return true;
  } catch (const PeerError&) {  // the next step's first collective meets the same loss
    return false;
  } catch (const TimeoutError&) {
    return false;
  }
}

bool ElasticTrainer::finish(const ElasticFinish& end) {
  return state_->finish_run(end);
}

int64_t ElasticTrainer::failed_saves() const {
  return state_->failed_saves;
}

int64_t ElasticTrainer::checkpoint_step() const {
  return state_->saved_step;
}

}  // namespace cohort
