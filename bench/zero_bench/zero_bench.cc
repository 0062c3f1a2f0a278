// cohort-zero-bench: training throughput and model-state memory of a GPT language model
// (models/gpt.h) under cohort's DistributedDataParallel, ZeroDataParallel stages 1
// and 2 and FullyShardedDataParallel's strategies, with AdamW. Its twin bench/zero_peer.py runs the
// same model and loop under PyTorch's DDP and ZeroRedundancyOptimizer; bench/compare_zero.sh runs
// them side by side (docs/bench.md, "ZeRO stages 1 and 2").
//
//   build/bin/cohortrun --no-prefix --nproc-per-node 2 build/bin/cohort-zero-bench --strategy zero2
//
// One process per rank, started by a launcher (cohortrun, torchrun, ...): cohort::init() reads
// where it sits in the job from the launcher's environment. Rank 0 prints a STEP line
// (samples/s, the median of the timed windows) and one MEM line per rank.
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench_stats.h"  // bench/ddp_bench
#include "cohort/comm/group.h"
#include "cohort/comm/init.h"
#include "cohort/comm/launch_env.h"
#include "cohort/comm/timeline.h"
#include "cohort/core/error.h"
#include "cohort/torch/ddp/ddp.h"
#include "cohort/torch/shard/fsdp.h"
#include "cohort/torch/shard/zero.h"
#include "cohort/torch/strategy/strategy_kind.h"
#include "gpt.h"            // models/
#include "launched_main.h"  // main()

namespace {

using bench_stats::Clock;
using bench_stats::median;

using launched_main::kExitFailure;
using launched_main::kExitOk;
using launched_main::kExitUsage;

struct Config {
  std::string strategy = "ddp";
  int world = 1;  // from the launcher (cohort::read_launch_env)
  int rank = 0;
  int threads = 1;
  int batch = 8;  // global, in sequences: each rank trains on batch / world per step
  char_lm::GptConfig gpt{256, 128, 4, 4, 256, 0.1};
  double lr = 3e-4;
  double weight_decay = 0.01;
  double bucket_mb = 25.0;
  int warmup = 3;
  int steps = 5;
  int windows = 3;
  int64_t seed = 0;
  std::string timeline;
  double timeout_s = 300;
  bool checksum = false;

  // The strategy layer's kind of --strategy (cohort/torch/strategy/strategy_kind.h); FSDP's
  // NO_SHARD, which is no kind of its own there, is timed too.
  static constexpr const char* kNoShard = "no_shard";
  std::optional<cohort::StrategyKind> kind() const { return cohort::strategy_named(strategy); }
  int stage() const {
    return kind() == cohort::StrategyKind::kZero1   ? 1
           : kind() == cohort::StrategyKind::kZero2 ? 2
                                                    : 0;
  }
  bool fsdp() const { return strategy == kNoShard || (kind() && cohort::is_fsdp(*kind())); }
  cohort::ShardingStrategy sharding() const {
    return strategy == kNoShard ? cohort::ShardingStrategy::kNoShard
                                : cohort::fsdp_sharding_of(*kind());
  }
  cohort::Milliseconds timeout() const {
    return cohort::Milliseconds(static_cast<int64_t>(timeout_s * 1000.0));
  }
};

void add_model_options(CLI::App& app, Config& c) {
  app.add_option("--layers", c.gpt.layers, "transformer blocks")->capture_default_str();
  app.add_option("--width", c.gpt.width, "model width (embedding size)")->capture_default_str();
  app.add_option("--heads", c.gpt.heads, "attention heads; must divide --width")
      ->capture_default_str();
  app.add_option("--context", c.gpt.context, "tokens per sequence")->capture_default_str();
  app.add_option("--vocab", c.gpt.vocab, "tokens in the vocabulary")->capture_default_str();
  app.add_option("--dropout", c.gpt.dropout, "GptConfig::dropout")->capture_default_str();
}

void add_run_options(CLI::App& app, Config& c) {
  app.add_option("--threads", c.threads, "torch::set_num_threads for each rank")
      ->capture_default_str();
  app.add_option("--timeout", c.timeout_s,
                 "seconds to wait for the store, the other ranks and each collective")
      ->capture_default_str();
  app.add_option("--timeline", c.timeline,
                 "write a Chrome trace of the timed steps (forward, backward, optimizer, each "
                 "bucket's reduction) to this file (docs/timeline.md)");
  app.add_flag("--checksum", c.checksum,
               "print a PARAMS line: a hash of every bit of the trained parameters, and whether "
               "all ranks hold the same (to compare two builds bit for bit)");
}

// The strategy layer's names, and FSDP's no_shard.
std::vector<std::string> strategy_choices() {
  std::vector<std::string> names;
  for (cohort::StrategyKind kind : cohort::all_strategy_kinds()) {
    names.push_back(cohort::strategy_name(kind));
  }
  names.push_back(Config::kNoShard);
  return names;
}

void add_options(CLI::App& app, Config& c) {
  app.add_option("--strategy", c.strategy,
                 "ddp: cohort::DistributedDataParallel; zero1, zero2: ZeroDataParallel stage 1 "
                 "or 2; full_shard, shard_grad_op, hybrid_shard, no_shard: "
                 "FullyShardedDataParallel with that strategy (units: the transformer blocks, "
                 "the rest in the root unit)")
      ->check(CLI::IsMember(strategy_choices()))
      ->capture_default_str();
  app.add_option("--batch", c.batch, "GLOBAL batch in sequences; each rank takes batch/world")
      ->capture_default_str();
  app.add_option("--lr", c.lr, "AdamW learning rate")->capture_default_str();
  app.add_option("--weight-decay", c.weight_decay, "AdamW weight decay")->capture_default_str();
  app.add_option("--bucket-mb", c.bucket_mb, "DdpOptions::bucket_cap_mb")->capture_default_str();
  app.add_option("--warmup", c.warmup, "untimed steps first")->capture_default_str();
  app.add_option("--steps", c.steps, "steps per timed window")->capture_default_str();
  app.add_option("--windows", c.windows, "timed windows; the median is reported")
      ->capture_default_str();
  app.add_option("--seed", c.seed, "initial weights, dropout and tokens")->capture_default_str();
  add_model_options(app, c);
  add_run_options(app, c);
  app.footer(
      "Ranks: start them with a launcher (cohortrun --nproc-per-node N, torchrun, ...).\n"
      "Rank 0 prints a STEP line and one MEM line per rank (bench/zero_peer.py's format).\n"
      "Exit codes: 0 ok, 1 the run failed, 2 bad arguments. See docs/bench.md.");
}

// Refuses what cannot run, before any rank waits for another.
void validate(const Config& c) {
  auto require = [](bool ok, const std::string& message) {
    if (!ok) throw cohort::InvalidArgument(message);
  };
  require(c.batch >= c.world && c.batch % c.world == 0,
          "--batch " + std::to_string(c.batch) +
              " is the global batch and must be a multiple "
              "of the world size " +
              std::to_string(c.world));
  require(c.gpt.layers > 0 && c.gpt.width > 0 && c.gpt.heads > 0 && c.gpt.context > 0 &&
              c.gpt.vocab > 0 && c.gpt.width % c.gpt.heads == 0,
          "--layers, --width, --heads, --context, --vocab must be positive and --heads must "
          "divide --width");
  require(c.threads >= 1 && c.bucket_mb > 0, "--threads and --bucket-mb must be positive");
  require(c.warmup >= 0 && c.steps >= 1 && c.windows >= 1,
          "--warmup must be >= 0, --steps and --windows >= 1");
  require(c.timeout_s > 0 && c.timeout_s <= 86400, "--timeout must be in (0, 86400] seconds");
}

// What one rank holds, gathered to rank 0 for the MEM lines. Bytes; RSS in KiB.
struct Figures {
  int64_t parameters = 0;     // under FSDP this rank's shards; the units it gathered are apart
  int64_t peak_gathered = 0;  // FSDP: the most bytes of gathered units held at once
  int64_t gradients = 0;
  int64_t peak_gradients = 0;
  int64_t optimizer_state = 0;
  int64_t peak_rss_kib = 0;
  // Peak RSS before the first step, and how much each phase of all the steps raised it: where
  // the memory beyond the model state is needed (the optimizer phase of the first step also
  // creates the optimizer state).
  int64_t rss_before_steps_kib = 0;
  int64_t rss_growth_kib[3] = {0, 0, 0};  // forward, backward, optimizer
  static constexpr size_t kFields = 10;
  // Held after the last step (the peak is parameters + peak_gathered + peak_gradients +
  // optimizer_state; summarize_zero.py prints both).
  int64_t model_state() const { return parameters + gradients + optimizer_state; }
};

// Seconds of each timed step's phases, on this rank.
struct Phases {
  std::vector<double> forward, backward, optimizer, exposed_comm;
};

class Bench {
 public:
  explicit Bench(const Config& c) : config_(c) {}

  // Returns the per-step seconds of each timed window (every rank times its own).
  std::vector<double> run() {
    torch::set_num_threads(config_.threads);
    make_batches();
    start_group();
    torch::manual_seed(config_.seed);  // the same initial weights on every rank
    model_ = char_lm::Gpt(config_.gpt);
    wrap_model();
    rss_before_steps_kib_ = last_rss_kib_ = bench_stats::peak_rss_kib();
    for (int i = 0; i < config_.warmup; ++i) step(false);
    return bench_stats::timed_windows(config_.windows, config_.steps, [this] { step(true); });
  }

  // Every rank's figures, by rank (collective).
  std::vector<Figures> figures_of_ranks() {
    const Figures mine = figures();
    std::vector<int64_t> flat{
        mine.parameters,           mine.peak_gathered,     mine.gradients,
        mine.peak_gradients,       mine.optimizer_state,   mine.peak_rss_kib,
        mine.rss_before_steps_kib, mine.rss_growth_kib[0], mine.rss_growth_kib[1],
        mine.rss_growth_kib[2]};
    std::vector<int64_t> all(flat.size() * static_cast<size_t>(config_.world));
    group_->allgather(cohort::make_buffer(flat), cohort::make_buffer(all));
    std::vector<Figures> by_rank;
    for (size_t i = 0; i < all.size(); i += Figures::kFields) {
      by_rank.push_back({all[i],
                         all[i + 1],
                         all[i + 2],
                         all[i + 3],
                         all[i + 4],
                         all[i + 5],
                         all[i + 6],
                         {all[i + 7], all[i + 8], all[i + 9]}});
    }
    return by_rank;
  }

  int64_t parameter_count() const { return char_lm::count_parameters(*model_); }

  // FNV-1a over the bytes of every parameter, in registration order, of every rank (collective;
  // under FSDP the parameters are gathered whole for it).
  std::vector<int64_t> parameter_hashes() {
    c10::optional<cohort::FullyShardedDataParallel::FullParameters> whole;
    if (fsdp_) whole.emplace(fsdp_->full_parameters());
    uint64_t hash = 1469598103934665603ull;
    for (const auto& p : model_->parameters()) {
      const auto bytes = p.detach().contiguous();
      const auto* data = static_cast<const uint8_t*>(bytes.data_ptr());
      for (size_t i = 0; i < bytes.nbytes(); ++i) hash = (hash ^ data[i]) * 1099511628211ull;
    }
    std::vector<int64_t> mine{static_cast<int64_t>(hash)};
    std::vector<int64_t> all(static_cast<size_t>(config_.world));
    group_->allgather(cohort::make_buffer(mine), cohort::make_buffer(all));
    return all;
  }
  const Phases& phases() const { return phases_; }

  // A failing rank breaks the group so that its peers stop now instead of at their deadline.
  void abort(const std::string& reason) noexcept {
    if (group_) group_->abort(reason);
  }

  // Collective: writes the timeline, tears down the wrappers and the group.
  void finish() {
    if (timeline_) timeline_->write(*group_);
    zero_.reset();
    ddp_.reset();
    fsdp_.reset();
    group_->barrier();  // nobody closes its connections while a peer still talks
    group_.reset();
  }

 private:
  void start_group() {
    cohort::InitOptions init;
    init.group.timeout = config_.timeout();
    init.backend = cohort::Backend::kNative;  // the peer runs over TCP too
    group_ = cohort::init(init);
    if (!config_.timeline.empty()) timeline_ = std::make_shared<cohort::Timeline>(config_.timeline);
  }

  // DDP, ZeRO at the asked stage or FSDP, and AdamW over what each of them says to step.
  void wrap_model() {
    cohort::DdpOptions ddp;
    ddp.bucket_cap_mb = config_.bucket_mb;
    ddp.timeline = timeline_;
    const auto options = torch::optim::AdamWOptions(config_.lr).weight_decay(config_.weight_decay);
    if (config_.fsdp()) {
      cohort::FsdpOptions fsdp;
      fsdp.strategy = config_.sharding();
      fsdp.timeline = timeline_;
      fsdp.ddp = ddp;
      fsdp_ = std::make_unique<cohort::FullyShardedDataParallel>(model_, group_, fsdp);
      optimizer_ = std::make_unique<torch::optim::AdamW>(fsdp_->parameters(), options);
      return;
    }
    if (config_.stage() == 0) {
      ddp_ = std::make_unique<cohort::DistributedDataParallel>(model_, group_, ddp);
      optimizer_ = std::make_unique<torch::optim::AdamW>(model_->parameters(), options);
      return;
    }
    cohort::ZeroOptions zero;
    zero.stage = config_.stage();
    zero.ddp = ddp;
    zero_ = std::make_unique<cohort::ZeroDataParallel>(model_, group_, zero);
    optimizer_ = std::make_unique<torch::optim::AdamW>(zero_->parameters(), options);
  }

  // A few fixed batches of this rank's sequences, cycled: making tokens is not what is timed.
  // Uniform tokens: a step runs the same kernels on the same shapes whatever they are.
  void make_batches() {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(
        static_cast<uint64_t>(config_.seed * 1000 + config_.rank + 1));
    const int64_t local = config_.batch / config_.world;
    for (int i = 0; i < 4; ++i) {
      batches_.push_back(
          torch::randint(config_.gpt.vocab, {local, config_.gpt.context + 1}, generator));
    }
  }

  // .grad set to none, as torch's zero_grad(set_to_none=True) (libtorch 1.13's zero_grad()
  // zeroes in place). Under ZeRO the optimizer holds the shards, whose .grad are views of the
  // reduced blocks: dropping them frees the blocks.
  void clear_gradients() {
    for (auto& group : optimizer_->param_groups()) {
      for (auto& p : group.params()) p.mutable_grad() = torch::Tensor();
    }
  }

  // Forward, next-token cross-entropy, backward (which reduces the gradients), AdamW step.
  void step(bool timed) {
    const auto& tokens = batches_[step_++ % batches_.size()];
    auto* timeline = timed ? timeline_.get() : nullptr;
    const auto t0 = Clock::now();
    torch::Tensor loss;
    {
      cohort::TraceSpan span(timeline, "forward");
      clear_gradients();
      const auto logits = model_->forward(tokens.narrow(1, 0, config_.gpt.context));
      loss = torch::nn::functional::cross_entropy(
          logits.reshape({-1, config_.gpt.vocab}),
          tokens.narrow(1, 1, config_.gpt.context).reshape({-1}));
    }
    account_rss(0);
    const auto t1 = Clock::now();
    {
      cohort::TraceSpan span(timeline, "backward");
      loss.backward();
    }
    account_rss(1);
    const auto t2 = Clock::now();
    {
      cohort::TraceSpan span(timeline, "optimizer");
      if (zero_) {
        zero_->step(*optimizer_);
      } else if (fsdp_) {
        fsdp_->step(*optimizer_);
      } else {
        optimizer_->step();
      }
    }
    account_rss(2);
    if (timed) record_phases(t0, t1, t2, Clock::now());
  }

  // Adds what the phase that just ended raised the peak RSS by to its total.
  void account_rss(int phase) {
    const int64_t now = bench_stats::peak_rss_kib();
    rss_growth_kib_[phase] += now - last_rss_kib_;
    last_rss_kib_ = now;
  }

  void record_phases(Clock::time_point t0, Clock::time_point t1, Clock::time_point t2,
                     Clock::time_point t3) {
    auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
    phases_.forward.push_back(seconds(t1 - t0));
    phases_.backward.push_back(seconds(t2 - t1));
    phases_.optimizer.push_back(seconds(t3 - t2));
    const auto& stats = zero_   ? zero_->last_iteration_stats()
                        : fsdp_ ? fsdp_->last_iteration_stats()
                                : ddp_->last_iteration_stats();
    phases_.exposed_comm.push_back(stats.exposed_comm_ms / 1e3);
  }

  // This rank's model state: ZeroDataParallel's own report; for DDP the same figures counted
  // from the tensors (.grad are views of DDP's persistent buckets, so what is held after the
  // step is also the most held at once).
  Figures figures() const {
    Figures f;
    f.peak_rss_kib = bench_stats::peak_rss_kib();
    f.rss_before_steps_kib = rss_before_steps_kib_;
    for (int i = 0; i < 3; ++i) f.rss_growth_kib[i] = rss_growth_kib_[i];
    f.optimizer_state = static_cast<int64_t>(cohort::optimizer_state_bytes(*optimizer_));
    if (fsdp_) {
      const auto report = fsdp_->memory(optimizer_.get());
      f.parameters = static_cast<int64_t>(report.parameter_shards);
      f.peak_gathered = static_cast<int64_t>(report.peak_gathered);
      f.gradients = static_cast<int64_t>(report.gradients);
      f.peak_gradients = static_cast<int64_t>(report.peak_gradients);
      return f;
    }
    if (zero_) {
      const auto report = zero_->memory(optimizer_.get());
      f.parameters = static_cast<int64_t>(report.parameters);
      f.gradients = static_cast<int64_t>(report.gradients);
      f.peak_gradients = static_cast<int64_t>(report.peak_gradients);
      return f;
    }
    for (const auto& p : model_->parameters()) {
      f.parameters += static_cast<int64_t>(p.nbytes());
      if (p.grad().defined()) f.gradients += static_cast<int64_t>(p.grad().nbytes());
    }
    f.peak_gradients = f.gradients;
    return f;
  }

  Config config_;
  std::vector<torch::Tensor> batches_;
  size_t step_ = 0;
  Phases phases_;
  int64_t rss_before_steps_kib_ = 0;
  int64_t last_rss_kib_ = 0;
  int64_t rss_growth_kib_[3] = {0, 0, 0};
  char_lm::Gpt model_{nullptr};
  // Declared so that they are destroyed in this order: wrappers, group.
  std::shared_ptr<cohort::Group> group_;
  std::shared_ptr<cohort::Timeline> timeline_;
  std::unique_ptr<cohort::DistributedDataParallel> ddp_;
  std::unique_ptr<cohort::ZeroDataParallel> zero_;
  std::unique_ptr<cohort::FullyShardedDataParallel> fsdp_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
};

std::string model_tag(const Config& c) {
  return "strategy=" + c.strategy + " world=" + std::to_string(c.world) +
         " threads/rank=" + std::to_string(c.threads) + " global_batch=" + std::to_string(c.batch) +
         " context=" + std::to_string(c.gpt.context) + " layers=" + std::to_string(c.gpt.layers) +
         " width=" + std::to_string(c.gpt.width) + " heads=" + std::to_string(c.gpt.heads) +
         " vocab=" + std::to_string(c.gpt.vocab);
}

void report_step(const Config& c, const Bench& bench, const std::vector<double>& per_step) {
  const double med = median(per_step);
  const auto ms = [](const std::vector<double>& v) { return median(v) * 1e3; };
  const Phases& p = bench.phases();
  std::printf(
      "STEP impl=cohort %s params=%lld ms_per_step_med=%.2f ms_min=%.2f ms_max=%.2f "
      "samples_per_s=%.2f tokens_per_s=%.1f windows=%dx%d forward_ms=%.2f backward_ms=%.2f "
      "optimizer_ms=%.2f exposed_comm_ms=%.2f\n",
      model_tag(c).c_str(), static_cast<long long>(bench.parameter_count()), med * 1e3,
      *std::min_element(per_step.begin(), per_step.end()) * 1e3,
      *std::max_element(per_step.begin(), per_step.end()) * 1e3, c.batch / med,
      c.batch * c.gpt.context / med, c.windows, c.steps, ms(p.forward), ms(p.backward),
      ms(p.optimizer), ms(p.exposed_comm));
}

void report_hashes(const Config& c, const std::vector<int64_t>& hashes) {
  const bool equal =
      std::all_of(hashes.begin(), hashes.end(), [&](int64_t h) { return h == hashes.front(); });
  std::printf("PARAMS impl=cohort strategy=%s world=%d hash=%016llx ranks_equal=%s\n",
              c.strategy.c_str(), c.world, static_cast<unsigned long long>(hashes.front()),
              equal ? "yes" : "no");
}

void report_memory(const Config& c, const std::vector<Figures>& ranks) {
  for (size_t r = 0; r < ranks.size(); ++r) {
    const Figures& f = ranks[r];
    std::printf(
        "MEM impl=cohort strategy=%s world=%d rank=%zu parameters=%lld peak_gathered=%lld "
        "gradients=%lld peak_gradients=%lld optimizer_state=%lld model_state=%lld "
        "peak_rss_mb=%.1f "
        "rss_before_steps_mb=%.1f rss_growth_mb=forward:%.1f,backward:%.1f,optimizer:%.1f\n",
        c.strategy.c_str(), c.world, r, static_cast<long long>(f.parameters),
        static_cast<long long>(f.peak_gathered), static_cast<long long>(f.gradients),
        static_cast<long long>(f.peak_gradients), static_cast<long long>(f.optimizer_state),
        static_cast<long long>(f.model_state()), f.peak_rss_kib / 1024.0,
        f.rss_before_steps_kib / 1024.0, f.rss_growth_kib[0] / 1024.0, f.rss_growth_kib[1] / 1024.0,
        f.rss_growth_kib[2] / 1024.0);
  }
  std::fflush(stdout);
}

int run(const Config& c) {
  Bench bench(c);
  launched_main::aborting_on_failure(bench, "cohort-zero-bench", c.rank, [&] {
    const auto per_step = bench.run();
    const auto ranks = bench.figures_of_ranks();
    const auto hashes = c.checksum ? bench.parameter_hashes() : std::vector<int64_t>{};
    if (c.rank == 0) {
      report_step(c, bench, per_step);
      report_memory(c, ranks);
      if (c.checksum) report_hashes(c, hashes);
    }
    bench.finish();
  });
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  Config config;
  CLI::App app{"cohort-zero-bench: DDP, ZeRO stages 1 and 2 and FSDP on a GPT language model",
               "cohort-zero-bench"};
  add_options(app, config);
  return launched_main::run_main<Config>(
      argc, argv, app, config, [](Config& c) { validate(c); }, run);
}
