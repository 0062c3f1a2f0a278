// cohort-ddp-bench: training steps per second of cohort::DistributedDataParallel on
// Fashion-MNIST-shaped data, against a plain libtorch loop (--mode plain) and, through
// bench/compare_ddp.sh, against PyTorch's own DDP (shared/peers/ddp_train.py). It takes
// ddp_train.py's options and runs its loop, and prints its STEP line plus the peak RSS, so
// that the two compare line for line (docs/bench.md).
//
//   cohort-ddp-bench --mode plain --model cnn                          # the baseline
//   cohortrun --no-prefix --nproc-per-node 2 cohort-ddp-bench --mode ddp --model mlp
//
// One process per rank, started by a launcher (cohortrun, torchrun, ...): cohort::init() reads
// where it sits in the job from the launcher's environment. Rank 0 prints the result.

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_stats.h"  // median, peak RSS
#include "cohort/comm/group.h"
#include "cohort/comm/init.h"
#include "cohort/comm/launch_env.h"
#include "cohort/core/error.h"
#include "cohort/torch/ddp.h"
#include "fmnist_models.h"  // models/

namespace {

using bench_stats::Clock;
using fashion_mnist::FmnistModel;

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;  // the run failed (this rank or a peer)
constexpr int kExitUsage = 2;    // bad arguments

struct Config {
  std::string model = "cnn";
  std::string mode = "ddp";
  bool no_sync = false;
  bool private_buckets = false;
  int world = 1;  // from the launcher (cohort::read_launch_env)
  int rank = 0;
  int threads = 1;
  int batch = 64;  // global: each rank trains on batch / world samples per step
  double bucket_mb = 25.0;
  int warmup = 10;
  int steps = 30;
  int windows = 5;
  int64_t seed = 0;
  bool tune_malloc = false;
  bool zero_grads = false;
  double timeout_s = 120;

  bool ddp() const { return mode == "ddp"; }
  cohort::Milliseconds timeout() const {
    return cohort::Milliseconds(static_cast<int64_t>(timeout_s * 1000.0));
  }
};

void add_options(CLI::App& app, Config& c) {
  app.add_option("--model", c.model, "cnn (two convolutions) or mlp (784-1024-1024-10)")
      ->check(CLI::IsMember({"cnn", "mlp"}))
      ->capture_default_str();
  app.add_option("--mode", c.mode,
                 "ddp: cohort::DistributedDataParallel over TCP; plain: one process, no group, "
                 "no DDP (the libtorch baseline)")
      ->check(CLI::IsMember({"ddp", "plain"}))
      ->capture_default_str();
  app.add_flag("--private-buckets", c.private_buckets,
               "ddp: DdpOptions::registered_buckets = false (buckets staged through the "
               "shared-memory window instead of reduced in place)");
  app.add_flag("--no-sync", c.no_sync,
               "ddp: every step inside ddp.no_sync(): the same processes, no gradient "
               "allreduce (isolates compute; the replicas diverge)");
  app.add_option("--threads", c.threads, "torch::set_num_threads for each rank")
      ->capture_default_str();
  app.add_option("--batch", c.batch, "GLOBAL batch; each rank trains on batch/world samples")
      ->capture_default_str();
  app.add_option("--bucket-mb", c.bucket_mb, "DdpOptions::bucket_cap_mb")->capture_default_str();
  app.add_option("--warmup", c.warmup, "untimed steps first")->capture_default_str();
  app.add_option("--steps", c.steps, "steps per timed window")->capture_default_str();
  app.add_option("--windows", c.windows, "timed windows; the median is reported")
      ->capture_default_str();
  app.add_option("--seed", c.seed, "model initialisation, dropout and sampling order")
      ->capture_default_str();
  app.add_flag("--tune-malloc", c.tune_malloc,
               "plain: call cohort::tune_malloc_for_training() as DDP's constructor does "
               "(off by default: the plain loop is the untouched baseline)");
  app.add_flag("--zero-grads", c.zero_grads,
               "zero .grad in place each step instead of setting it to none (ddp_train.py "
               "and the peers' C++ loop set it to none)");
  app.add_option("--timeout", c.timeout_s,
                 "seconds to wait for the store, the other ranks and each collective")
      ->capture_default_str();
  app.footer(
      "Ranks: start them with a launcher (cohortrun --nproc-per-node N, torchrun, ...).\n"
      "Prints on rank 0 one line in ddp_train.py's STEP format plus peak_rss_mb.\n"
      "Exit codes: 0 ok, 1 the run failed, 2 bad arguments. See docs/bench.md.");
}

// Refuses what cannot run, before any rank waits for another.
void validate(const Config& c) {
  auto require = [](bool ok, const std::string& message) {
    if (!ok) throw cohort::InvalidArgument(message);
  };
  require(c.ddp() || (c.world == 1 && !c.no_sync),
          "--mode plain runs one process without DDP: start it without a launcher of several "
          "ranks, and without --no-sync");
  require(c.batch >= c.world && c.batch % c.world == 0,
          "--batch " + std::to_string(c.batch) +
              " is the global batch and must be a multiple "
              "of the world size " +
              std::to_string(c.world));
  require(c.batch <= 60000, "--batch " + std::to_string(c.batch) + " exceeds the 60000 samples");
  require(c.threads >= 1, "--threads must be at least 1");
  require(c.bucket_mb > 0, "--bucket-mb must be positive");
  require(c.warmup >= 0 && c.steps >= 1 && c.windows >= 1,
          "--warmup must be >= 0, --steps and --windows >= 1");
  require(c.timeout_s > 0 && c.timeout_s <= 86400, "--timeout must be in (0, 86400] seconds");
}

// ---- data

constexpr int64_t kSamples = 60000;
constexpr uint64_t kDataSeed = 20261122;

struct Dataset {
  torch::Tensor images;  // kSamples x 1 x 28 x 28, float32
  torch::Tensor labels;  // kSamples, int64 in [0, 10)
};

// Synthetic Fashion-MNIST: normal pixels (the mean and variance of the normalized real set) and
// uniform labels. Speed does not depend on the values: every step runs the same kernels on the
// same shapes whatever the pixels hold, and neither model branches on data. So no data set is
// needed to compare speed with the peers (which read the real one). The seed is fixed, not
// --seed, so every rank and every run holds the same data.
Dataset make_dataset() {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(kDataSeed);
  Dataset d;
  d.images = torch::randn({kSamples, 1, 28, 28}, generator, torch::kFloat32);
  d.labels = torch::randint(10, {kSamples}, generator, torch::kInt64);
  return d;
}

// ddp_train.py's sampling: a seeded permutation per epoch (the same on every rank), cut into
// global batches; rank r takes slice r of each.
class GlobalBatches {
 public:
  explicit GlobalBatches(const Config& c)
      : global_(c.batch),
        local_(c.batch / c.world),
        rank_(c.rank),
        steps_per_epoch_(kSamples / c.batch),
        generator_(at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(c.seed))) {}

  // This rank's sample indices of the next global batch.
  torch::Tensor next() {
    if (!permutation_.defined() || step_ == steps_per_epoch_) {
      permutation_ = torch::randperm(kSamples, generator_, torch::kInt64);
      step_ = 0;
    }
    const int64_t begin = step_ * global_ + rank_ * local_;
    ++step_;
    return permutation_.slice(0, begin, begin + local_);
  }

 private:
  int64_t global_;
  int64_t local_;
  int64_t rank_;
  int64_t steps_per_epoch_;
  at::Generator generator_;
  torch::Tensor permutation_;
  int64_t step_ = 0;
};

// ---- measuring: bench_stats.h

using bench_stats::median;
using bench_stats::peak_rss_kib;

// Which malloc settings this process runs with, for the report: cohort's tuning, the user's
// MALLOC_* environment (which cohort leaves alone), or glibc's defaults.
std::string malloc_setting(bool cohort_tuned) {
  if (cohort_tuned) return "cohort";
  for (const char* name :
       {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "GLIBC_TUNABLES"}) {
    if (std::getenv(name) != nullptr) return "env";
  }
  return "default";
}

// Python's str(float): "25.0", "0.5".
std::string python_float(double value) {
  char text[32];
  if (value == static_cast<double>(static_cast<int64_t>(value))) {
    std::snprintf(text, sizeof text, "%.1f", value);
  } else {
    std::snprintf(text, sizeof text, "%g", value);
  }
  return text;
}

// ---- the run

class Bench {
 public:
  explicit Bench(const Config& c) : config_(c), batches_(c) {}

  // Returns the per-step seconds of each timed window (every rank times its own).
  std::vector<double> run() {
    torch::set_num_threads(config_.threads);
    if (!config_.ddp() && config_.tune_malloc) cohort::tune_malloc_for_training();
    data_ = make_dataset();
    torch::manual_seed(config_.seed);  // the same initial weights on every rank
    model_ = fashion_mnist::make_fmnist_model(config_.model);
    if (config_.ddp()) start_ddp();
    optimizer_ = std::make_unique<torch::optim::SGD>(model_->parameters(),
                                                     torch::optim::SGDOptions(0.01).momentum(0.9));
    for (int i = 0; i < config_.warmup; ++i) step();
    std::vector<double> per_step;
    for (int w = 0; w < config_.windows; ++w) {
      const auto start = Clock::now();
      for (int i = 0; i < config_.steps; ++i) step();
      per_step.push_back(std::chrono::duration<double>(Clock::now() - start).count() /
                         config_.steps);
    }
    return per_step;
  }

  // Every rank's peak RSS in KiB, by rank (only this rank's in plain mode).
  std::vector<int64_t> peak_rss_of_ranks() {
    std::vector<int64_t> mine{peak_rss_kib()};
    if (!group_) return mine;
    std::vector<int64_t> all(static_cast<size_t>(config_.world));
    group_->allgather(cohort::make_buffer(mine), cohort::make_buffer(all));
    return all;
  }

  int64_t parameter_count() const {
    int64_t count = 0;
    for (const auto& p : model_->parameters()) count += p.numel();
    return count;
  }

  bool malloc_tuned_by_cohort() const {
    // Idempotent: after DDP's constructor (or --tune-malloc) it only reports what was done.
    return (config_.ddp() || config_.tune_malloc) && cohort::tune_malloc_for_training();
  }

  // A failing rank breaks the group so that its peers stop now instead of at their deadline.
  void abort(const std::string& reason) noexcept {
    if (group_) group_->abort(reason);
  }

  // Collective: tears down DDP and the group.
  void finish() {
    if (!group_) return;
    ddp_.reset();
    group_->barrier();  // nobody closes its connections while a peer still talks
    group_.reset();
  }

 private:
  void start_ddp() {
    cohort::InitOptions init;
    init.group.timeout = config_.timeout();
    init.backend = cohort::Backend::kNative;  // the peers run over TCP too
    group_ = cohort::init(init);
    cohort::DdpOptions options;
    options.bucket_cap_mb = config_.bucket_mb;
    options.registered_buckets = !config_.private_buckets;
    ddp_ = std::make_unique<cohort::DistributedDataParallel>(
        std::static_pointer_cast<torch::nn::Module>(model_), group_, options);
  }

  // ddp_train.py's step: this rank's slice of the next global batch, forward, nll_loss,
  // backward (which reduces the gradients under DDP), SGD.
  void step() {
    const auto indices = batches_.next();
    const auto images = data_.images.index_select(0, indices);
    const auto labels = data_.labels.index_select(0, indices);
    model_->zero_grad(/*set_to_none=*/!config_.zero_grads);
    {
      std::optional<cohort::DistributedDataParallel::NoSync> no_sync;
      if (config_.no_sync) no_sync.emplace(ddp_->no_sync());
      auto loss = torch::nll_loss(model_->forward(images), labels);
      loss.backward();
    }
    optimizer_->step();
  }

  Config config_;
  GlobalBatches batches_;
  Dataset data_;
  std::shared_ptr<FmnistModel> model_;
  // Declared so that they are destroyed in this order: DDP, group.
  std::shared_ptr<cohort::Group> group_;
  std::unique_ptr<cohort::DistributedDataParallel> ddp_;
  std::unique_ptr<torch::optim::SGD> optimizer_;
};

void report(const Config& c, const Bench& bench, const std::vector<double>& per_step,
            const std::vector<int64_t>& rss_kib) {
  const double med = median(per_step);
  const double fastest = *std::min_element(per_step.begin(), per_step.end());
  const double slowest = *std::max_element(per_step.begin(), per_step.end());
  std::string tag = "model=" + c.model + " mode=" + c.mode + (c.no_sync ? "-nosync" : "") +
                    (c.private_buckets ? "-private" : "") +
                    " world=" + std::to_string(c.world) +
                    " threads/rank=" + std::to_string(c.threads) +
                    " global_batch=" + std::to_string(c.batch) +
                    (c.ddp() ? " bucket_cap_mb=" + python_float(c.bucket_mb) : "") +
                    " params=" + std::to_string(bench.parameter_count());
  std::string ranks;
  for (size_t r = 0; r < rss_kib.size(); ++r) {
    char mb[32];
    std::snprintf(mb, sizeof mb, "%s%.1f", r ? "," : "", rss_kib[r] / 1024.0);
    ranks += mb;
  }
  std::printf(
      "STEP %s ms_per_step_med=%.2f ms_min=%.2f ms_max=%.2f samples_per_s=%.1f windows=%dx%d "
      "peak_rss_mb=%.1f peak_rss_mb_ranks=%s malloc=%s impl=cohort%s\n",
      tag.c_str(), med * 1e3, fastest * 1e3, slowest * 1e3, c.batch / med, c.windows, c.steps,
      rss_kib[0] / 1024.0, ranks.c_str(), malloc_setting(bench.malloc_tuned_by_cohort()).c_str(),
      c.zero_grads ? " zero_grads=1" : "");
  std::fflush(stdout);
}

int run(const Config& c) {
  Bench bench(c);
  try {
    const auto per_step = bench.run();
    const auto rss_kib = bench.peak_rss_of_ranks();
    if (c.rank == 0) report(c, bench, per_step, rss_kib);
    bench.finish();
  } catch (const std::exception& e) {
    bench.abort("cohort-ddp-bench rank " + std::to_string(c.rank) + " failed: " + e.what());
    throw;
  }
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  Config config;
  CLI::App app{"cohort-ddp-bench: cohort DistributedDataParallel against a plain libtorch loop",
               "cohort-ddp-bench"};
  add_options(app, config);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }
  try {
    const cohort::LaunchEnv env = cohort::read_launch_env();
    config.world = env.world_size;
    config.rank = env.rank;
    validate(config);
  } catch (const cohort::Error& e) {
    std::fprintf(stderr, "cohort-ddp-bench: error: %s\nRun with --help for more information.\n",
                 e.what());
    return kExitUsage;
  }
  try {
    return run(config);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cohort-ddp-bench: rank %d: error: %s\n", config.rank, e.what());
    return kExitFailure;
  }
}
