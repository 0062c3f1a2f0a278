// Sharded and gathered checkpoints (cohort/torch/checkpoint/sharded_checkpoint.h): saved by ZeRO-2
// at 4 ranks, loaded at other world sizes into ZeRO-1, ZeRO-2, DDP and one process; the loaded
// parameters and optimizer state equal the saved ones bitwise, re-sliced to the new shards, and
// training goes on as the uninterrupted one-process run does; the gathered save loads with
// load_checkpoint; damaged, truncated, missing and mismatched checkpoints make every rank throw
// a CheckpointError naming the file or the parameter, within the test's deadline.
#include "cohort/torch/checkpoint/sharded_checkpoint.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_file.h"
#include "checkpoint/optimizer_codec.h"
#include "checkpoint_files.h"
#include "cohort/core/error.h"
#include "cohort/torch/checkpoint/async_checkpoint.h"
#include "cohort/torch/data/distributed_sampler.h"
#include "cohort/torch/ddp/ddp.h"
#include "cohort/torch/shard/fsdp.h"
#include "cohort/torch/shard/zero.h"
#include "ddp_harness.h"
#include "shard/shard_holdings.h"

namespace cohort::testing {
namespace sharded_checkpoint_test {

namespace fs = std::filesystem;

// As checkpoint_test.cc: every test runs as one job (Note [Job identity]).
const bool job_id_set = ::setenv("COHORT_JOB_ID", "sharded-checkpoint-test-job", 1) == 0;

constexpr int kGlobalBatch = 12;  // divisible by every world size here
constexpr int kSavedSteps = 4;
constexpr int kResumedSteps = 4;

// How a run wraps each rank's model: under a StrategyKind, or not at all (kOneProcess). An FSDP
// kind runs with `fsdp_sharding` instead of fsdp_sharding_of(kind) when that is set: FSDP's
// NO_SHARD (DDP underneath) is no StrategyKind, so kNoShard is the kFullShard kind run with
// ShardingStrategy::kNoShard.
struct Wrap {
  Wrap() = default;
  // Implicit: a StrategyKind is how a run wraps.
  Wrap(StrategyKind strategy, std::optional<ShardingStrategy> replaced = std::nullopt)
      : kind(strategy), fsdp_sharding(replaced) {}
  bool is_zero() const { return kind && cohort::is_zero(*kind); }
  bool is_fsdp() const { return kind && cohort::is_fsdp(*kind); }

  std::optional<StrategyKind> kind;  // nullopt: one process
  std::optional<ShardingStrategy> fsdp_sharding;
};
const Wrap kOneProcess;
const Wrap kNoShard(StrategyKind::kFullShard, ShardingStrategy::kNoShard);

// FSDP's ShardingStrategy of an FSDP wrap.
ShardingStrategy sharding_of(const Wrap& wrap) {
  return wrap.fsdp_sharding.value_or(fsdp_sharding_of(*wrap.kind));
}

// strategy_name's; FSDP's as sharding_strategy_name ("FULL_SHARD", "NO_SHARD", ...).
std::string wrap_name(const Wrap& wrap) {
  if (!wrap.kind) return "one process";
  return wrap.is_fsdp() ? sharding_strategy_name(sharding_of(wrap)) : strategy_name(*wrap.kind);
}

// Each Linear its own unit; units' sizes not multiples of the world sizes here.
FsdpOptions fsdp_options(const Wrap& wrap) {
  FsdpOptions options;
  options.strategy = sharding_of(wrap);
  options.auto_wrap.min_parameters = 1;
  return options;
}

// The nodes of a kHybridShard job: two ranks per node when the world is even, else one.
std::vector<std::string> hybrid_nodes(int world) {
  std::vector<std::string> nodes;
  for (int r = 0; r < world; ++r)
    nodes.push_back("node" + std::to_string(world % 2 == 0 ? r / 2 : r));
  return nodes;
}

// run_with_groups, on hybrid_nodes(world) for kHybridShard.
void run_wrapped(const Wrap& wrap, int world,
                 const std::function<void(int, std::shared_ptr<Group>)>& fn) {
  if (wrap.kind == StrategyKind::kHybridShard) {
    run_with_groups_on_nodes(hybrid_nodes(world), fn);
  } else {
    run_with_groups(world, fn);
  }
}

struct Batch {
  torch::Tensor inputs;
  torch::Tensor targets;
};

std::vector<Batch> make_batches() {
  torch::manual_seed(1234);
  std::vector<Batch> batches;
  for (int s = 0; s < kSavedSteps + kResumedSteps; ++s) {
    batches.push_back({torch::randn({kGlobalBatch, 10}), torch::randint(4, {kGlobalBatch})});
  }
  return batches;
}

// Small buckets: parameters cross block boundaries and some ranks own none of a parameter.
DdpOptions small_buckets() {
  DdpOptions options;
  options.first_bucket_cap_mb = 0;
  options.bucket_cap_mb = 0.004;
  return options;
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(OptimizerKind kind,
                                                        std::vector<torch::Tensor> parameters) {
  if (kind == OptimizerKind::kAdamW) {
    return std::make_unique<torch::optim::AdamW>(
        std::move(parameters), torch::optim::AdamWOptions(0.01).weight_decay(0.01));
  }
  return std::make_unique<torch::optim::SGD>(
      std::move(parameters), torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-3));
}

std::vector<torch::Tensor> snapshot(const torch::nn::Module& model) {
  std::vector<torch::Tensor> out;
  for (const auto& p : model.parameters()) out.push_back(p.detach().clone());
  for (const auto& b : model.buffers()) out.push_back(b.detach().clone());
  return out;
}

// One rank's model, wrapped, and its optimizer.
class RankRun {
 public:
  RankRun(Wrap wrap, std::shared_ptr<TestModel> model, std::shared_ptr<Group> group,
          OptimizerKind kind)
      : wrap_(wrap), model_(std::move(model)), group_(std::move(group)) {
    if (wrap.is_zero()) {
      ZeroOptions options;
      options.stage = wrap.kind == StrategyKind::kZero1 ? 1 : 2;
      options.ddp = small_buckets();
      zero_ = std::make_unique<ZeroDataParallel>(model_, group_, options);
      optimizer_ = make_optimizer(kind, zero_->parameters());
      return;
    }
    if (wrap.is_fsdp()) {
      fsdp_ = std::make_unique<FullyShardedDataParallel>(model_, group_, fsdp_options(wrap));
      optimizer_ = make_optimizer(kind, fsdp_->parameters());
      return;
    }
    if (wrap.kind == StrategyKind::kDdp) {
      ddp_ = std::make_unique<DistributedDataParallel>(model_, group_);
    }
    optimizer_ = make_optimizer(kind, model_->parameters());
  }

  int rank() const { return group_ ? group_->rank() : 0; }
  int world() const { return group_ ? group_->size() : 1; }

  // `before_update`: run between the backward and the optimizer's step.
  void train(const Batch& global, int step, const std::function<void()>& before_update = {}) {
    const int64_t n = kGlobalBatch / world();
    const auto inputs = global.inputs.narrow(0, rank() * n, n);
    const auto targets = global.targets.narrow(0, rank() * n, n);
    optimizer_->zero_grad();
    torch::nn::functional::cross_entropy(model_->forward(inputs, step, rank()), targets).backward();
    if (before_update) before_update();
    if (zero_) {
      zero_->step(*optimizer_);
    } else if (fsdp_) {
      fsdp_->step(*optimizer_);
    } else {
      optimizer_->step();
    }
  }

  TrainingState state(int64_t step = 0) {
    TrainingState state{model_.get(), optimizer_.get()};
    state.step = step;
    state.epoch = 1;
    return state;
  }

  void save(const std::string& directory, int64_t step) {
    const TrainingState s = state(step);
    if (zero_) {
      save_sharded_checkpoint(directory, *zero_, s);
    } else if (fsdp_) {
      save_sharded_checkpoint(directory, *fsdp_, s);
    } else if (group_) {
      save_sharded_checkpoint(directory, *group_, s);
    } else {
      save_sharded_checkpoint(directory, s);
    }
  }

  // save(), in the background (async_checkpoint.h).
  bool save_async(AsyncCheckpointer& checkpointer, const std::string& directory, int64_t step) {
    const TrainingState s = state(step);
    if (zero_) return checkpointer.save_sharded(directory, *zero_, s);
    if (fsdp_) return checkpointer.save_sharded(directory, *fsdp_, s);
    return checkpointer.save_sharded(directory, s);
  }

  Group& group() { return *group_; }

  bool load(const std::string& directory, TrainingState& s, const LoadOptions& options = {}) {
    if (zero_) return load_sharded_checkpoint(directory, *zero_, s, options);
    if (fsdp_) return load_sharded_checkpoint(directory, *fsdp_, s, options);
    if (group_) return load_sharded_checkpoint(directory, *group_, s, options);
    return load_sharded_checkpoint(directory, s, options);
  }

  detail::RankHoldings holdings() const {
    if (zero_) return detail::zero_holdings(*zero_);
    if (fsdp_) return detail::fsdp_holdings(*fsdp_);
    return detail::replicated_holdings(*model_);
  }

  // A forward without backward: under FSDP it leaves the last unit and the root gathered.
  void evaluate(const Batch& global) {
    torch::NoGradGuard no_grad;
    model_->forward(global.inputs, 0, rank());
  }

  TestModel& model() { return *model_; }
  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  ZeroDataParallel* zero() { return zero_.get(); }
  FullyShardedDataParallel* fsdp() { return fsdp_.get(); }

 private:
  Wrap wrap_;
  std::shared_ptr<TestModel> model_;
  std::shared_ptr<Group> group_;
  std::unique_ptr<ZeroDataParallel> zero_;
  std::unique_ptr<FullyShardedDataParallel> fsdp_;
  std::unique_ptr<DistributedDataParallel> ddp_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

// The optimizer's whole state, by parameter name and field, put together from every rank's
// shards; and the step counts.
struct FullState {
  std::map<std::string, std::map<std::string, torch::Tensor>> fields;
  std::map<std::string, int64_t> steps;
};

// This rank's part of the optimizer state, into `full` (under `mutex`).
void add_state_of(RankRun& run, FullState& full, std::mutex& mutex) {
  const auto* codec = detail::codec_of(run.optimizer());
  std::lock_guard<std::mutex> lock(mutex);
  for (const auto& shard : run.holdings().shards) {
    const auto* state = detail::state_of(run.optimizer(), shard.tensor);
    if (state == nullptr || shard.length == 0) continue;
    const detail::FlatState flat = codec->read_state(*state);
    if (flat.has_step) full.steps[shard.name] = flat.step;
    for (const auto& [name, field] : flat.fields) {
      auto& whole = full.fields[shard.name][name];
      if (!whole.defined()) whole = torch::full({shard.numel()}, NAN, field.options());
      whole.narrow(0, shard.offset, shard.length).copy_(field.reshape({-1}));
    }
  }
}

// "" when this rank's optimizer state is exactly its shards' part of `full`.
std::string state_difference(RankRun& run, const FullState& full) {
  const auto* codec = detail::codec_of(run.optimizer());
  for (const auto& shard : run.holdings().shards) {
    const auto* state = detail::state_of(run.optimizer(), shard.tensor);
    const bool saved = full.fields.count(shard.name) != 0 && shard.length > 0;
    if ((state != nullptr) != saved) return shard.name + ": state present?";
    if (state == nullptr) continue;
    const detail::FlatState flat = codec->read_state(*state);
    const auto& want = full.fields.at(shard.name);
    if (flat.fields.size() != want.size()) return shard.name + ": other state tensors";
    if (flat.has_step && flat.step != full.steps.at(shard.name)) return shard.name + ": step";
    for (const auto& [name, field] : flat.fields) {
      if (field.sizes() != shard.tensor.sizes()) return shard.name + "." + name + ": shape";
      const auto expected = want.at(name).narrow(0, shard.offset, shard.length);
      if (!torch::equal(field.reshape({-1}), expected)) return shard.name + "." + name;
    }
  }
  return "";
}

// One process on the whole batch: the parameters after each step.
std::vector<std::vector<torch::Tensor>> reference_run(OptimizerKind kind,
                                                      const std::vector<Batch>& batches) {
  torch::manual_seed(100);
  auto reference = mlp()();
  RankRun run(kOneProcess, reference, nullptr, kind);
  std::vector<std::vector<torch::Tensor>> states;
  for (size_t s = 0; s < batches.size(); ++s) {
    run.train(batches[s], static_cast<int>(s));
    states.push_back(snapshot(*reference));
  }
  return states;
}

std::string compare(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& want,
                    double rtol, double atol) {
  for (size_t i = 0; i < want.size(); ++i) {
    const auto error = (got[i].to(torch::kFloat64) - want[i].to(torch::kFloat64)).abs();
    if ((error <= atol + rtol * want[i].to(torch::kFloat64).abs()).all().item<bool>()) continue;
    return "tensor " + std::to_string(i) + ": max |difference| " +
           std::to_string(error.max().item<double>());
  }
  return "";
}

// What the saving run left: its checkpoint and, to compare with, its parameters and state.
struct Saved {
  std::vector<torch::Tensor> parameters;
  FullState state;
};

// `world` ranks under `wrap` train kSavedSteps steps, then call save(run, rank); what is
// returned is the state before save(), which may train on.
Saved train_then(Wrap wrap, int world, OptimizerKind kind, const std::vector<Batch>& batches,
                 const std::function<void(RankRun&, int)>& save) {
  Saved saved;
  std::mutex mutex;
  std::vector<std::shared_ptr<TestModel>> models;
  for (int r = 0; r < world; ++r) {
    torch::manual_seed(100 + r);  // the wrapper makes everyone start from rank 0's (seed 100)
    models.push_back(mlp()());
  }
  run_wrapped(wrap, world, [&](int rank, std::shared_ptr<Group> group) {
    RankRun run(wrap, models[rank], group, kind);
    for (int s = 0; s < kSavedSteps; ++s) run.train(batches[s], s);
    add_state_of(run, saved.state, mutex);
    auto parameters = snapshot(run.model());  // collective under FSDP (it gathers the units)
    if (rank == 0) saved.parameters = std::move(parameters);
    save(run, rank);
  });
  return saved;
}

// ... and save a sharded checkpoint to directory_of(rank).
Saved train_and_save(Wrap wrap, int world, OptimizerKind kind, const std::vector<Batch>& batches,
                     const std::function<std::string(int)>& directory_of) {
  return train_then(wrap, world, kind, batches,
                    [&](RankRun& run, int rank) { run.save(directory_of(rank), kSavedSteps); });
}

struct Resumed {
  bool loaded = false;
  int64_t step = -1;
  std::string parameters;  // bitwise_difference from the saved ones
  std::string state;       // state_difference
  std::string training;    // compare with the reference after each resumed step
};

// `world` ranks (or one process) under `wrap`, from other initial weights, load from
// directory_of(rank) and train kResumedSteps steps.
std::vector<Resumed> load_and_train(Wrap wrap, int world, OptimizerKind kind,
                                    const std::vector<Batch>& batches, const Saved& saved,
                                    const std::vector<std::vector<torch::Tensor>>& reference,
                                    const std::function<std::string(int)>& directory_of) {
  const double rtol = kind == OptimizerKind::kAdamW ? 1e-4 : 1e-5;
  const double atol = kind == OptimizerKind::kAdamW ? 1e-5 : 1e-6;
  std::vector<Resumed> out(static_cast<size_t>(world));
  auto body = [&](int rank, std::shared_ptr<Group> group) {
    torch::manual_seed(500 + rank);
    RankRun run(wrap, mlp()(), group, kind);
    TrainingState state = run.state();
    Resumed& mine = out[rank];
    // Under FSDP some units are gathered when the load writes the shards (the last one used
    // and the root): they must not keep the values from before it.
    if (wrap.is_fsdp()) run.evaluate(batches[0]);
    mine.loaded = run.load(directory_of(rank), state);
    mine.step = state.step;
    mine.parameters = bitwise_difference(snapshot(run.model()), saved.parameters);
    mine.state = state_difference(run, saved.state);
    for (int s = kSavedSteps; s < kSavedSteps + kResumedSteps && mine.training.empty(); ++s) {
      run.train(batches[s], s);
      const std::string error = compare(snapshot(run.model()), reference[s], rtol, atol);
      if (!error.empty()) mine.training = "step " + std::to_string(s) + ": " + error;
    }
  };
  if (!wrap.kind) {
    body(0, nullptr);
  } else {
    run_wrapped(wrap, world, body);
  }
  return out;
}

void expect_resumed(const std::vector<Resumed>& resumed) {
  for (size_t rank = 0; rank < resumed.size(); ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const Resumed& r = resumed[rank];
    ASSERT_TRUE(r.loaded);
    EXPECT_EQ(r.step, kSavedSteps);
    EXPECT_EQ(r.parameters, "");
    EXPECT_EQ(r.state, "");
    EXPECT_EQ(r.training, "");
  }
}

// Saved at 4 ranks under `saving`, then loaded under each of `targets` (wrap, world size):
// every load resumes (expect_resumed).
void expect_saved_at_four_resumes(Wrap saving, OptimizerKind kind,
                                  const std::vector<std::pair<Wrap, int>>& targets) {
  torch::set_num_threads(1);
  TempDir dir;
  const auto batches = make_batches();
  const auto reference = reference_run(kind, batches);
  auto same = [&](int) { return dir.path(); };
  const Saved saved = train_and_save(saving, 4, kind, batches, same);
  // The saving run itself matched the reference: what is compared after the load is the
  // checkpoint's doing.
  ASSERT_EQ(compare(saved.parameters, reference[kSavedSteps - 1], 1e-4, 1e-5), "");
  for (const auto& [wrap, world] : targets) {
    SCOPED_TRACE(wrap_name(wrap) + " at " + std::to_string(world));
    expect_resumed(load_and_train(wrap, world, kind, batches, saved, reference, same));
  }
}

class ShardedCheckpoint : public ::testing::TestWithParam<OptimizerKind> {};

// The matrix: saved at W=4 under ZeRO-2; loaded at W=2 under ZeRO-1, at W=3 under
// ZeRO-2, into DDP at W=2 and into one process.
TEST_P(ShardedCheckpoint, SavedByZero2AtFourRanksResumesEverywhere) {
  expect_saved_at_four_resumes(StrategyKind::kZero2, GetParam(),
                               {{StrategyKind::kZero1, 2},
                                {StrategyKind::kZero2, 3},
                                {StrategyKind::kDdp, 2},
                                {kOneProcess, 1},
                                {StrategyKind::kZero2, 4}});
}

// Saved by DDP (each parameter split evenly among the files) and by one process.
TEST_P(ShardedCheckpoint, SavedByDdpAndByOneProcessLoadIntoZero) {
  torch::set_num_threads(1);
  const auto batches = make_batches();
  const auto reference = reference_run(GetParam(), batches);
  for (const auto& [wrap, world] : std::vector<std::pair<Wrap, int>>{{StrategyKind::kDdp, 3}}) {
    TempDir dir;
    auto same = [&](int) { return dir.path(); };
    const Saved saved = train_and_save(wrap, world, GetParam(), batches, same);
    expect_resumed(
        load_and_train(StrategyKind::kZero1, 4, GetParam(), batches, saved, reference, same));
    expect_resumed(
        load_and_train(StrategyKind::kZero2, 2, GetParam(), batches, saved, reference, same));
  }
  TempDir dir;
  Saved saved;
  {
    torch::manual_seed(100);
    RankRun run(kOneProcess, mlp()(), nullptr, GetParam());
    for (int s = 0; s < kSavedSteps; ++s) run.train(batches[s], s);
    run.save(dir.path(), kSavedSteps);
    std::mutex mutex;
    add_state_of(run, saved.state, mutex);
    saved.parameters = snapshot(run.model());
  }
  auto same = [&](int) { return dir.path(); };
  expect_resumed(
      load_and_train(StrategyKind::kZero2, 3, GetParam(), batches, saved, reference, same));
}

// FSDP: saved at W=4 under FULL_SHARD; loaded at W=2 under ZeRO-1, at W=3 under HYBRID_SHARD
// (three nodes of one rank: every replica is filled), in one process, and into the other FSDP
// strategies at other world sizes; each load leaves a unit gathered from before it.
TEST_P(ShardedCheckpoint, SavedByFullShardAtFourRanksResumesEverywhere) {
  expect_saved_at_four_resumes(StrategyKind::kFullShard, GetParam(),
                               {{StrategyKind::kZero1, 2},
                                {StrategyKind::kHybridShard, 3},
                                {kOneProcess, 1},
                                {StrategyKind::kFullShard, 3},
                                {StrategyKind::kShardGradOp, 2},
                                {kNoShard, 2},
                                {StrategyKind::kHybridShard, 4},
                                {StrategyKind::kFullShard, 4}});
}

// Saved by ZeRO-2, by NO_SHARD (DDP underneath) and by SHARD_GRAD_OP, loaded into FULL_SHARD.
TEST_P(ShardedCheckpoint, SavedByZeroAndOtherStrategiesLoadIntoFullShard) {
  torch::set_num_threads(1);
  const auto batches = make_batches();
  const auto reference = reference_run(GetParam(), batches);
  for (const auto& [wrap, world] : std::vector<std::pair<Wrap, int>>{
           {StrategyKind::kZero2, 4}, {kNoShard, 3}, {StrategyKind::kShardGradOp, 2}}) {
    SCOPED_TRACE(std::string("saved by ") + wrap_name(wrap) + " at " + std::to_string(world));
    TempDir dir;
    auto same = [&](int) { return dir.path(); };
    const Saved saved = train_and_save(wrap, world, GetParam(), batches, same);
    expect_resumed(
        load_and_train(StrategyKind::kFullShard, 3, GetParam(), batches, saved, reference, same));
  }
}

// Asynchronous sharded saves (async_checkpoint.h): every rank trains the next step while its
// file is written, and the checkpoint still resumes the step it was taken at, bit for bit.
// Staged (the default: Note [Snapshot saves]), the writer is held at its first piece through
// the whole step, update included, since before_update() has nothing to wait for; unstaged
// (staging_bytes 0), until the step's backward is done, and before_update() waits for it.
TEST_P(ShardedCheckpoint, AsyncSaveResumesTheStepItWasTakenAtWhileTrainingWentOn) {
  torch::set_num_threads(1);
  const auto batches = make_batches();
  const auto reference = reference_run(GetParam(), batches);
  AsyncCheckpointOptions unstaged;
  unstaged.staging_bytes = 0;
  for (const bool staged : {true, false}) {
    for (Wrap wrap : {StrategyKind::kDdp, StrategyKind::kZero2, StrategyKind::kFullShard}) {
      SCOPED_TRACE(std::string(wrap_name(wrap)) + (staged ? ", staged" : ", unstaged"));
      TempDir dir;
      const Saved saved = train_then(wrap, 2, GetParam(), batches, [&](RankRun& run, int) {
        WriterGate gate;
        AsyncCheckpointer checkpointer(run.group(),
                                       gate.options(staged ? AsyncCheckpointOptions{} : unstaged));
        ASSERT_TRUE(run.save_async(checkpointer, dir.path(), kSavedSteps));
        gate.wait_until_writing();
        run.train(batches[kSavedSteps], kSavedSteps, [&] {
          if (!staged) gate.open();
          checkpointer.before_update();
        });
        gate.open();
        checkpointer.wait();
        EXPECT_EQ(checkpointer.last_save().staging_memory > 0, staged);
      });
      auto same = [&](int) { return dir.path(); };
      expect_resumed(load_and_train(wrap, 2, GetParam(), batches, saved, reference, same));
    }
  }
}

// A checkpointer made over another group than the wrapper's is refused before anything starts.
TEST(ShardedCheckpointArguments, AnAsyncSaveOverAnotherGroupIsRefused) {
  TempDir dir;
  run_with_groups(2, [&](int rank, std::shared_ptr<Group> group) {
    auto alone = group->split(rank, 0);  // each rank a group of its own
    auto model = mlp()();
    ZeroDataParallel zero(model, group);
    AsyncCheckpointer checkpointer(*alone);
    try {
      checkpointer.save_sharded(dir.path(), zero, TrainingState{model.get()});
      ADD_FAILURE() << "no error on rank " << rank;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("make the checkpointer over the wrapper's group"),
                std::string::npos)
          << e.what();
    }
  });
  EXPECT_EQ(dir.names(), std::set<std::string>{});
}

INSTANTIATE_TEST_SUITE_P(Optimizers, ShardedCheckpoint,
                         ::testing::Values(OptimizerKind::kAdamW, OptimizerKind::kSgdMomentum),
                         [](const auto& param_info) {
                           return std::string(
                               param_info.param == OptimizerKind::kAdamW ? "AdamW" : "SgdMomentum");
                         });

// Note [Shard files and file systems]: each rank saves into a directory only it sees (as
// node-local disks would be); the loading ranks get the files they cannot see from a rank that
// can, and a rank that sees no file at all gets everything it needs over the group.
TEST(ShardedCheckpointFiles, DirectoriesThatOnlySomeRanksSeeLoad) {
  torch::set_num_threads(1);
  TempDir dir;
  const auto batches = make_batches();
  const auto reference = reference_run(OptimizerKind::kAdamW, batches);
  auto own = [&](int rank) { return dir.file("node" + std::to_string(rank)); };
  const Saved saved = train_and_save(StrategyKind::kZero2, 2, OptimizerKind::kAdamW, batches, own);
  EXPECT_EQ(dir.names("node1").size(), 1u);  // rank 1's file, no manifest
  EXPECT_EQ(dir.names("node0").size(), 2u);  // rank 0's file and the manifest
  expect_resumed(load_and_train(StrategyKind::kZero1, 3, OptimizerKind::kAdamW, batches, saved,
                                reference, own));
  expect_resumed(
      load_and_train(StrategyKind::kDdp, 2, OptimizerKind::kAdamW, batches, saved, reference, own));
  // A damaged file that only one rank sees: the ranks it is sent to report it too.
  const std::string file = dir.file("node1/" + *dir.names("node1").begin());
  std::string bytes = read_bytes(file);
  bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x01);
  write_bytes(file, bytes);
  const auto errors = checkpoint_errors(3, [&](int rank, std::shared_ptr<Group> group) {
    RankRun run(StrategyKind::kZero2, mlp()(), group, OptimizerKind::kAdamW);
    TrainingState state = run.state();
    run.load(own(rank), state);
  });
  expect_every_rank_names(errors, {file, "CRC"});
}

// Buffers and the parameters ZeRO does not shard (frozen ones) are saved whole from rank 0, as
// DDP broadcasts rank 0's, and load into a wrapper that holds them otherwise (DDP: a frozen
// parameter is one more replicated parameter there).
struct WithBuffers : TestModel {
  WithBuffers() {
    fc1 = register_module("fc1", torch::nn::Linear(10, 16));
    bn = register_module("bn", torch::nn::BatchNorm1d(16));
    fc2 = register_module("fc2", torch::nn::Linear(16, 4));
    fc1->bias.set_requires_grad(false);
  }
  torch::Tensor forward(torch::Tensor x, int, int) override { return fc2(torch::relu(bn(fc1(x)))); }
  torch::nn::Linear fc1{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
  torch::nn::Linear fc2{nullptr};
};

TEST(ShardedCheckpointFiles, BuffersAndFrozenParametersAreRankZeros) {
  TempDir dir;
  run_with_groups(2, [&](int rank, std::shared_ptr<Group> group) {
    auto model = std::make_shared<WithBuffers>();
    ZeroOptions options;
    options.stage = 2;
    ZeroDataParallel zero(model, group, options);
    torch::optim::AdamW optimizer(zero.parameters());
    {
      torch::NoGradGuard no_grad;  // as if the ranks' copies had drifted apart
      model->bn->running_mean.fill_(10 + rank);
      model->fc1->bias.fill_(5 + rank);
    }
    save_sharded_checkpoint(dir.path(), zero, TrainingState{model.get(), &optimizer});
  });
  run_with_groups(3, [&](int rank, std::shared_ptr<Group> group) {
    auto model = std::make_shared<WithBuffers>();
    DistributedDataParallel ddp(model, group);
    std::vector<torch::Tensor> trained;  // the param group must be the saving run's
    for (const auto& p : model->parameters()) {
      if (p.requires_grad()) trained.push_back(p);
    }
    torch::optim::AdamW optimizer(trained);
    TrainingState state{model.get(), &optimizer};
    ASSERT_TRUE(load_sharded_checkpoint(dir.path(), *group, state));
    EXPECT_TRUE(torch::equal(model->bn->running_mean, torch::full({16}, 10.0))) << rank;
    EXPECT_TRUE(torch::equal(model->fc1->bias, torch::full({16}, 5.0))) << rank;
  });
}

// FSDP shards frozen parameters with the rest of their unit: each rank saves its part of them
// (a load into ZeRO takes them whole), and loads its part back; buffers are rank 0's.
TEST(ShardedCheckpointFiles, FrozenParametersAndBuffersUnderFsdp) {
  TempDir dir;
  FsdpOptions options;
  options.auto_wrap.min_parameters = 1;
  run_with_groups(3, [&](int rank, std::shared_ptr<Group> group) {
    auto model = std::make_shared<WithBuffers>();
    FullyShardedDataParallel fsdp(model, group, options);
    torch::optim::AdamW optimizer(fsdp.parameters());
    {
      auto whole = fsdp.full_parameters(/*writeback=*/true);
      torch::NoGradGuard no_grad;
      model->fc1->bias.copy_(torch::arange(16, torch::kFloat));
      model->bn->running_mean.fill_(10 + rank);
    }
    save_sharded_checkpoint(dir.path(), fsdp, TrainingState{model.get(), &optimizer});
  });
  auto expect_loaded = [](WithBuffers& model, int rank) {
    EXPECT_TRUE(torch::equal(model.bn->running_mean, torch::full({16}, 10.0))) << rank;
    EXPECT_TRUE(torch::equal(model.fc1->bias, torch::arange(16, torch::kFloat))) << rank;
  };
  run_with_groups(2, [&](int rank, std::shared_ptr<Group> group) {
    auto model = std::make_shared<WithBuffers>();
    ZeroDataParallel zero(model, group);
    torch::optim::AdamW optimizer(zero.parameters());
    TrainingState state{model.get(), &optimizer};
    ASSERT_TRUE(load_sharded_checkpoint(dir.path(), zero, state));
    expect_loaded(*model, rank);
  });
  run_with_groups(2, [&](int rank, std::shared_ptr<Group> group) {
    auto model = std::make_shared<WithBuffers>();
    FullyShardedDataParallel fsdp(model, group, options);
    torch::optim::AdamW optimizer(fsdp.parameters());
    TrainingState state{model.get(), &optimizer};
    ASSERT_TRUE(load_sharded_checkpoint(dir.path(), fsdp, state));
    expect_loaded(*model, rank);  // reading the parameters gathers them from the shards
  });
}

// The manifest: every parameter with its shape, dtype and the ranges each rank saved (which
// together cover it once); the files with their CRCs; written last, as JSON before the footer.
nlohmann::json read_manifest(const TempDir& dir) {
  std::string text = read_bytes(dir.file("manifest.ckpt"));
  EXPECT_GT(text.size(), kCheckpointFooterBytes);
  text.resize(text.size() - kCheckpointFooterBytes);
  return nlohmann::json::parse(text);
}

// The manifest lists every parameter of mlp() with its shape and dtype, and the pieces of
// each (sorted by offset) cover it exactly once; returns the ranks that saved some piece.
std::set<int> expect_pieces_cover_mlp_once(const nlohmann::json& manifest) {
  torch::manual_seed(0);
  auto model = mlp()();
  const auto parameters = model->named_parameters();
  EXPECT_EQ(manifest.at("tensors").size(), parameters.size());
  std::set<int> ranks_with_pieces;
  for (const auto& tensor : manifest.at("tensors")) {
    const auto* parameter = parameters.find(tensor.at("name").get<std::string>());
    if (parameter == nullptr) {
      ADD_FAILURE() << "the manifest names " << tensor.at("name");
      continue;
    }
    EXPECT_EQ(tensor.at("shape").get<std::vector<int64_t>>(), parameter->sizes().vec());
    EXPECT_EQ(tensor.at("dtype"), "Float");
    int64_t end = 0;
    for (const auto& piece : tensor.at("pieces")) {
      EXPECT_EQ(piece.at("offset").get<int64_t>(), end) << tensor.at("name");
      end += piece.at("length").get<int64_t>();
      ranks_with_pieces.insert(piece.at("rank").get<int>());
    }
    EXPECT_EQ(end, parameter->numel()) << tensor.at("name");
  }
  return ranks_with_pieces;
}

TEST(ShardedCheckpointFiles, ManifestListsEveryParameterAndFile) {
  TempDir dir;
  const auto batches = make_batches();
  train_and_save(StrategyKind::kZero2, 3, OptimizerKind::kAdamW, batches,
                 [&](int) { return dir.path(); });
  const auto names = dir.names();
  ASSERT_EQ(names.size(), 4u);
  const auto manifest = read_manifest(dir);
  EXPECT_EQ(manifest.at("world_size"), 3);
  EXPECT_EQ(manifest.at("step"), kSavedSteps);
  EXPECT_EQ(manifest.at("optimizer").at("kind"), "AdamW");
  EXPECT_EQ(manifest.at("optimizer").at("param_groups").at(0).at("options").at("lr"), 0.01);
  EXPECT_EQ(expect_pieces_cover_mlp_once(manifest), (std::set<int>{0, 1, 2}));
  ASSERT_EQ(manifest.at("files").size(), 3u);
  for (const auto& file : manifest.at("files")) {
    const std::string name = file.at("name");
    EXPECT_EQ(names.count(name), 1u) << name;
    EXPECT_EQ(file.at("bytes").get<uint64_t>(), fs::file_size(dir.file(name))) << name;
  }
}

// HYBRID_SHARD at 2 nodes of 2 ranks: both replicas of a shard hold it whole, and each writes
// half of it, so that the checkpoint holds every range once and every rank writes. It resumes
// in one process and under FULL_SHARD at 3.
TEST(ShardedCheckpointFiles, HybridShardSavesEachRangeOnce) {
  torch::set_num_threads(1);
  TempDir dir;
  const auto batches = make_batches();
  const auto reference = reference_run(OptimizerKind::kAdamW, batches);
  auto same = [&](int) { return dir.path(); };
  const Saved saved =
      train_and_save(StrategyKind::kHybridShard, 4, OptimizerKind::kAdamW, batches, same);
  EXPECT_EQ(expect_pieces_cover_mlp_once(read_manifest(dir)), (std::set<int>{0, 1, 2, 3}));
  for (const auto& [wrap, world] :
       std::vector<std::pair<Wrap, int>>{{kOneProcess, 1}, {StrategyKind::kFullShard, 3}}) {
    SCOPED_TRACE(wrap_name(wrap) + " at " + std::to_string(world));
    expect_resumed(
        load_and_train(wrap, world, OptimizerKind::kAdamW, batches, saved, reference, same));
  }
}

// A save replaces the previous one: its files carry a new token and the earlier ones are
// removed once the manifest names the new ones. Shard files of a save that never wrote its
// manifest (a crash) are never loaded.
TEST(ShardedCheckpointFiles, SavesReplaceEachOtherAndUnfinishedOnesAreIgnored) {
  torch::set_num_threads(1);
  TempDir dir;
  std::vector<std::shared_ptr<TestModel>> models = {mlp()(), mlp()()};
  const auto batches = make_batches();
  run_with_groups(2, [&](int rank, std::shared_ptr<Group> group) {
    RankRun run(StrategyKind::kZero2, models[rank], group, OptimizerKind::kAdamW);
    run.train(batches[0], 0);
    run.save(dir.path(), 1);
    group->barrier();
    const auto first = dir.names();
    run.train(batches[1], 1);
    run.save(dir.path(), 2);
    group->barrier();
    const auto second = dir.names();
    if (rank != 0) return;
    EXPECT_EQ(first.size(), 3u);
    EXPECT_EQ(second.size(), 3u);
    for (const auto& name : first) {
      if (name == "manifest.ckpt") continue;
      EXPECT_EQ(second.count(name), 0u) << name;
    }
  });
  // An unfinished save: a stray shard file of another token, no manifest naming it.
  const std::string stray = dir.file("shard-00000-of-00002.00000000000000ff.ckpt");
  write_bytes(stray, "garbage");
  run_with_groups(2, [&](int rank, std::shared_ptr<Group> group) {
    RankRun run(StrategyKind::kZero1, mlp()(), group, OptimizerKind::kAdamW);
    TrainingState state = run.state();
    EXPECT_TRUE(run.load(dir.path(), state));
    EXPECT_EQ(state.step, 2);
  });
  // Shard files without a manifest are a damaged checkpoint, refused on every rank, and no
  // checkpoint at all only to a job that asked to start afresh (whose save then replaces them).
  fs::remove(dir.file("manifest.ckpt"));
  run_with_groups(2, [&](int rank, std::shared_ptr<Group> group) {
    RankRun run(StrategyKind::kZero2, mlp()(), group, OptimizerKind::kAdamW);
    const auto before = snapshot(run.model());
    TrainingState state = run.state(7);
    EXPECT_THROW(run.load(dir.path(), state), CheckpointError) << "rank " << rank;
    LoadOptions afresh;
    afresh.start_afresh = true;
    EXPECT_FALSE(run.load(dir.path(), state, afresh)) << "rank " << rank;
    EXPECT_EQ(state.step, 7);
    EXPECT_EQ(bitwise_difference(snapshot(run.model()), before), "");
  });
}

// ---- the gathered save

// Saved whole by ZeRO-2 and by FSDP's FULL_SHARD at 4 ranks into one ordinary file:
// load_checkpoint restores it into one process and into DDP at 2 ranks, state and all, and
// training goes on as the reference.
TEST(GatheredCheckpoint, LoadsWithPlainLoadCheckpoint) {
  torch::set_num_threads(1);
  for (const auto& run_case : std::vector<std::pair<Wrap, OptimizerKind>>{
           {StrategyKind::kZero2, OptimizerKind::kAdamW},
           {StrategyKind::kZero2, OptimizerKind::kSgdMomentum},
           {StrategyKind::kFullShard, OptimizerKind::kAdamW}}) {
    const Wrap wrap = run_case.first;
    const OptimizerKind kind = run_case.second;
    SCOPED_TRACE(wrap_name(wrap));
    TempDir dir;
    const std::string path = dir.file("full.ckpt");
    const auto batches = make_batches();
    const auto reference = reference_run(kind, batches);
    const Saved saved = train_then(wrap, 4, kind, batches, [&](RankRun& run, int) {
      if (run.zero() != nullptr) {
        save_gathered_checkpoint(path, *run.zero(), run.state(kSavedSteps));
      } else {
        save_gathered_checkpoint(path, *run.fsdp(), run.state(kSavedSteps));
      }
    });
    EXPECT_EQ(dir.names(), std::set<std::string>{"full.ckpt"});
    const double rtol = kind == OptimizerKind::kAdamW ? 1e-4 : 1e-5;
    const double atol = kind == OptimizerKind::kAdamW ? 1e-5 : 1e-6;
    auto resume = [&](int rank, std::shared_ptr<Group> group) {
      torch::manual_seed(900 + rank);
      RankRun run(group ? Wrap(StrategyKind::kDdp) : kOneProcess, mlp()(), group, kind);
      TrainingState state = run.state();
      ASSERT_TRUE(group ? load_checkpoint(path, *group, state) : load_checkpoint(path, state));
      EXPECT_EQ(state.step, kSavedSteps);
      EXPECT_EQ(bitwise_difference(snapshot(run.model()), saved.parameters), "");
      EXPECT_EQ(state_difference(run, saved.state), "");
      for (int s = kSavedSteps; s < kSavedSteps + kResumedSteps; ++s) {
        run.train(batches[s], s);
        ASSERT_EQ(compare(snapshot(run.model()), reference[s], rtol, atol), "") << "step " << s;
      }
    };
    resume(0, nullptr);
    run_with_groups(2, resume);
  }
}

// ---- errors: every rank throws, naming the file or the parameter, and none waits for ever

class ShardedCheckpointErrors : public ::testing::Test {
 protected:
  virtual Wrap saving_wrap() const { return StrategyKind::kZero2; }
  virtual Wrap loading_wrap() const { return StrategyKind::kZero1; }
  void SetUp() override {
    torch::set_num_threads(1);
    const auto batches = make_batches();
    train_and_save(saving_wrap(), 4, OptimizerKind::kAdamW, batches,
                   [&](int) { return dir_.path(); });
  }
  std::string shard_file(int rank) const {
    for (const auto& name : dir_.names()) {
      if (name.rfind("shard-0000" + std::to_string(rank), 0) == 0) return dir_.file(name);
    }
    return "";
  }
  // Loading at 3 ranks under loading_wrap(): what each rank threw. Each rank's model is left as
  // it was (checked here).
  std::vector<std::string> load_errors(const std::function<std::shared_ptr<TestModel>()>& make =
                                           [] { return mlp()(); }) {
    return checkpoint_errors(3, [&](int rank, std::shared_ptr<Group> group) {
      auto model = make();
      RankRun run(loading_wrap(), model, group, OptimizerKind::kAdamW);
      const auto before = snapshot(*model);
      TrainingState state = run.state();
      const auto restore_check = [&] {
        EXPECT_EQ(bitwise_difference(snapshot(*model), before), "") << "rank " << rank;
      };
      try {
        run.load(dir_.path(), state);
      } catch (...) {
        restore_check();
        throw;
      }
    });
  }
  TempDir dir_;
};

TEST_F(ShardedCheckpointErrors, DamagedShardFileNamesIt) {
  const std::string file = shard_file(1);
  std::string bytes = read_bytes(file);
  bytes[bytes.size() / 3] = static_cast<char>(bytes[bytes.size() / 3] ^ 0x40);
  write_bytes(file, bytes);
  const auto errors = load_errors();
  expect_every_rank_names(errors, {file, "CRC"});
}

TEST_F(ShardedCheckpointErrors, TruncatedShardFileNamesIt) {
  const std::string file = shard_file(2);
  const std::string bytes = read_bytes(file);
  write_bytes(file, bytes.substr(0, bytes.size() - 100));
  expect_every_rank_names(load_errors(), {file, "truncated"});
}

TEST_F(ShardedCheckpointErrors, MissingShardFileNamesIt) {
  const std::string file = shard_file(3);
  ASSERT_TRUE(fs::remove(file));
  expect_every_rank_names(load_errors(), {file, "missing"});
}

// Issue 35: a directory or a FIFO in a shard file's place was reported as a missing file.
TEST_F(ShardedCheckpointErrors, SomethingElseInAShardFilesPlaceIsNamed) {
  const std::string file = shard_file(1);
  ASSERT_TRUE(fs::remove(file));
  ASSERT_TRUE(fs::create_directory(file));
  expect_every_rank_names(load_errors(), {file, "is not a regular file"});
  ASSERT_TRUE(fs::remove(file));
  ASSERT_EQ(::mkfifo(file.c_str(), 0600), 0);
  expect_every_rank_names(load_errors(), {file, "is not a regular file"});
}

// Issue 35: a manifest whose size of a file is wrong loaded (its CRC matched the file).
TEST_F(ShardedCheckpointErrors, AShardFileOfAnotherSizeThanItsManifestSaysIsRefused) {
  const std::string manifest_path = dir_.file("manifest.ckpt");
  std::string text = read_bytes(manifest_path);
  text.resize(text.size() - kCheckpointFooterBytes);
  nlohmann::json manifest = nlohmann::json::parse(text);
  manifest.at("files").at(2).at("bytes") = manifest.at("files").at(2).at("bytes").get<int>() + 8;
  detail::write_checkpoint_file(manifest_path, manifest.dump());
  expect_every_rank_names(load_errors(), {shard_file(2), "bytes but the manifest says"});
}

// A shard file replaced by another save's file of the same name: its own footer is fine, the
// manifest's CRC is not.
TEST_F(ShardedCheckpointErrors, ShardFileOfAnotherSaveNamesIt) {
  const std::string file = shard_file(0);
  TempDir other;
  train_and_save(StrategyKind::kZero2, 4, OptimizerKind::kSgdMomentum, make_batches(),
                 [&](int) { return other.path(); });
  std::string replacement;
  for (const auto& name : other.names()) {
    if (name.rfind("shard-00000", 0) == 0) replacement = read_bytes(other.file(name));
  }
  write_bytes(file, replacement);
  expect_every_rank_names(load_errors(), {file, "manifest says"});
}

// mlp() with fc2 one output wider.
struct Wider : TestModel {
  Wider() {
    fc1 = register_module("fc1", torch::nn::Linear(10, 32));
    fc2 = register_module("fc2", torch::nn::Linear(32, 33));
    fc3 = register_module("fc3", torch::nn::Linear(33, 4));
  }
  torch::Tensor forward(torch::Tensor x, int, int) override {
    return fc3(torch::relu(fc2(torch::relu(fc1(x)))));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};

TEST_F(ShardedCheckpointErrors, ModelOfAnotherShapeNamesTheParameter) {
  const auto errors = load_errors([] { return std::make_shared<Wider>(); });
  expect_every_rank_names(errors, {dir_.path(), "'fc2.weight'", "[32, 32]", "[33, 32]"});
}

TEST_F(ShardedCheckpointErrors, ParameterMissingOnEitherSideIsNamed) {
  struct NoBias : TestModel {
    NoBias() {
      fc1 = register_module("fc1", torch::nn::Linear(10, 32));
      fc2 = register_module("fc2", torch::nn::Linear(32, 32));
      fc3 = register_module("fc3", torch::nn::Linear(torch::nn::LinearOptions(32, 4).bias(false)));
    }
    torch::Tensor forward(torch::Tensor x, int, int) override {
      return fc3(torch::relu(fc2(torch::relu(fc1(x)))));
    }
    torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
  };
  expect_every_rank_names(load_errors([] { return std::make_shared<NoBias>(); }),
                          {"the checkpoint has 'fc3.bias' but the model does not"});
  struct Extra : TestModel {
    Extra() {
      fc1 = register_module("fc1", torch::nn::Linear(10, 32));
      fc2 = register_module("fc2", torch::nn::Linear(32, 32));
      fc3 = register_module("fc3", torch::nn::Linear(32, 4));
      scale = register_parameter("scale", torch::ones({4}));
    }
    torch::Tensor forward(torch::Tensor x, int, int) override {
      return fc3(torch::relu(fc2(torch::relu(fc1(x))))) * scale;
    }
    torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
    torch::Tensor scale;
  };
  expect_every_rank_names(load_errors([] { return std::make_shared<Extra>(); }),
                          {"the model has 'scale' but the checkpoint does not"});
}

TEST_F(ShardedCheckpointErrors, ModelOfAnotherDtypeNamesTheParameter) {
  const auto errors = load_errors([] {
    auto model = mlp()();
    model->to(torch::kFloat64);
    return model;
  });
  expect_every_rank_names(errors, {"'fc1.weight' is Float [32, 10] in the checkpoint but Double"});
}

// Only one rank asks for state the checkpoint lacks: every rank throws that rank's error.
TEST_F(ShardedCheckpointErrors, StateOnlyOneRankAsksForFailsEveryRank) {
  const auto errors = checkpoint_errors(3, [&](int rank, std::shared_ptr<Group> group) {
    RankRun run(StrategyKind::kZero2, mlp()(), group, OptimizerKind::kAdamW);
    DistributedSampler sampler(48, *group);
    TrainingState state = run.state();
    if (rank == 1) state.sampler = &sampler;
    run.load(dir_.path(), state);
  });
  expect_every_rank_names(errors, {dir_.path(), "without the sampler state"});
}

TEST_F(ShardedCheckpointErrors, AnotherOptimizerIsACheckpointError) {
  const auto errors = checkpoint_errors(2, [&](int, std::shared_ptr<Group> group) {
    RankRun run(StrategyKind::kZero2, mlp()(), group, OptimizerKind::kSgdMomentum);
    TrainingState state = run.state();
    run.load(dir_.path(), state);
  });
  expect_every_rank_names(errors, {"saved with a AdamW optimizer, but this one is SGD"});
}

TEST(ShardedCheckpointArguments, OptimizerOverTheModelUnderZeroIsRefusedBeforeWriting) {
  TempDir dir;
  const auto errors = checkpoint_errors(2, [&](int, std::shared_ptr<Group> group) {
    auto model = mlp()();
    ZeroDataParallel zero(model, group);
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
    save_sharded_checkpoint(dir.path(), zero, TrainingState{model.get(), &optimizer});
  });
  for (const auto& error : errors) {
    EXPECT_EQ(error.rfind("InvalidArgument: ", 0), 0u) << error;
    EXPECT_NE(error.find("zero.parameters()"), std::string::npos) << error;
  }
  EXPECT_TRUE(dir.names().empty());
}

TEST(ShardedCheckpointArguments, UnwritableDirectoryThrowsOnEveryRank) {
  TempDir dir;
  write_bytes(dir.file("a_file"), "x");
  const std::string directory = dir.file("a_file/checkpoint");
  const auto errors = checkpoint_errors(3, [&](int, std::shared_ptr<Group> group) {
    RankRun run(StrategyKind::kZero2, mlp()(), group, OptimizerKind::kAdamW);
    run.save(directory, 1);
  });
  expect_every_rank_names(errors, {directory});
}

// The sampler is kept as checkpoint.h keeps it: the samples all ranks consumed, so that another
// world size resumes at consumed / W; another data set is a CheckpointError.
TEST(ShardedCheckpointSampler, ResumesAtAnotherWorldSize) {
  TempDir dir;
  run_with_groups(4, [&](int, std::shared_ptr<Group> group) {
    RankRun run(StrategyKind::kZero2, mlp()(), group, OptimizerKind::kAdamW);
    DistributedSampler sampler(48, *group);
    sampler.set_epoch(2);
    sampler.set_position(3);
    TrainingState state = run.state(11);
    state.sampler = &sampler;
    save_sharded_checkpoint(dir.path(), *run.zero(), state);
  });
  run_with_groups(2, [&](int rank, std::shared_ptr<Group> group) {
    RankRun run(StrategyKind::kZero1, mlp()(), group, OptimizerKind::kAdamW);
    DistributedSampler sampler(48, *group);
    TrainingState state = run.state();
    state.sampler = &sampler;
    ASSERT_TRUE(run.load(dir.path(), state));
    EXPECT_EQ(sampler.epoch(), 2u) << "rank " << rank;
    EXPECT_EQ(sampler.position(), 6u) << "rank " << rank;  // 3 * 4 consumed, over 2 ranks
    EXPECT_EQ(state.step, 11);
  });
  const auto errors = checkpoint_errors(2, [&](int, std::shared_ptr<Group> group) {
    RankRun run(StrategyKind::kZero1, mlp()(), group, OptimizerKind::kAdamW);
    DistributedSampler sampler(49, *group);
    TrainingState state = run.state();
    state.sampler = &sampler;
    run.load(dir.path(), state);
  });
  expect_every_rank_names(errors, {dir.path(), "sampler over 48 samples"});
}

// The same machinery under FSDP: saved by FULL_SHARD at 4 ranks, loaded into FULL_SHARD at 3.
class ShardedCheckpointErrorsFsdp : public ShardedCheckpointErrors {
 protected:
  Wrap saving_wrap() const override { return StrategyKind::kFullShard; }
  Wrap loading_wrap() const override { return StrategyKind::kFullShard; }
};

TEST_F(ShardedCheckpointErrorsFsdp, DamagedShardFileNamesIt) {
  const std::string file = shard_file(2);
  std::string bytes = read_bytes(file);
  bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x10);
  write_bytes(file, bytes);
  expect_every_rank_names(load_errors(), {file, "CRC"});
}

TEST_F(ShardedCheckpointErrorsFsdp, ModelOfAnotherShapeNamesTheParameter) {
  const auto errors = load_errors([] { return std::make_shared<Wider>(); });
  expect_every_rank_names(errors, {dir_.path(), "'fc2.weight'", "[32, 32]", "[33, 32]"});
}

// As checkpoint.h's: a job resumes only its own checkpoints unless asked for any, and passes
// another's over only when asked to start afresh.
TEST(ShardedCheckpointOneProcess, AnotherJobsCheckpointIsRefusedUnlessAnyJobOrStartAfresh) {
  TempDir dir;
  RankRun saving(kOneProcess, mlp()(), nullptr, OptimizerKind::kSgdMomentum);
  ::setenv("COHORT_JOB_ID", "an-earlier-job", 1);
  save_sharded_checkpoint(dir.path(), saving.state(9));
  ::setenv("COHORT_JOB_ID", "sharded-checkpoint-test-job", 1);
  RankRun loading(kOneProcess, mlp()(), nullptr, OptimizerKind::kSgdMomentum);
  TrainingState state = loading.state(0);
  EXPECT_THROW(load_sharded_checkpoint(dir.path(), state), CheckpointError);
  LoadOptions afresh;
  afresh.start_afresh = true;
  EXPECT_FALSE(load_sharded_checkpoint(dir.path(), state, afresh));
  EXPECT_EQ(state.step, 0);
  LoadOptions any;
  any.any_job = true;
  EXPECT_TRUE(load_sharded_checkpoint(dir.path(), state, any));
  EXPECT_EQ(state.step, 9);
}

// Shards whose manifest is gone are a damaged checkpoint, not an empty directory: a load says
// so instead of starting afresh (whose first save would remove the shards), unless asked to.
TEST(ShardedCheckpointOneProcess, ShardsWithoutTheirManifestAreRefusedUnlessStartingAfresh) {
  TempDir dir;
  RankRun saving(kOneProcess, mlp()(), nullptr, OptimizerKind::kSgdMomentum);
  save_sharded_checkpoint(dir.path(), saving.state(9));
  ASSERT_EQ(::unlink((dir.path() + "/manifest.ckpt").c_str()), 0);
  RankRun loading(kOneProcess, mlp()(), nullptr, OptimizerKind::kSgdMomentum);
  TrainingState state = loading.state(0);
  try {
    load_sharded_checkpoint(dir.path(), state);
    ADD_FAILURE() << "shards without a manifest loaded as no checkpoint";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("no manifest.ckpt"), std::string::npos) << e.what();
  }
  LoadOptions afresh;
  afresh.start_afresh = true;
  EXPECT_FALSE(load_sharded_checkpoint(dir.path(), state, afresh));
  EXPECT_EQ(state.step, 0);
}

// One process: the generator, counters and the model round-trip exactly.
TEST(ShardedCheckpointOneProcess, RoundTripsGeneratorAndCounters) {
  TempDir dir;
  torch::manual_seed(3);
  RankRun saving(kOneProcess, mlp()(), nullptr, OptimizerKind::kAdamW);
  const auto batches = make_batches();
  saving.train(batches[0], 0);
  save_sharded_checkpoint(dir.path(), saving.state(5));
  const torch::Tensor next = torch::rand({4});
  RankRun loading(kOneProcess, mlp()(), nullptr, OptimizerKind::kAdamW);
  TrainingState state = loading.state();
  ASSERT_TRUE(load_sharded_checkpoint(dir.path(), state));
  EXPECT_EQ(state.step, 5);
  EXPECT_EQ(state.epoch, 1);
  EXPECT_TRUE(torch::equal(torch::rand({4}), next));
  EXPECT_EQ(bitwise_difference(snapshot(loading.model()), snapshot(saving.model())), "");
  TrainingState none = loading.state();
  EXPECT_FALSE(load_sharded_checkpoint(dir.file("nothing"), none));
}

}  // namespace sharded_checkpoint_test
}  // namespace cohort::testing
