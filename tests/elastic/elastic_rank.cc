// One member of an elastic training job for tests/elastic: a small classifier trained with
// cohort::ElasticTrainer on synthetic data. Every member prints each committed step as
// "commit <step> <world size> <generation> <epoch> <i1,i2,...>" (its own sample indices), and
// each membership as "membership <describe>"; the member with rank 0 at the end writes the
// parameters (raw float32, in registration order) to --out. Faults are scripted: --kill
// LAUNCH_RANK:STEP:PHASE makes the first process of that launch rank kill itself (SIGKILL) or stop
// (SIGSTOP) at that step, in one phase:
//   forward    before the forward pass
//   backward   in the middle of backward (from the first gradient's hook; buckets in flight)
//   allreduce  when the first parameter's gradient is accumulated (the last bucket's reduction)
//   optimizer  inside optimizer.step(), after the commit vote
//   stop       SIGSTOP before the forward pass (the process stays stopped)
//   heal       while it heals a joining member at that step or later, in its optimizer's
//              save() (--opaque-optimizer)
//   end        at step --steps: after the last step, before the end of the run
//   evaluate   in the first call of the evaluation at that step (--evaluate-every between
//              steps, --end's at step --steps)
// --stop-after N leaves after N committed steps (a job that ends there); --resume resumes
// another job's checkpoint in --checkpoint-dir. --strategy ddp|zero1|zero2|full_shard|
// hybrid_shard|diloco picks ElasticTrainerOptions::strategy (the sharded ones build their
// optimizer through a factory; diloco synchronizes every --diloco-steps steps, in
// --diloco-fragments fragments, and each member prints every committed step as
// "diloco <step> <member> <rank> <world> <inner world> <i1,i2,...>", where <member> is the
// launch rank (plus 100 for a joiner), and the inner world and samples are "-" where it took no
// inner step in it: a joiner healed while the step's synchronization was redone; first it
// prints "fragments <f1,f2,...>", the fragment of each parameter); --ranks-per-node
// N puts the launch ranks on simulated nodes of N (COHORT_NODE_ID), for hybrid_shard;
// --sync-bn adds a BatchNorm1d to the model and sets ElasticTrainerOptions::sync_batchnorm;
// --stale-group allreduces over the first generation's group in every forward; --bf16 sets
// ElasticTrainerOptions::precision to bfloat16 autocast, --master-weights to bfloat16 with
// float32 master weights (the trainer's factory constructor under ddp; --out gets the masters,
// and every member prints "masters <hex>", the bytes of its masters hashed, at the end: under
// FSDP's strategies the whole float32 parameters);
// --opaque-optimizer gives DDP an optimizer that no checkpoint codec knows, so that its state heals
// through save() and load(); --no-buddy turns buddy copies off, --checkpoint-dir and
// --checkpoint-every make the trainer write sharded checkpoints; --lr-warmup N sets a learning-rate
// schedule (elastic_lr_schedule).
#include <signal.h>
#include <sys/resource.h>
#include <torch/torch.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "cohort/comm/elastic.h"
#include "cohort/core/env.h"
#include "cohort/torch/amp/master_weights.h"
#include "cohort/torch/elastic/elastic_trainer.h"
#include "elastic_model.h"

namespace {

struct Fault {
  int launch_rank = -1;
  int64_t step = -1;
  std::string phase;
};

Fault parse_fault(const std::string& text) {
  Fault f;
  const auto a = text.find(':'), b = text.find(':', a + 1);
  f.launch_rank = std::stoi(text.substr(0, a));
  f.step = std::stoll(text.substr(a + 1, b - a - 1));
  f.phase = text.substr(b + 1);
  return f;
}

// The optimizer of the test model, with a place to fail inside step() (the "optimizer" phase).
class FaultySgd : public torch::optim::SGD {
 public:
  using torch::optim::SGD::SGD;
  bool fail_in_step = false;
  torch::Tensor step(LossClosure closure = nullptr) override {
    if (fail_in_step) raise(SIGKILL);
    return torch::optim::SGD::step(std::move(closure));
  }
};

void fail(const std::string& phase) {
  std::cout << "fault " << phase << std::endl;
  raise(phase == "stop" ? SIGSTOP : SIGKILL);
}

// The test model's SGD as an optimizer no codec knows, with a place to fail in save(), which
// rank 0 calls while it heals a member (the "heal" phase).
class OpaqueSgd : public torch::optim::Optimizer {
 public:
  OpaqueSgd(const std::vector<torch::Tensor>& parameters, const torch::optim::SGDOptions& options)
      : Optimizer({torch::optim::OptimizerParamGroup(parameters)},
                  std::make_unique<torch::optim::SGDOptions>(options)),
        sgd_(parameters, options) {}
  bool fail_in_save = false;
  torch::Tensor step(LossClosure closure = nullptr) override {
    return sgd_.step(std::move(closure));
  }
  void save(torch::serialize::OutputArchive& archive) const override {
    if (fail_in_save) fail("heal");
    sgd_.save(archive);
  }
  void load(torch::serialize::InputArchive& archive) override { sgd_.load(archive); }

 private:
  torch::optim::SGD sgd_;
};

// --fill-disk-at: writes to regular files past 64 bytes fail (EFBIG; SIGXFSZ ignored) as on a
// full disk; the sampler's file of a checkpoint fits, its model does not. empty_disk() lifts
// it (the soft limit only was lowered).
void fill_disk() {
  static bool filled = false;
  if (filled) return;
  filled = true;
  signal(SIGXFSZ, SIG_IGN);
  rlimit limit{};
  getrlimit(RLIMIT_FSIZE, &limit);
  limit.rlim_cur = 64;
  setrlimit(RLIMIT_FSIZE, &limit);
}

void empty_disk() {
  rlimit limit{};
  getrlimit(RLIMIT_FSIZE, &limit);
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_FSIZE, &limit);
}

// Waits until a new member has arrived, 60 s at most.
void await_joiner(cohort::ElasticGroup& elastic) {
  if (!elastic.wait_for_joiners(1, std::chrono::seconds(60))) {
    throw std::runtime_error("no joiner came");
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("elastic test member");
  int64_t steps = 30;
  size_t batch_per_rank = 4, global_batch = 0;
  std::string out, fault_text;
  std::vector<std::string> fault_texts;
  app.add_option("--steps", steps);
  app.add_option("--batch-per-rank", batch_per_rank);
  app.add_option("--global-batch", global_batch);
  app.add_option("--out", out);
  app.add_option("--kill", fault_texts);
  int64_t await_step = -1;
  int await_size = 0;
  app.add_option("--await-step", await_step,
                 "hold every member before this step until --await-size members are in, or a "
                 "new member waits in the store");
  app.add_option("--await-size", await_size);
  int64_t hidden = 16;
  app.add_option("--hidden", hidden, "hidden units (another value: another model)");
  std::string strategy = "ddp", checkpoint_dir;
  bool no_buddy = false;
  int64_t checkpoint_every = 0;
  bool adam = false, opaque = false;
  app.add_flag("--adam", adam, "DDP: Adam instead of the job's SGD (another optimizer)");
  app.add_flag("--opaque-optimizer", opaque, "DDP: the SGD as an optimizer no codec knows");
  app.add_option("--strategy", strategy)
      ->check(CLI::IsMember({"ddp", "zero1", "zero2", "full_shard", "hybrid_shard", "diloco"}));
  int64_t diloco_steps = 4, diloco_fragments = 1;
  app.add_option("--diloco-steps", diloco_steps);
  app.add_option("--diloco-fragments", diloco_fragments);
  int ranks_per_node = 0;
  app.add_option("--ranks-per-node", ranks_per_node,
                 "COHORT_NODE_ID from the launch rank: launch ranks 0..N-1 on node0, ...");
  app.add_flag("--no-buddy", no_buddy);
  int64_t buddy_refresh_steps = cohort::ElasticTrainerOptions{}.buddy_refresh_steps;
  app.add_option("--buddy-refresh-steps", buddy_refresh_steps);
  app.add_option("--checkpoint-dir", checkpoint_dir);
  app.add_option("--checkpoint-every", checkpoint_every);
  bool resume = false;
  app.add_flag("--resume", resume, "resume the checkpoint in --checkpoint-dir of another job");
  int64_t stop_after = -1;
  app.add_option("--stop-after", stop_after, "leave after this many committed steps");
  int64_t fill_disk_at = -1;
  app.add_option("--fill-disk-at", fill_disk_at,
                 "from this committed step on, files this process writes stop at 64 bytes "
                 "(RLIMIT_FSIZE): the disk is full");
  bool end = false;
  app.add_flag("--end", end,
               "end with ElasticTrainer::finish(ElasticFinish) and an evaluation (a loss summed "
               "over the members), instead of finish()");
  int64_t evaluate_every = 0;
  app.add_option("--evaluate-every", evaluate_every,
                 "between steps, every N committed steps: ElasticTrainer::between_steps with the "
                 "evaluation");
  int64_t lr_warmup = 0;
  app.add_option("--lr-warmup", lr_warmup,
                 "ElasticTrainerOptions::lr_schedule: this many warm-up steps, then a cosine "
                 "decay to 0 at --steps (cohort::testing::elastic_lr_schedule)");
  bool sync_bn = false, stale_group = false, bf16 = false, master_weights = false;
  app.add_flag("--bf16", bf16, "ElasticTrainerOptions::precision: bfloat16 autocast");
  app.add_flag("--master-weights", master_weights,
               "ElasticTrainerOptions::precision: bfloat16 with float32 master weights");
  app.add_flag("--sync-bn", sync_bn,
               "a BatchNorm1d in the model and ElasticTrainerOptions::sync_batchnorm");
  app.add_flag("--stale-group", stale_group,
               "every forward also allreduces over the first generation's group (a step that "
               "fails in every later generation with every member alive)");
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(1);
  dup2(STDOUT_FILENO, STDERR_FILENO);  // the library's log, for the tests to read
  std::cout << std::unitbuf;

  const int launch_rank = static_cast<int>(cohort::env_int("RANK").value_or(0));
  const bool first_process = !cohort::env_int("ELASTIC_TEST_JOINER").has_value();
  std::vector<Fault> faults;
  for (const auto& t : fault_texts) {
    Fault f = parse_fault(t);
    if (first_process && f.launch_rank == launch_rank) faults.push_back(f);
  }
  auto fault_at = [&](int64_t step, const std::string& phase) {
    for (const auto& f : faults) {
      if (f.step == step && f.phase == phase) return true;
    }
    return false;
  };

  if (ranks_per_node > 0) {
    setenv("COHORT_NODE_ID", ("node" + std::to_string(launch_rank / ranks_per_node)).c_str(), 1);
  }
  try {
    auto elastic = cohort::init_elastic();
    auto model = cohort::testing::make_elastic_model(hidden, sync_bn);
    const auto data = cohort::testing::elastic_data();
    cohort::ElasticTrainerOptions options;
    options.sampler = cohort::testing::elastic_sampler_options(batch_per_rank, global_batch);
    options.joiner_poll = std::chrono::milliseconds(0);
    // The strategies by name; "diloco" is ddp with DiLoCo.
    options.strategy = strategy == "diloco" ? cohort::StrategyKind::kDdp
                                            : cohort::strategy_named(strategy).value();
    if (strategy == "diloco") {
      options.diloco = cohort::DiLoCoOptions{};
      options.diloco->inner_steps = diloco_steps;
      options.diloco->fragments = diloco_fragments;
    }
    options.sync_batchnorm = sync_bn;
    if (bf16 || master_weights) options.precision = cohort::precision_named("bf16", master_weights);
    options.buddy_copies = !no_buddy;
    options.buddy_refresh_steps = buddy_refresh_steps;
    options.checkpoint_dir = checkpoint_dir;
    options.checkpoint_every = checkpoint_every;
    options.resume.any_job = resume;
    if (lr_warmup > 0) options.lr_schedule = cohort::testing::elastic_lr_schedule(lr_warmup, steps);
    const auto sgd = torch::optim::SGDOptions(0.05).momentum(0.9);
    FaultySgd ddp_optimizer(model->parameters(), sgd);
    torch::optim::Adam other_optimizer(model->parameters());
    OpaqueSgd opaque_optimizer(model->parameters(), sgd);
    std::unique_ptr<cohort::ElasticTrainer> made;
    if (options.strategy == cohort::StrategyKind::kDdp && !master_weights) {
      torch::optim::Optimizer& optimizer =
          adam     ? static_cast<torch::optim::Optimizer&>(other_optimizer)
          : opaque ? static_cast<torch::optim::Optimizer&>(opaque_optimizer)
                   : ddp_optimizer;
      made = std::make_unique<cohort::ElasticTrainer>(*elastic, model, optimizer,
                                                      data.inputs.size(0), options);
    } else {
      auto factory = [&](const torch::OrderedDict<std::string, torch::Tensor>& named) {
        return std::make_unique<FaultySgd>(named.values(), sgd);
      };
      made = std::make_unique<cohort::ElasticTrainer>(*elastic, model, factory, data.inputs.size(0),
                                                      options);
    }
    cohort::ElasticTrainer& trainer = *made;
    if (strategy == "diloco") {
      std::cout << "fragments ";
      for (int64_t f : trainer.diloco().fragment_of_parameter()) std::cout << f << ",";
      std::cout << std::endl;
    }
    trainer.on_membership_change([](const cohort::Membership& m) {
      std::cout << "membership " << m.describe() << " rank " << m.rank << std::endl;
    });
    // The evaluation: the mean loss over the data set, each member a slice, summed; "evaluate"
    // faults fire in the first call at their step.
    int64_t evaluated_at = -1;
    auto evaluate = [&](cohort::Group& group) {
      const int64_t at = trainer.committed_steps();
      if (evaluated_at != at && fault_at(at, "evaluate")) fail("evaluate");
      evaluated_at = at;
      torch::NoGradGuard no_grad;
      const auto index = torch::arange(group.rank(), data.inputs.size(0), group.size());
      auto sum = (cohort::testing::elastic_loss(*model, data, index) * index.numel()).reshape({1});
      group.allreduce(cohort::Buffer{sum.data_ptr<float>(), 1, cohort::DType::kFloat32});
      if (group.rank() == 0) {
        std::cout << "evaluated " << sum.item<float>() / data.inputs.size(0) << " on "
                  << group.size() << " rank(s)" << std::endl;
      }
    };
    bool awaited = false;  // once: a member lost meanwhile is not waited for again
    const int member = launch_rank + (first_process ? 0 : 100);
    std::optional<cohort::ElasticStep> trained;  // diloco: kept across a redone synchronization
    while (trainer.committed_steps() < steps && trainer.committed_steps() != stop_after) {
      if (trainer.committed_steps() >= fill_disk_at && fill_disk_at >= 0) fill_disk();
      if (trainer.committed_steps() == await_step && trainer.membership().size < await_size &&
          !awaited) {
        await_joiner(*elastic);
        awaited = true;
      }
      opaque_optimizer.fail_in_save = std::any_of(faults.begin(), faults.end(), [&](auto& f) {
        return f.phase == "heal" && f.step <= trainer.committed_steps();
      });
      cohort::ElasticStep taken;
      const bool committed = trainer.step([&](const cohort::ElasticStep& step) {
        taken = step;
        trained = step;
        if (stale_group) {
          static const std::shared_ptr<cohort::Group> first = elastic->group_ptr();
          float one = 1;
          first->allreduce(cohort::Buffer{&one, 1, cohort::DType::kFloat32});
        }
        if (fault_at(step.step, "forward")) fail("forward");
        if (fault_at(step.step, "stop")) fail("stop");
        if (auto* faulty = dynamic_cast<FaultySgd*>(&trainer.optimizer())) {
          faulty->fail_in_step = fault_at(step.step, "optimizer");
        }
        const auto index =
            torch::tensor(std::vector<int64_t>(step.indices.begin(), step.indices.end()));
        torch::Tensor loss;
        {
          const auto autocast = trainer.forward_scope();
          loss = cohort::testing::elastic_loss(*model, data, index);
        }
        torch::Tensor last = model->parameters().back(), first = model->parameters().front();
        if (fault_at(step.step, "backward")) {
          last.register_hook([](torch::Tensor g) {
            fail("backward");
            return g;
          });
        }
        if (fault_at(step.step, "allreduce")) {
          first.register_hook([](torch::Tensor g) {
            fail("allreduce");
            return g;
          });
        }
        loss.backward();
      });
      if (committed && evaluate_every > 0 && trainer.committed_steps() % evaluate_every == 0 &&
          trainer.committed_steps() < steps) {
        const bool whole = trainer.between_steps(evaluate);
        std::cout << "evaluation at step " << trainer.committed_steps() << ": "
                  << (whole ? "done" : "a member was lost") << std::endl;
      }
      if (committed && strategy == "diloco") {
        const int64_t step = trainer.committed_steps() - 1;
        const cohort::Membership& m = trainer.membership();
        std::cout << "diloco " << step << " " << member << " " << m.rank << " " << m.size << " ";
        if (trained && trained->step == step) {
          std::cout << trained->world_size << " ";
          for (size_t index : trained->indices) std::cout << index << ",";
        } else {
          std::cout << "- -";
        }
        std::cout << std::endl;
        trained.reset();
      } else if (committed) {
        std::cout << "commit " << taken.step << " " << taken.world_size << " " << taken.generation
                  << " " << taken.epoch << " ";
        for (size_t index : taken.indices) std::cout << index << ",";
        std::cout << std::endl;
      }
    }
    if (fault_at(steps, "end")) fail("end");  // after the last step, before the end
    if (end) {
      cohort::ElasticFinish finish;
      finish.evaluate = evaluate;
      const bool saw_end = trainer.finish(finish);
      double checksum = 0;
      for (const auto& p : model->parameters()) checksum += p.detach().sum().item<double>();
      std::cout << "end " << (saw_end ? "seen" : "finished by the others") << " at step "
                << trainer.committed_steps() << ", parameters summing to " << checksum << std::endl;
    } else {
      trainer.finish();
    }
    std::cout << "failed saves " << trainer.failed_saves() << std::endl;
    const int final_rank = trainer.membership().rank;
    // Under ddp's master weights the file holds the float32 masters, which go with the trainer
    // (under FSDP's the whole float32 parameters are the masters).
    std::vector<torch::Tensor> masters;
    if (auto* master = trainer.master_weights()) {
      for (const auto& t : master->parameters()) masters.push_back(t.detach().clone());
    }
    made.reset();  // FULL_SHARD: the parameters are whole again once the trainer is gone
    if (masters.empty()) {
      for (const auto& p : model->parameters()) masters.push_back(p.detach().contiguous());
    }
    if (master_weights) {
      uint64_t hash = 1469598103934665603ull;  // FNV-1a over every master's bytes
      for (const auto& t : masters) {
        const auto* bytes = static_cast<const unsigned char*>(t.data_ptr());
        for (int64_t i = 0; i < t.numel() * 4; ++i) hash = (hash ^ bytes[i]) * 1099511628211ull;
      }
      std::cout << "masters " << std::hex << hash << std::dec << std::endl;
    }
    if (fill_disk_at >= 0) empty_disk();
    if (final_rank == 0 && !out.empty()) {
      std::ofstream file(out, std::ios::binary);
      for (const auto& p : masters) {
        file.write(static_cast<const char*>(p.data_ptr()), p.numel() * sizeof(float));
      }
    }
    std::cout << "done rank " << final_rank << std::endl;
    return 0;
  } catch (const cohort::ElasticError& e) {
    std::cout << "ElasticError: " << e.what() << std::endl;
    return 3;
  } catch (const std::exception& e) {
    std::cout << "error: " << e.what() << std::endl;
    return 1;
  }
}
