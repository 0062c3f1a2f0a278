// The command line of the char_lm example (docs/char_lm.md).
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <string>

#include "auto_plan.h"
#include "cohort/torch/optim/lr_schedule.h"
#include "comm_hooks.h"
#include "diloco_options.h"
#include "gpt.h"
#include "local_sgd_options.h"

namespace CLI {
class App;  // CLI11's, included only by the files that build the command line
}  // namespace CLI

namespace char_lm {

struct TrainOptions {
  std::string data_dir;  // default: kDefaultFortuneDir
  std::string strategy = "ddp";
  std::string precision = "fp32";          // cohort_examples::kPrecisionNames (docs/amp.md)
  bool master_weights = false;             // the model in 16-bit, float32 masters (docs/amp.md)
  bool activation_checkpointing = false;   // every block recomputed in backward
  cohort_examples::DiLoCoSettings diloco;  // --diloco H, --diloco-fragments, --diloco-dtype
  cohort_examples::LocalSgdSettings local_sgd;  // --local-sgd H, --local-sgd-warmup K
  cohort_examples::CommHookSettings comm_hook;  // --comm-hook (docs/compression.md)
  // The model (the vocabulary size comes from the text).
  int64_t context = 64;
  int64_t layers = 4;
  int64_t heads = 4;
  int64_t width = 128;
  double dropout = 0.1;
  // Training.
  int64_t epochs = 1;
  int64_t batch_size = 64;    // windows in the global batch, split evenly over the ranks
  double lr = 1e-3;           // AdamW's peak learning rate
  double min_lr_ratio = 0.1;  // the cosine decay ends at lr * this
  int64_t warmup_steps = 100;
  double weight_decay = 0.1;  // on weight matrices and embeddings, not on biases or norms
  double clip = 1.0;          // gradient 2-norm limit; 0: no clipping
  uint64_t seed = 42;
  cohort_examples::PlanSettings plan;       // --bucket-cap-mb, --memory-budget-mb, --plan-out
  std::string checkpoint = "char_lm.ckpt";  // written after each epoch; "" for none
  int64_t checkpoint_every = 0;             // --checkpoint-every: also every N steps
  bool resume = false;
  bool overwrite_checkpoint = false;  // --overwrite-checkpoint
  bool sync_checkpoint = false;       // --sync-checkpoint: not in the background
  std::string metrics;                // per-step figures: .csv, else JSON lines
  std::string sample_log;             // --elastic: each member's committed samples (a directory)
  int64_t max_steps = -1;             // stop after this many steps in all; -1: no limit
  bool skip_eval = false;
  int64_t sample = 300;  // characters generated at the end; 0: none
  int threads = 0;       // torch threads per rank; 0: cores / ranks on this machine
  bool progress = true;
  int64_t log_every = 100;
  // --elastic: cohort::ElasticTrainer (docs/elastic.md): the job goes on through ranks that die
  // or join (under cohortrun --min-ranks); DDP in float32, the global batch kept.
  bool elastic = false;

  GptConfig model_config(int64_t vocab) const;
  // The library scheduler's options: linear warm-up over warmup_steps, then a cosine decay to
  // lr * min_lr_ratio at the end of a run of `planned_steps` steps.
  cohort::optim::LrScheduleOptions lr_schedule_options(int64_t planned_steps) const;
};

void add_train_options(CLI::App& app, TrainOptions& options);

// --activation-checkpointing: every transformer block (the children of the model's `blocks`
// Sequential) a checkpointed region; `say`: print them.
void checkpoint_blocks(torch::nn::Module& model, bool say);

}  // namespace char_lm
