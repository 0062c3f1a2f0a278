#include "train_options.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>

#include "activation_checkpointing.h"
#include "checkpointing.h"
#include "fortune_files.h"
#include "precision.h"
#include "strategy.h"

namespace char_lm {

GptConfig TrainOptions::model_config(int64_t vocab) const {
  GptConfig c;
  c.vocab = vocab;
  c.context = context;
  c.layers = layers;
  c.heads = heads;
  c.width = width;
  c.dropout = dropout;
  return c;
}

cohort::optim::LrScheduleOptions TrainOptions::lr_schedule_options(int64_t planned_steps) const {
  cohort::optim::LrScheduleOptions o;
  o.warmup_steps = warmup_steps;
  o.decay = cohort::optim::LrDecay::kCosine;
  o.end_factor = min_lr_ratio;
  // A run shorter than its warm-up never reaches the decay: its total is the warm-up's end.
  o.total_steps = std::max({planned_steps, warmup_steps, int64_t{1}});
  return o;
}

namespace {

void add_model_options(CLI::App& app, TrainOptions& o) {
  app.add_option("--context", o.context, "Characters the model sees (window length)")
      ->check(CLI::PositiveNumber);
  app.add_option("--layers", o.layers, "Transformer blocks")->check(CLI::PositiveNumber);
  app.add_option("--heads", o.heads, "Attention heads (must divide --width)")
      ->check(CLI::PositiveNumber);
  app.add_option("--width", o.width, "Embedding width")->check(CLI::PositiveNumber);
  app.add_option("--dropout", o.dropout, "Dropout probability")->check(CLI::Range(0.0, 0.99));
  app.add_flag("--activation-checkpointing", o.activation_checkpointing,
               "Recompute every block's activations in backward instead of keeping them "
               "(cohort::checkpoint_modules)");
}

void add_optimizer_options(CLI::App& app, TrainOptions& o) {
  app.add_option("--epochs", o.epochs, "Passes over the training text")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", o.batch_size, "Windows in the global batch, split over the ranks")
      ->check(CLI::PositiveNumber);
  app.add_option("--lr", o.lr, "AdamW's peak learning rate")->check(CLI::PositiveNumber);
  app.add_option("--min-lr-ratio", o.min_lr_ratio, "Where the cosine decay ends, as a part of --lr")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--warmup-steps", o.warmup_steps, "Steps of linear learning-rate warm-up")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--weight-decay", o.weight_decay,
                 "AdamW's weight decay (of matrices and embeddings)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--clip", o.clip, "Gradient 2-norm limit (0: no clipping)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", o.seed, "Seed of the weights, the shuffle, dropout and the sample");
}

void add_run_options(CLI::App& app, TrainOptions& o) {
  cohort_examples::add_comm_hook_options(app, o.comm_hook);
  cohort_examples::add_local_sgd_options(app, o.local_sgd);
  cohort_examples::add_diloco_options(app, o.diloco);
  cohort_examples::add_plan_options(app, o.plan);
  cohort_examples::add_checkpoint_flags(app, o.checkpoint, o.checkpoint_every, o.resume,
                                        o.overwrite_checkpoint, o.sync_checkpoint);
  app.add_option("--metrics", o.metrics, "Write every step's figures here (.csv or JSON lines)");
  app.add_option("--max-steps", o.max_steps, "Stop after this many steps in all")
      ->check(CLI::PositiveNumber);
  app.add_flag("--skip-eval", o.skip_eval, "Do not compute the validation loss");
  cohort_examples::add_elastic_flags(app, o.elastic, o.sample_log);
  app.add_option("--sample", o.sample, "Characters of text to generate at the end (0: none)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--threads", o.threads, "torch threads per rank (0: cores / local ranks)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("!--no-progress", o.progress, "No progress bar or lines");
  app.add_option("--log-every", o.log_every, "Steps between progress lines (no terminal)")
      ->check(CLI::PositiveNumber);
}

}  // namespace

void add_train_options(CLI::App& app, TrainOptions& o) {
  o.data_dir = kDefaultFortuneDir;
  app.add_option("--data", o.data_dir, "Directory of fortune files")->capture_default_str();
  app.add_option("--strategy", o.strategy, cohort_examples::strategy_help())
      ->check(CLI::IsMember(cohort_examples::strategy_choices()))
      ->capture_default_str();
  cohort_examples::add_precision_options(app, o.precision, o.master_weights);
  add_model_options(app, o);
  add_optimizer_options(app, o);
  add_run_options(app, o);
}

void checkpoint_blocks(torch::nn::Module& model, bool say) {
  cohort::CheckpointPolicy policy;
  policy.sequential_children = true;  // the model's one Sequential holds the blocks
  cohort_examples::checkpoint_activations(model, policy, say);
}

}  // namespace char_lm
