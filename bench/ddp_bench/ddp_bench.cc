// cohort-ddp-bench: training steps per second of cohort::DistributedDataParallel on
// Fashion-MNIST-shaped data (or char_lm's GPT on random tokens), against a plain libtorch loop
// (--mode plain) and, through bench/compare_ddp.sh (CPU) and bench/gpu/run.sh (CUDA), against
// PyTorch's own DDP (shared/peers/ddp_train.py, bench/gpu/torch_ddp_cuda.py). It takes
// ddp_train.py's options and runs its loop, and prints its STEP line plus the peak RSS (and, on
// CUDA, the peak GPU memory), so that the programs compare line for line (docs/bench.md).
// --mode fsdp runs the same loop under cohort::FullyShardedDataParallel (FULL_SHARD, one unit
// per GPT block, optionally --cpu-offload), the twin of torch_ddp_cuda.py --mode fsdp.
//
//   cohort-ddp-bench --mode plain --model cnn                          # the baseline
//   cohortrun --no-prefix --nproc-per-node 2 cohort-ddp-bench --mode ddp --model mlp
//   torchrun --standalone --nproc-per-node 1 --no-python cohort-ddp-bench --device cuda
//            --group nccl --model gpt
//   torchrun --standalone --nproc-per-node 1 --no-python cohort-ddp-bench --device cuda
//            --group nccl --model gpt --gpt-size large --batch 16 --mode fsdp --cpu-offload
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
#include "cohort/torch/ddp/ddp.h"
#include "cohort/torch/shard/fsdp.h"
#include "fmnist_models.h"  // models/
#include "gpt.h"            // models/
#include "launched_main.h"  // main()

// Each set by bench/CMakeLists.txt where the build has it: libtorch's CUDA allocator (peak GPU
// memory; a libtorch without CUDA, such as Debian's 1.13, has no c10_cuda), and cohort's two
// groups that take device buffers.
#ifdef COHORT_BENCH_TORCH_HAS_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif
#ifdef COHORT_BENCH_WITH_NCCL
#include "cohort/comm/nccl.h"
#endif
#ifdef COHORT_BENCH_WITH_CUDA_STAGING
#include "cohort/comm/cuda_staging.h"
#endif

namespace {

using bench_stats::Clock;
using fashion_mnist::FmnistModel;

using launched_main::kExitFailure;
using launched_main::kExitOk;
using launched_main::kExitUsage;

// --gpt-size large: width 768, 8 blocks of 12 heads, context 128, byte vocabulary: 57,196,032
// parameters, 218 MiB of float32; with their gradients and AdamW's two moments about 0.85 GiB of
// model state, which DDP keeps on the GPU and FSDP's CPU offload in host memory. Large enough for
// that difference to show beside the activations of a small batch (bench/gpu/run.sh: 16), small
// enough for offload's CPU AdamW to step it in a fraction of a second on 16 cores.
constexpr char_lm::GptConfig kLargeGpt{256, 128, 8, 12, 768, 0.1};

struct Config {
  std::string model = "cnn";
  std::string mode = "ddp";
  std::string device = "cpu";
  std::string group = "host";
  bool no_sync = false;
  bool private_buckets = false;
  bool cpu_offload = false;  // --mode fsdp on CUDA: FsdpOptions::cpu_offload
  int world = 1;             // from the launcher (cohort::read_launch_env)
  int rank = 0;
  int local_rank = 0;
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
  // --model gpt: examples/char_lm's defaults (train_options.h), a byte vocabulary; or
  // --gpt-size large (kLargeGpt), each size overridden by --context, --layers, ... when given.
  std::string gpt_size = "small";
  char_lm::GptConfig gpt{256, 64, 4, 4, 128, 0.1};
  double clip = 1.0;  // char_lm's gradient-norm limit; 0: no clipping

  bool ddp() const { return mode == "ddp"; }
  bool fsdp() const { return mode == "fsdp"; }
  bool distributed() const { return mode != "plain"; }  // over a group: ddp or fsdp
  bool cuda() const { return device == "cuda"; }
  bool gpt_model() const { return model == "gpt"; }
  cohort::Milliseconds timeout() const {
    return cohort::Milliseconds(static_cast<int64_t>(timeout_s * 1000.0));
  }
};

void add_model_options(CLI::App& app, Config& c) {
  app.add_option("--model", c.model,
                 "cnn (two convolutions), mlp (784-1024-1024-10) or gpt (examples/char_lm's "
                 "GPT on random byte tokens, AdamW and gradient clipping as char_lm)")
      ->check(CLI::IsMember({"cnn", "mlp", "gpt"}))
      ->capture_default_str();
  app.add_option("--gpt-size", c.gpt_size,
                 "gpt: small (examples/char_lm's defaults: context 64, 4 layers, 4 heads, width "
                 "128; 0.87 M parameters) or large (context 128, 8 layers, 12 heads, width 768; "
                 "57.2 M parameters). --context, --layers, --heads, --width override either")
      ->check(CLI::IsMember({"small", "large"}))
      ->capture_default_str();
  app.add_option("--context", c.gpt.context, "gpt: tokens per sequence")->capture_default_str();
  app.add_option("--layers", c.gpt.layers, "gpt: transformer blocks")->capture_default_str();
  app.add_option("--heads", c.gpt.heads, "gpt: attention heads")->capture_default_str();
  app.add_option("--width", c.gpt.width, "gpt: embedding width")->capture_default_str();
  app.add_option("--clip", c.clip, "gpt: gradient 2-norm limit before AdamW; 0: none")
      ->capture_default_str();
}

// --gpt-size large: kLargeGpt's sizes where no option gave its own (after parsing).
void apply_gpt_size(const CLI::App& app, Config& c) {
  if (c.gpt_size != "large") return;
  if (app.count("--context") == 0) c.gpt.context = kLargeGpt.context;
  if (app.count("--layers") == 0) c.gpt.layers = kLargeGpt.layers;
  if (app.count("--heads") == 0) c.gpt.heads = kLargeGpt.heads;
  if (app.count("--width") == 0) c.gpt.width = kLargeGpt.width;
}

void add_device_options(CLI::App& app, Config& c) {
  app.add_option("--device", c.device,
                 "cpu, or cuda: model and data on cuda:<local rank mod device count>")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--group", c.group,
                 "ddp, fsdp: the group that reduces the gradients. host: cohort::init()'s (shared "
                 "memory, TCP; host memory only); nccl: the NCCL backend; staged: CUDA buffers "
                 "staged through pinned memory over the host group. nccl and staged need "
                 "--device cuda")
      ->check(CLI::IsMember({"host", "nccl", "staged"}))
      ->capture_default_str();
}

void add_options(CLI::App& app, Config& c) {
  add_model_options(app, c);
  app.add_option("--mode", c.mode,
                 "ddp: cohort::DistributedDataParallel; fsdp: cohort::FullyShardedDataParallel, "
                 "FULL_SHARD, its default units (gpt: one per transformer block, the rest in "
                 "the root unit); plain: one process, no group, no DDP (the libtorch baseline)")
      ->check(CLI::IsMember({"ddp", "fsdp", "plain"}))
      ->capture_default_str();
  add_device_options(app, c);
  app.add_flag("--cpu-offload", c.cpu_offload,
               "fsdp with --device cuda: FsdpOptions::cpu_offload (shards, their gradients and "
               "AdamW's state in page-locked host memory, the optimizer stepping on the CPU: "
               "give --threads)");
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
      "Prints on rank 0 one line in ddp_train.py's STEP format plus peak_rss_mb (and, with\n"
      "--device cuda, peak_gpu_mb; with --mode fsdp, strategy, units and cpu_offload).\n"
      "Exit codes: 0 ok, 1 the run failed, 2 bad arguments. See docs/bench.md.");
}

void require(bool ok, const std::string& message) {
  if (!ok) throw cohort::InvalidArgument(message);
}

// Whether this build has the group --group names (bench/CMakeLists.txt).
bool group_built(const std::string& group) {
#ifdef COHORT_BENCH_WITH_NCCL
  if (group == "nccl") return true;
#endif
#ifdef COHORT_BENCH_WITH_CUDA_STAGING
  if (group == "staged") return true;
#endif
  return group == "host";
}

// The checks of --device and --group: a device group needs CUDA, and a CUDA model at more than
// one rank needs a device group (cohort's own algorithms refuse device buffers).
void validate_device(const Config& c) {
  require(c.group == "host" || c.cuda(), "--group " + c.group + " needs --device cuda");
  require(c.group == "host" || c.distributed(),
          "--mode plain runs without a group: leave --group at host");
  require(group_built(c.group), "--group " + c.group +
                                    ": this cohort-ddp-bench was built without it (cohort "
                                    "built without CUDA or NCCL)");
  require(!c.cuda() || torch::cuda::is_available(),
          "--device cuda: this libtorch has no CUDA or sees no CUDA device "
          "(torch::cuda::is_available() is false)");
  require(!c.cuda() || !c.distributed() || c.world == 1 || c.group != "host",
          "--device cuda with " + std::to_string(c.world) +
              " ranks: the host group reduces host memory only; use --group nccl or staged");
}

// The flags that belong to one mode.
void validate_mode(const Config& c) {
  require(c.distributed() || (c.world == 1 && !c.no_sync),
          "--mode plain runs one process without DDP: start it without a launcher of several "
          "ranks, and without --no-sync");
  require(c.ddp() || (!c.no_sync && !c.private_buckets),
          "--no-sync and --private-buckets are DistributedDataParallel's: give them with --mode "
          "ddp only");
  require(!c.cpu_offload || c.fsdp(),
          "--cpu-offload is FullyShardedDataParallel's (FsdpOptions::cpu_offload): give it with "
          "--mode fsdp");
  require(!c.cpu_offload || c.cuda(),
          "--cpu-offload moves a CUDA model's shards, gradients and optimizer state to host "
          "memory: it needs --device cuda (a model on the CPU has nothing to offload)");
  require(c.gpt_size == "small" || c.gpt_model(), "--gpt-size is for --model gpt");
}

// Refuses what cannot run, before any rank waits for another.
void validate(const Config& c) {
  validate_mode(c);
  require(c.batch >= c.world && c.batch % c.world == 0,
          "--batch " + std::to_string(c.batch) +
              " is the global batch and must be a multiple "
              "of the world size " +
              std::to_string(c.world));
  require(c.gpt_model() || c.batch <= 60000,
          "--batch " + std::to_string(c.batch) + " exceeds the 60000 samples");
  require(c.threads >= 1, "--threads must be at least 1");
  require(c.bucket_mb > 0, "--bucket-mb must be positive");
  require(c.warmup >= 0 && c.steps >= 1 && c.windows >= 1,
          "--warmup must be >= 0, --steps and --windows >= 1");
  require(c.timeout_s > 0 && c.timeout_s <= 86400, "--timeout must be in (0, 86400] seconds");
  require(c.gpt.context >= 1 && c.gpt.layers >= 1 && c.gpt.heads >= 1 && c.gpt.width >= 1 &&
              c.gpt.width % c.gpt.heads == 0 && c.clip >= 0,
          "--context, --layers, --heads must be >= 1, --width a multiple of --heads, --clip "
          ">= 0");
  validate_device(c);
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
// --seed, so every rank and every run holds the same data. Made on the CPU (the same values on
// every device), then kept where the model is, as a loader with the set in GPU memory would.
Dataset make_dataset(const torch::Device& device) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(kDataSeed);
  Dataset d;
  d.images = torch::randn({kSamples, 1, 28, 28}, generator, torch::kFloat32).to(device);
  d.labels = torch::randint(10, {kSamples}, generator, torch::kInt64).to(device);
  return d;
}

// ddp_train.py's sampling: a seeded permutation per epoch (the same on every rank), cut into
// global batches; rank r takes slice r of each. The permutation is copied to the device once
// per epoch: a copy per step would wait for the device every step (torch's blocking copy).
class GlobalBatches {
 public:
  GlobalBatches(const Config& c, torch::Device device)
      : global_(c.batch),
        local_(c.batch / c.world),
        rank_(c.rank),
        steps_per_epoch_(kSamples / c.batch),
        device_(device),
        generator_(at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(c.seed))) {}

  // This rank's sample indices of the next global batch.
  torch::Tensor next() {
    if (!permutation_.defined() || step_ == steps_per_epoch_) {
      permutation_ = torch::randperm(kSamples, generator_, torch::kInt64).to(device_);
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
  torch::Device device_;
  at::Generator generator_;
  torch::Tensor permutation_;
  int64_t step_ = 0;
};

// ---- what a step trains

// A model with its data and its optimizer: the training loop (Bench) runs any of them, with or
// without DDP or FSDP.
class Workload {
 public:
  virtual ~Workload() = default;
  virtual std::shared_ptr<torch::nn::Module> module() const = 0;
  // Forward of this rank's next batch, and its loss.
  virtual torch::Tensor next_loss() = 0;
  // Over the model's parameters, or over FSDP's shards of them.
  virtual std::unique_ptr<torch::optim::Optimizer> make_optimizer(
      std::vector<torch::Tensor> parameters) const = 0;
  // The gradients' 2-norm limit between backward (which reduced the gradients) and the
  // optimizer's step; 0: no clipping.
  virtual double clip() const { return 0; }
  // Tag fields of the report beyond the model's name ("" for none).
  virtual std::string description() const { return ""; }
};

// ddp_train.py's: nll_loss of the CNN or MLP, SGD with momentum.
class FmnistWorkload : public Workload {
 public:
  FmnistWorkload(const Config& c, torch::Device device)
      : data_(make_dataset(device)),
        batches_(c, device),
        model_(fashion_mnist::make_fmnist_model(c.model)) {
    model_->to(device);
  }

  std::shared_ptr<torch::nn::Module> module() const override { return model_; }

  torch::Tensor next_loss() override {
    const auto indices = batches_.next();
    const auto images = data_.images.index_select(0, indices);
    const auto labels = data_.labels.index_select(0, indices);
    return torch::nll_loss(model_->forward(images), labels);
  }

  std::unique_ptr<torch::optim::Optimizer> make_optimizer(
      std::vector<torch::Tensor> parameters) const override {
    return std::make_unique<torch::optim::SGD>(std::move(parameters),
                                               torch::optim::SGDOptions(0.01).momentum(0.9));
  }

 private:
  Dataset data_;
  GlobalBatches batches_;
  std::shared_ptr<FmnistModel> model_;
};

// examples/char_lm's step on random byte tokens: next-token cross-entropy, gradient clipping,
// AdamW with char_lm's betas and weight decay (on every parameter: which ones decay does not
// change the work). Speed does not depend on the tokens, so a few fixed batches are cycled.
class GptWorkload : public Workload {
 public:
  GptWorkload(const Config& c, torch::Device device)
      : config_(c.gpt), clip_(c.clip), model_(c.gpt) {
    model_->to(device);
    auto generator =
        at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(c.seed * 1000 + c.rank + 1));
    const int64_t local = c.batch / c.world;
    for (int i = 0; i < 4; ++i) {
      batches_.push_back(
          torch::randint(config_.vocab, {local, config_.context + 1}, generator).to(device));
    }
  }

  std::shared_ptr<torch::nn::Module> module() const override { return model_.ptr(); }

  torch::Tensor next_loss() override {
    const auto& tokens = batches_[step_++ % batches_.size()];
    const auto logits = model_->forward(tokens.narrow(1, 0, config_.context));
    return torch::nn::functional::cross_entropy(logits.reshape({-1, config_.vocab}),
                                                tokens.narrow(1, 1, config_.context).reshape({-1}));
  }

  std::unique_ptr<torch::optim::Optimizer> make_optimizer(
      std::vector<torch::Tensor> parameters) const override {
    const auto options = torch::optim::AdamWOptions(1e-3).betas({0.9, 0.95}).weight_decay(0.1);
    return std::make_unique<torch::optim::AdamW>(std::move(parameters), options);
  }

  double clip() const override { return clip_; }  // as char_lm

  std::string description() const override {
    return " context=" + std::to_string(config_.context) +
           " layers=" + std::to_string(config_.layers) + " heads=" + std::to_string(config_.heads) +
           " width=" + std::to_string(config_.width) + " vocab=" + std::to_string(config_.vocab);
  }

 private:
  char_lm::GptConfig config_;
  double clip_;
  char_lm::Gpt model_;
  std::vector<torch::Tensor> batches_;
  size_t step_ = 0;
};

std::unique_ptr<Workload> make_workload(const Config& c, torch::Device device) {
  if (c.gpt_model()) return std::make_unique<GptWorkload>(c, device);
  return std::make_unique<FmnistWorkload>(c, device);
}

// ---- measuring: bench_stats.h, and the device's side

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

// cuda:<local rank mod device count> (ranks share a GPU when there are more of them than GPUs),
// made torch's current device so that its kernels, streams and handles are there; or the CPU.
torch::Device select_device(const Config& c) {
  if (!c.cuda()) return torch::kCPU;
  const int count = static_cast<int>(torch::cuda::device_count());
  const auto index = static_cast<c10::DeviceIndex>(c.local_rank % count);
#ifdef COHORT_BENCH_TORCH_HAS_CUDA
  c10::cuda::set_device(index);
#endif
  return torch::Device(torch::kCUDA, index);
}

// Waits until the device has run what was queued, so that the clock read next counts it (CUDA
// kernels run after the calls that queue them return).
void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

// The most bytes of tensors that libtorch's CUDA caching allocator held at once since the last
// reset_peak_gpu_memory (torch.cuda.max_memory_allocated): not what it caches beyond that, nor
// NCCL's buffers or cohort's pinned staging memory, which do not come from it. -1 where this
// build cannot read it (a libtorch without c10_cuda) or on the CPU.
int64_t peak_gpu_bytes(const torch::Device& device) {
#ifdef COHORT_BENCH_TORCH_HAS_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    return stats.allocated_bytes[0].peak;  // [0]: StatType::AGGREGATE, small and large pools
  }
#endif
  return -1;
}

void reset_peak_gpu_memory(const torch::Device& device) {
#ifdef COHORT_BENCH_TORCH_HAS_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
#endif
}

// The group DDP or FSDP communicates over: the host group itself, or a group for device buffers
// built on it (validate() refused a --group this build lacks).
std::shared_ptr<cohort::Group> make_train_group(const Config& c,
                                                const std::shared_ptr<cohort::Group>& host,
                                                const torch::Device& device) {
#ifdef COHORT_BENCH_WITH_NCCL
  if (c.group == "nccl") {
    cohort::NcclOptions options;
    options.device = device.index();
    return cohort::create_nccl_group(host, options);
  }
#endif
#ifdef COHORT_BENCH_WITH_CUDA_STAGING
  if (c.group == "staged") {
    cohort::CudaStagingOptions options;
    options.device = device.index();
    return cohort::create_cuda_staged_group(host, options);
  }
#endif
  if (c.group != "host") throw cohort::InvalidArgument("--group " + c.group + " is not built");
  return host;
}

// ---- the run

class Bench {
 public:
  explicit Bench(const Config& c) : config_(c) {}

  // Returns the per-step seconds of each timed window (every rank times its own).
  std::vector<double> run() {
    torch::set_num_threads(config_.threads);
    if (!config_.distributed() && config_.tune_malloc) cohort::tune_malloc_for_training();
    device_ = select_device(config_);
    torch::manual_seed(config_.seed);  // the same initial weights on every rank
    workload_ = make_workload(config_, device_);
    parameter_count_ = char_lm::count_parameters(*workload_->module());  // before FSDP cuts them
    if (config_.distributed()) start_group();
    optimizer_ = workload_->make_optimizer(fsdp_ ? shards_ : workload_->module()->parameters());
    for (int i = 0; i < config_.warmup; ++i) step();
    synchronize(device_);
    reset_peak_gpu_memory(device_);  // the peak of the timed steps, not of set-up
    return bench_stats::timed_windows(
        config_.windows, config_.steps, [this] { step(); }, [this] { synchronize(device_); });
  }

  // Every rank's peak RSS in KiB, by rank (only this rank's in plain mode). Collective.
  std::vector<int64_t> peak_rss_of_ranks() { return gather(peak_rss_kib()); }
  // The same of peak_gpu_bytes(). Collective.
  std::vector<int64_t> peak_gpu_of_ranks() { return gather(peak_gpu_bytes(device_)); }

  // Of the whole model (every rank's, under FSDP too).
  int64_t parameter_count() const { return parameter_count_; }

  std::string description() const { return workload_->description(); }
  // " strategy=FULL_SHARD units=9 cpu_offload=1" under FSDP (units: the root included), else "".
  std::string sharding_description() const {
    if (!fsdp_) return "";
    return std::string(" strategy=") + cohort::sharding_strategy_name(fsdp_->strategy()) +
           " units=" + std::to_string(fsdp_->unit_names().size()) +
           " cpu_offload=" + (config_.cpu_offload ? "1" : "0");
  }
  std::string device_name() const { return device_.str(); }

  bool malloc_tuned_by_cohort() const {
    // Idempotent: after DDP's or FSDP's constructor (or --tune-malloc) it only reports what was
    // done.
    return (config_.distributed() || config_.tune_malloc) && cohort::tune_malloc_for_training();
  }

  // A failing rank breaks the groups so that its peers stop now instead of at their deadline.
  void abort(const std::string& reason) noexcept {
    if (group_) group_->abort(reason);
    if (host_) host_->abort(reason);
  }

  // Collective: tears down DDP or FSDP (whose destructor gathers the parameters back) and the
  // groups.
  void finish() {
    if (!host_) return;
    ddp_.reset();
    shards_.clear();
    fsdp_.reset();
    host_->barrier();  // nobody closes its connections while a peer still talks
    group_.reset();
    host_.reset();
  }

 private:
  // cohort::init() (at world 1 without a launcher: a group of this process alone), the group
  // --group names, and DDP or FSDP over it.
  void start_group() {
    cohort::InitOptions init;
    init.group.timeout = config_.timeout();
    init.backend = cohort::Backend::kNative;  // the peers run over TCP too
    host_ = cohort::init(init);
    group_ = make_train_group(config_, host_, device_);
    if (config_.fsdp()) {
      start_fsdp();
      return;
    }
    cohort::DdpOptions options;
    options.bucket_cap_mb = config_.bucket_mb;
    options.registered_buckets = !config_.private_buckets;
    ddp_ = std::make_unique<cohort::DistributedDataParallel>(workload_->module(), group_, options);
  }

  // FULL_SHARD with FsdpOptions' default auto-wrap, as examples/char_lm's --strategy full_shard:
  // each child of a Sequential or ModuleList is a unit (the GPT's blocks), the rest (embeddings,
  // final norm, head) the root unit. The optimizer steps this rank's shards.
  void start_fsdp() {
    cohort::FsdpOptions options;
    options.strategy = cohort::ShardingStrategy::kFullShard;
    options.cpu_offload = config_.cpu_offload;
    fsdp_ =
        std::make_unique<cohort::FullyShardedDataParallel>(workload_->module(), group_, options);
    shards_ = fsdp_->parameters();
  }

  // ddp_train.py's step: this rank's slice of the next global batch, forward, loss, backward
  // (which reduces the gradients under DDP and FSDP), clipping, the optimizer.
  void step() {
    zero_grad();
    {
      std::optional<cohort::DistributedDataParallel::NoSync> no_sync;
      if (config_.no_sync) no_sync.emplace(ddp_->no_sync());
      auto loss = workload_->next_loss();
      loss.backward();
    }
    clip_gradients();
    if (fsdp_) {
      fsdp_->step(*optimizer_);
    } else {
      optimizer_->step();
    }
  }

  // Sets the gradients to none (or, with --zero-grads, zeroes them in place): the parameters',
  // or under FSDP the shards' (the parameters' own stay undefined there).
  void zero_grad() {
    const bool set_to_none = !config_.zero_grads;
    if (!fsdp_) {
      workload_->module()->zero_grad(set_to_none);
      return;
    }
    for (torch::Tensor shard : shards_) {  // a handle: its .grad is the shard's own
      torch::Tensor& grad = shard.mutable_grad();
      if (!grad.defined()) continue;
      if (set_to_none) {
        grad.reset();
      } else {
        grad.detach_();
        grad.zero_();
      }
    }
  }

  // libtorch's clip_grad_norm_ returns the norm as a double, so on CUDA it waits for the device
  // every step, and so does cohort::clip_grad_norm (the norm of the shards, reduced over the
  // group); bench/gpu/torch_ddp_cuda.py reads its norm too, to run the same loop.
  void clip_gradients() {
    const double limit = workload_->clip();
    if (limit <= 0) return;
    if (fsdp_) {
      cohort::clip_grad_norm(*fsdp_, limit);
    } else {
      torch::nn::utils::clip_grad_norm_(workload_->module()->parameters(), limit);
    }
  }

  // Every rank's `mine`, by rank, over the host group (only this rank's in plain mode).
  std::vector<int64_t> gather(int64_t mine) {
    std::vector<int64_t> value{mine};
    if (!host_) return value;
    std::vector<int64_t> all(static_cast<size_t>(config_.world));
    host_->allgather(cohort::make_buffer(value), cohort::make_buffer(all));
    return all;
  }

  Config config_;
  torch::Device device_{torch::kCPU};
  std::unique_ptr<Workload> workload_;
  int64_t parameter_count_ = 0;
  // Declared so that they are destroyed in this order: the optimizer, FSDP's shards, FSDP or
  // DDP, their group, the host group.
  std::shared_ptr<cohort::Group> host_;   // cohort::init()'s
  std::shared_ptr<cohort::Group> group_;  // DDP's or FSDP's: host_, or an NCCL or staged group
  std::unique_ptr<cohort::DistributedDataParallel> ddp_;
  std::unique_ptr<cohort::FullyShardedDataParallel> fsdp_;
  std::vector<torch::Tensor> shards_;  // fsdp_->parameters(): what the optimizer steps
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

// "1.0,2.5": each value / unit, 1 decimal; "na" for values that could not be read (< 0).
std::string megabytes(const std::vector<int64_t>& values, double unit) {
  std::string text;
  for (size_t i = 0; i < values.size(); ++i) {
    char mb[32];
    if (values[i] < 0) {
      std::snprintf(mb, sizeof mb, "%sna", i ? "," : "");
    } else {
      std::snprintf(mb, sizeof mb, "%s%.1f", i ? "," : "", values[i] / unit);
    }
    text += mb;
  }
  return text;
}

struct Memory {
  std::vector<int64_t> rss_kib;    // by rank
  std::vector<int64_t> gpu_bytes;  // by rank; empty on the CPU
};

// The STEP line. On the CPU exactly the line bench/compare_ddp.sh parses; a CUDA run adds the
// device, the group, and the peak GPU memory beside the peak RSS.
void report(const Config& c, const Bench& bench, const std::vector<double>& per_step,
            const Memory& memory) {
  const double med = median(per_step);
  const double fastest = *std::min_element(per_step.begin(), per_step.end());
  const double slowest = *std::max_element(per_step.begin(), per_step.end());
  std::string tag = "model=" + c.model + " mode=" + c.mode + (c.no_sync ? "-nosync" : "") +
                    (c.private_buckets ? "-private" : "") + " world=" + std::to_string(c.world) +
                    " threads/rank=" + std::to_string(c.threads) +
                    " global_batch=" + std::to_string(c.batch) +
                    (c.ddp() ? " bucket_cap_mb=" + python_float(c.bucket_mb) : "") +
                    " params=" + std::to_string(bench.parameter_count()) + bench.description() +
                    bench.sharding_description();
  std::string gpu;
  if (c.cuda()) {
    tag += " device=" + bench.device_name() + (c.distributed() ? " group=" + c.group : "");
    gpu = " peak_gpu_mb=" + megabytes({memory.gpu_bytes[0]}, 1 << 20) +
          " peak_gpu_mb_ranks=" + megabytes(memory.gpu_bytes, 1 << 20);
  }
  std::printf(
      "STEP %s ms_per_step_med=%.2f ms_min=%.2f ms_max=%.2f samples_per_s=%.1f windows=%dx%d "
      "peak_rss_mb=%.1f peak_rss_mb_ranks=%s%s malloc=%s impl=cohort%s\n",
      tag.c_str(), med * 1e3, fastest * 1e3, slowest * 1e3, c.batch / med, c.windows, c.steps,
      memory.rss_kib[0] / 1024.0, megabytes(memory.rss_kib, 1024).c_str(), gpu.c_str(),
      malloc_setting(bench.malloc_tuned_by_cohort()).c_str(), c.zero_grads ? " zero_grads=1" : "");
  std::fflush(stdout);
}

int run(const Config& c) {
  Bench bench(c);
  launched_main::aborting_on_failure(bench, "cohort-ddp-bench", c.rank, [&] {
    const auto per_step = bench.run();
    Memory memory;
    memory.rss_kib = bench.peak_rss_of_ranks();
    if (c.cuda()) memory.gpu_bytes = bench.peak_gpu_of_ranks();
    if (c.rank == 0) report(c, bench, per_step, memory);
    bench.finish();
  });
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  Config config;
  CLI::App app{"cohort-ddp-bench: cohort DistributedDataParallel against a plain libtorch loop",
               "cohort-ddp-bench"};
  add_options(app, config);
  return launched_main::run_main<Config>(
      argc, argv, app, config,
      [&](Config& c) {
        apply_gpt_size(app, c);
        validate(c);
      },
      run);
}
