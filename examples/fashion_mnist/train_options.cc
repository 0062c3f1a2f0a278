#include "train_options.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <limits>

#include "activation_checkpointing.h"
#include "checkpointing.h"
#include "cohort/core/error.h"
#include "dataset.h"
#include "optimizers.h"
#include "precision.h"
#include "strategy.h"

namespace fashion_mnist {

int64_t TrainOptions::warmup() const {
  if (warmup_steps >= 0) return warmup_steps;
  return batch_size > kReferenceBatch ? kAutoWarmupSteps : 0;
}

double TrainOptions::scaled_lr() const {
  if (lr_scaling == "none") return base_lr;
  return cohort::optim::linear_scaled_lr(base_lr, kReferenceBatch, batch_size);
}

cohort_examples::OptimizerSettings TrainOptions::optimizer_settings(
    torch::nn::Module* module) const {
  cohort_examples::OptimizerSettings settings;
  settings.lr = scaled_lr();
  settings.momentum = momentum;
  settings.weight_decay = weight_decay;
  settings.module = module;
  return settings;
}

cohort::optim::LrScheduleOptions TrainOptions::lr_schedule_options(int64_t planned_steps) const {
  cohort::optim::LrScheduleOptions o;
  o.warmup_steps = warmup();
  if (lr_schedule == "cosine") o.decay = cohort::optim::LrDecay::kCosine;
  if (lr_schedule == "poly") {
    o.decay = cohort::optim::LrDecay::kPolynomial;
    o.power = kPolyPower;
  }
  // A run shorter than its warm-up never reaches the decay: its total is the warm-up's end.
  o.total_steps = std::max({planned_steps, o.warmup_steps, int64_t{1}});
  return o;
}

void add_train_options(CLI::App& app, TrainOptions& o) {
  o.data_dir = kDefaultDataDir;
  app.add_option("--data", o.data_dir, "Directory of the four Fashion-MNIST .gz files");
  app.add_option("--model", o.model,
                 "cnn (two conv layers), cnn_bn (the same with BatchNorm after each) or mlp")
      ->check(CLI::IsMember({"cnn", "cnn_bn", "mlp"}));
  app.add_flag("--sync-bn", o.sync_bn,
               "BatchNorm over the global batch: cohort::nn::SyncBatchNorm (needs --model cnn_bn)");
  app.add_flag("--activation-checkpointing", o.activation_checkpointing,
               "Recompute the conv stack's activations in backward instead of keeping them "
               "(cohort::checkpoint_modules; needs --model cnn_bn)");
  app.add_option("--strategy", o.strategy, cohort_examples::strategy_help())
      ->check(CLI::IsMember(cohort_examples::strategy_choices()))
      ->capture_default_str();
  cohort_examples::add_precision_options(app, o.precision, o.master_weights);
  app.add_option("--epochs", o.epochs, "Passes over the training set")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", o.batch_size, "Global batch, split evenly over the ranks")
      ->check(CLI::PositiveNumber);
  app.add_option("--lr", o.base_lr, "Learning rate at batch 64 (scaled with the global batch)")
      ->check(CLI::PositiveNumber);
  app.add_option("--lr-scaling", o.lr_scaling,
                 "linear: --lr scaled from batch 64 to --batch-size; none: --lr as it is")
      ->check(CLI::IsMember({"linear", "none"}))
      ->capture_default_str();
  app.add_option("--optimizer", o.optimizer, cohort_examples::optimizer_help())
      ->check(CLI::IsMember(cohort_examples::optimizer_names()))
      ->capture_default_str();
  app.add_option("--momentum", o.momentum, "SGD momentum")->check(CLI::Range(0.0, 1.0));
  app.add_option("--weight-decay", o.weight_decay, "Weight decay (sgd: L2; adamw: decoupled)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--warmup-steps", o.warmup_steps,
                 "Steps of linear learning-rate warm-up (-1: none at batch 64, 200 above)")
      ->check(CLI::Range(int64_t{-1}, std::numeric_limits<int64_t>::max()));
  app.add_option("--lr-schedule", o.lr_schedule,
                 "After the warm-up: constant, or cosine / poly (power 2) decay to 0 at the end")
      ->check(CLI::IsMember(kLrScheduleNames))
      ->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of the weights, the shuffle and dropout");
  cohort_examples::add_plan_options(app, o.plan);
  cohort_examples::add_comm_hook_options(app, o.comm_hook);
  cohort_examples::add_local_sgd_options(app, o.local_sgd);
  cohort_examples::add_diloco_options(app, o.diloco);
  cohort_examples::add_elastic_flags(app, o.elastic, o.sample_log);
  app.add_option("--mode", o.mode,
                 "sync: every step together (--strategy); ps: parameter server, asynchronous; "
                 "ssp: parameter server with bounded staleness --staleness (docs/async.md)")
      ->check(CLI::IsMember(kModeNames))
      ->capture_default_str();
  app.add_option("--staleness", o.staleness,
                 "ssp: how many steps behind a gradient's parameters may be (0: synchronous)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--servers", o.servers, "ps, ssp: how many of the last ranks serve parameters")
      ->check(CLI::PositiveNumber);
  app.add_option("--backup-workers", o.backup_workers,
                 "ssp with --staleness 0: a step goes on once all but this many workers pushed")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--staleness-lr-scaling", o.staleness_lr_scaling,
               "ps, ssp: scale each gradient by 1/staleness (the learning rate, for SGD)");
  app.add_flag("--hybrid", o.hybrid,
               "ps, ssp: the workers of a node average with an allreduce, one of them pushes");
  app.add_option("--time-limit", o.time_limit_s, "Stop training after this many seconds")
      ->check(CLI::NonNegativeNumber);
  cohort_examples::add_checkpoint_flags(app, o.checkpoint, o.checkpoint_every, o.resume,
                                        o.overwrite_checkpoint, o.sync_checkpoint);
  app.add_option("--metrics", o.metrics, "Write every step's figures here (.csv or JSON lines)");
  app.add_option("--max-steps", o.max_steps, "Stop after this many steps in all")
      ->check(CLI::PositiveNumber);
  app.add_flag("--skip-eval", o.skip_eval, "Do not evaluate on the test set");
  app.add_option("--threads", o.threads, "torch threads per rank (0: cores / local ranks)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("!--no-progress", o.progress, "No progress bar or lines");
  app.add_option("--log-every", o.log_every, "Steps between progress lines (no terminal)")
      ->check(CLI::PositiveNumber);
}

void checkpoint_conv_stack(torch::nn::Module& model, const TrainOptions& options, bool say) {
  if (options.model != "cnn_bn") {
    throw cohort::InvalidArgument(
        "--activation-checkpointing needs --model cnn_bn: the model '" + options.model +
        "' calls its layers directly from forward(), where libtorch has no hook to redirect "
        "(docs/activation_checkpointing.md); cnn_bn holds them in a Sequential");
  }
  cohort::CheckpointPolicy policy;
  // One region per convolution block (conv, bn, relu; conv, bn, relu, max-pool): one region for
  // the whole stack would be recomputed whole in backward, holding at its peak what it saved.
  policy.spans = {{"layers", 0, 3}, {"layers", 3, 7}};
  cohort_examples::checkpoint_activations(model, policy, say);
}

}  // namespace fashion_mnist
