// The command line of the Fashion-MNIST example (docs/fashion_mnist.md).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "auto_plan.h"
#include "cohort/torch/optim/lr_schedule.h"
#include "comm_hooks.h"
#include "diloco_options.h"
#include "local_sgd_options.h"
#include "optimizers.h"

namespace CLI {
class App;  // CLI11's, included only by the files that build the command line
}  // namespace CLI

namespace fashion_mnist {

inline const std::vector<std::string> kLrScheduleNames = {"constant", "cosine", "poly"};
inline const std::vector<std::string> kModeNames = {"sync", "ps", "ssp"};

struct TrainOptions {
  std::string data_dir;       // default: kDefaultDataDir
  std::string model = "cnn";  // cnn, cnn_bn (with BatchNorm) or mlp (models/fmnist_models.h)
  // cnn_bn's BatchNorms replaced by cohort::nn::SyncBatchNorm over the job's group
  // (docs/large_batch.md): statistics of the global batch instead of each rank's slice.
  bool sync_bn = false;
  bool activation_checkpointing = false;  // the conv stack recomputed in backward (cnn_bn)
  std::string strategy = "ddp";           // cohort_examples::kStrategyNames
  std::string precision = "fp32";         // cohort_examples::kPrecisionNames (docs/amp.md)
  bool master_weights = false;            // the model in 16-bit, float32 masters (docs/amp.md)
  // FSDP's units: the submodules of at least this many parameters (the models have no
  // Sequential or ModuleList to take the units from): fc1 of cnn, fc1 and fc2 of mlp.
  static constexpr int64_t kFsdpMinUnitParameters = 500000;
  int64_t epochs = 1;
  int64_t batch_size = 64;  // global: split evenly over the ranks
  // Learning rate at batch kReferenceBatch; scaled linearly with the global batch (Goyal et al.'s
  // rule).
  double base_lr = 0.01;
  static constexpr int64_t kReferenceBatch = 64;
  // "linear": base_lr scaled from kReferenceBatch to batch_size; "none": base_lr as it is.
  std::string lr_scaling = "linear";
  std::string optimizer = "sgd";  // cohort_examples::optimizer_names()
  double momentum = 0.9;
  double weight_decay = 0.0;
  // Linear warm-up from lr / warmup_steps to lr. -1 (auto): none at the reference batch of 64,
  // kAutoWarmupSteps above it, where the scaled learning rate is too large to start with.
  int64_t warmup_steps = -1;
  static constexpr int64_t kAutoWarmupSteps = 200;
  // After the warm-up: the scaled LR throughout, or a cosine or polynomial (power 2) decay to 0
  // at the end of the run (kLrScheduleNames).
  std::string lr_schedule = "constant";
  static constexpr double kPolyPower = 2.0;
  uint64_t seed = 42;
  cohort_examples::PlanSettings plan;  // --bucket-cap-mb, --memory-budget-mb, --plan-out
  // How DDP reduces gradients (--comm-hook and its knobs; docs/compression.md).
  cohort_examples::CommHookSettings comm_hook;
  // Local SGD (docs/compression.md): period > 0: each rank steps on its own and the models are
  // averaged every period steps, after warmup steps of ordinary DDP.
  cohort_examples::LocalSgdSettings local_sgd;
  cohort_examples::DiLoCoSettings diloco;  // --diloco H, --diloco-fragments, --diloco-dtype
  // How the workers agree on the parameters (docs/async.md): "sync" (every step together:
  // --strategy), "ps" (a parameter server, asynchronous) or "ssp" (a parameter server with
  // bounded staleness --staleness; 0 is synchronous). Parameter-server jobs: the last
  // --servers ranks serve, the others train.
  std::string mode = "sync";
  // --elastic: cohort::ElasticTrainer (docs/elastic.md): the job goes on through ranks that die
  // or join (under cohortrun --min-ranks); DDP in float32, the global batch kept.
  bool elastic = false;
  int staleness = 0;
  int servers = 1;
  int backup_workers = 0;  // ssp with --staleness 0: a step goes on without the last b
  bool staleness_lr_scaling = false;
  bool hybrid = false;  // the workers of a node allreduce, one of them pushes
  // > 0: training stops after this many seconds (benchmarks at a fixed time), on every rank
  // at the same step under sync.
  double time_limit_s = 0;
  std::string checkpoint = "fashion_mnist.ckpt";  // written after each epoch; "" for none
  int64_t checkpoint_every = 0;                   // --checkpoint-every: also every N steps
  bool resume = false;
  bool overwrite_checkpoint = false;  // --overwrite-checkpoint
  bool sync_checkpoint = false;       // --sync-checkpoint: not in the background
  std::string metrics;                // per-step figures: .csv, else JSON lines
  std::string sample_log;             // --elastic: each member's committed samples (a directory)
  int64_t max_steps = -1;  // stop after this many steps in all (tests, sweeps); -1: no limit
  bool skip_eval = false;
  int threads = 0;  // torch threads per rank; 0: cores / ranks on this machine
  bool progress = true;
  int64_t log_every = 100;  // steps between progress lines when stdout is not a terminal

  // --lr scaled linearly from batch 64 to --batch-size (cohort::optim::linear_scaled_lr).
  double scaled_lr() const;
  // The --optimizer's settings (scaled LR, momentum, weight decay) over `module`'s parameters.
  cohort_examples::OptimizerSettings optimizer_settings(torch::nn::Module* module) const;
  int64_t warmup() const;
  // The library scheduler's options for a run of `planned_steps` optimizer steps.
  cohort::optim::LrScheduleOptions lr_schedule_options(int64_t planned_steps) const;
};

void add_train_options(CLI::App& app, TrainOptions& options);

// --activation-checkpointing: the conv stack of the cnn_bn model's Sequential as two
// checkpointed regions, one per convolution block; `say`: print them. Throws InvalidArgument
// for the other models, whose forward() calls their layers directly.
void checkpoint_conv_stack(torch::nn::Module& model, const TrainOptions& options, bool say);

}  // namespace fashion_mnist
