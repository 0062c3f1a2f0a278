// Learning-rate schedules (optim/lr_schedule.h): the LR of every step of a warm-up and each
// decay against the closed forms written out here, param groups with different base LRs, the
// scheduler's state through plain, group and sharded checkpoints (and files without it), and
// the errors for bad options.
#include "cohort/torch/optim/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "checkpoint_files.h"
#include "cohort/core/error.h"
#include "cohort/torch/checkpoint/checkpoint.h"
#include "cohort/torch/checkpoint/sharded_checkpoint.h"
#include "ddp_harness.h"

namespace cohort::testing {
namespace lr_schedule_test {

using optim::LrDecay;
using optim::LrScheduleOptions;
using optim::scheduled_lr;
using optim::WarmupDecayLR;

constexpr double kPi = 3.14159265358979323846;
constexpr double kTolerance = 1e-12;  // closed forms evaluated in another order

// The LR every group holds now.
std::vector<double> lrs_of(const torch::optim::Optimizer& optimizer) {
  std::vector<double> lrs;
  for (const auto& group : optimizer.param_groups()) lrs.push_back(group.options().get_lr());
  return lrs;
}

// Checks `expected(step)` against the pure function and against a scheduler driving an
// optimizer through `steps` steps (the LR in place before each optimizer step).
void expect_schedule(const LrScheduleOptions& options, double base,
                     const std::function<double(int64_t)>& expected, int64_t steps) {
  auto weight = torch::zeros({2}, torch::requires_grad());
  torch::optim::SGD optimizer({weight}, torch::optim::SGDOptions(base));
  WarmupDecayLR scheduler(optimizer, options);
  for (int64_t s = 0; s < steps; ++s) {
    EXPECT_NEAR(scheduled_lr(options, base, s), expected(s), kTolerance) << "step " << s;
    EXPECT_NEAR(lrs_of(optimizer)[0], expected(s), kTolerance) << "scheduler, step " << s;
    EXPECT_EQ(scheduler.step_count(), s);
    optimizer.step();
    scheduler.step();
  }
}

TEST(LinearScaledLr, ScalesWithTheGlobalBatch) {
  EXPECT_DOUBLE_EQ(optim::linear_scaled_lr(0.1, 256, 8192), 3.2);
  EXPECT_DOUBLE_EQ(optim::linear_scaled_lr(0.01, 64, 64), 0.01);
  EXPECT_DOUBLE_EQ(optim::linear_scaled_lr(0.01, 64, 32), 0.005);
  EXPECT_THROW(optim::linear_scaled_lr(0.0, 64, 128), InvalidArgument);
  EXPECT_THROW(optim::linear_scaled_lr(-0.1, 64, 128), InvalidArgument);
  EXPECT_THROW(optim::linear_scaled_lr(NAN, 64, 128), InvalidArgument);
  EXPECT_THROW(optim::linear_scaled_lr(0.1, 0, 128), InvalidArgument);
  EXPECT_THROW(optim::linear_scaled_lr(0.1, 64, -1), InvalidArgument);
}

TEST(LrSchedule, WarmupFromZeroClimbsInEqualStepsToTheBaseLr) {
  LrScheduleOptions o;
  o.warmup_steps = 4;
  const std::vector<double> want = {0.5, 1.0, 1.5, 2.0, 2.0, 2.0};  // base 2
  expect_schedule(
      o, 2.0, [&](int64_t s) { return want[static_cast<size_t>(s)]; }, 6);
  // Bit for bit the examples' former formula, base * (s + 1) / n.
  for (int64_t s = 0; s < 4; ++s) EXPECT_EQ(scheduled_lr(o, 0.03, s), 0.03 * double(s + 1) / 4.0);
}

TEST(LrSchedule, WarmupFromAFractionThenConstant) {
  LrScheduleOptions o;
  o.warmup_steps = 4;
  o.warmup_start_factor = 0.2;
  // 0.8 * (0.2 + 0.8 * (s + 1) / 4)
  const std::vector<double> want = {0.8 * 0.4, 0.8 * 0.6, 0.8 * 0.8, 0.8, 0.8, 0.8, 0.8};
  expect_schedule(
      o, 0.8, [&](int64_t s) { return want[static_cast<size_t>(s)]; }, 7);
}

TEST(LrSchedule, NoWarmupIsTheDecayFromStepZero) {
  LrScheduleOptions o;
  o.decay = LrDecay::kStep;
  o.step_size = 2;
  o.gamma = 0.5;
  const std::vector<double> want = {1, 1, 0.5, 0.5, 0.25, 0.25, 0.125};
  expect_schedule(
      o, 1.0, [&](int64_t s) { return want[static_cast<size_t>(s)]; }, 7);
}

TEST(LrSchedule, StepDecayCountsFromTheEndOfWarmup) {
  LrScheduleOptions o;
  o.warmup_steps = 3;
  o.decay = LrDecay::kStep;
  o.step_size = 3;
  o.gamma = 0.1;
  expect_schedule(
      o, 0.6,
      [](int64_t s) {
        if (s < 3) return 0.6 * double(s + 1) / 3.0;
        return 0.6 * std::pow(0.1, double((s - 3) / 3));
      },
      14);
  EXPECT_NEAR(scheduled_lr(o, 0.6, 9), 0.006, kTolerance);  // two decays after the warm-up
}

TEST(LrSchedule, CosineDecaysToTheEndFactorAtTotalSteps) {
  LrScheduleOptions o;
  o.warmup_steps = 4;
  o.decay = LrDecay::kCosine;
  o.total_steps = 12;
  o.end_factor = 0.1;
  expect_schedule(
      o, 0.5,
      [](int64_t s) {
        if (s < 4) return 0.5 * double(s + 1) / 4.0;
        if (s >= 12) return 0.05;
        return 0.5 * (0.1 + 0.9 * 0.5 * (1 + std::cos(kPi * double(s - 4) / 8.0)));
      },
      16);
  EXPECT_NEAR(scheduled_lr(o, 0.5, 4), 0.5, kTolerance);         // the decay's start
  EXPECT_NEAR(scheduled_lr(o, 0.5, 8), 0.5 * 0.55, kTolerance);  // half-way
  EXPECT_NEAR(scheduled_lr(o, 0.5, 12), 0.05, kTolerance);       // the end, and after
  EXPECT_NEAR(scheduled_lr(o, 0.5, 1000), 0.05, kTolerance);
}

TEST(LrSchedule, CosineToAnAbsoluteEndLr) {
  LrScheduleOptions o;
  o.decay = LrDecay::kCosine;
  o.total_steps = 10;
  o.end_lr = 0.001;
  expect_schedule(
      o, 0.101,
      [](int64_t s) {
        if (s >= 10) return 0.001;
        return 0.001 + 0.1 * 0.5 * (1 + std::cos(kPi * double(s) / 10.0));
      },
      12);
}

TEST(LrSchedule, PolynomialDecaysWithItsPowerToTheEndLr) {
  LrScheduleOptions o;
  o.warmup_steps = 2;
  o.warmup_start_factor = 0.5;
  o.decay = LrDecay::kPolynomial;
  o.total_steps = 10;
  o.power = 2.0;
  o.end_lr = 0.01;
  expect_schedule(
      o, 1.0,
      [](int64_t s) {
        if (s < 2) return 0.5 + 0.5 * double(s + 1) / 2.0;
        if (s >= 10) return 0.01;
        const double left = 1.0 - double(s - 2) / 8.0;
        return 0.01 + 0.99 * left * left;
      },
      13);
  EXPECT_NEAR(scheduled_lr(o, 1.0, 6), 0.01 + 0.99 * 0.25, kTolerance);
  // Power 1 with the default end factor 0: a straight line to zero.
  o.power = 1.0;
  o.end_lr = -1.0;
  EXPECT_NEAR(scheduled_lr(o, 1.0, 6), 0.5, kTolerance);
  EXPECT_EQ(scheduled_lr(o, 1.0, 10), 0.0);
}

TEST(LrSchedule, WarmupAsLongAsTheRunEndsAtTheEndLr) {
  LrScheduleOptions o;
  o.warmup_steps = 4;
  o.decay = LrDecay::kCosine;
  o.total_steps = 4;
  o.end_factor = 0.5;
  EXPECT_NEAR(scheduled_lr(o, 1.0, 3), 1.0, kTolerance);
  EXPECT_NEAR(scheduled_lr(o, 1.0, 4), 0.5, kTolerance);
}

TEST(WarmupDecayLR, EachParamGroupFollowsTheScheduleFromItsOwnBaseLr) {
  auto a = torch::zeros({3}, torch::requires_grad());
  auto b = torch::zeros({2}, torch::requires_grad());
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{a},
                      std::make_unique<torch::optim::SGDOptions>(0.4));
  groups.emplace_back(std::vector<torch::Tensor>{b},
                      std::make_unique<torch::optim::SGDOptions>(0.01));
  torch::optim::SGD optimizer(std::move(groups), torch::optim::SGDOptions(1.0));
  LrScheduleOptions o;
  o.warmup_steps = 2;
  o.decay = LrDecay::kCosine;
  o.total_steps = 6;
  WarmupDecayLR scheduler(optimizer, o);
  EXPECT_EQ(scheduler.base_lrs(), (std::vector<double>{0.4, 0.01}));
  for (int64_t s = 0; s < 8; ++s) {
    const double part = s < 2 ? double(s + 1) / 2.0
                              : (s >= 6 ? 0.0 : 0.5 * (1 + std::cos(kPi * double(s - 2) / 4.0)));
    const std::vector<double> lrs = lrs_of(optimizer);
    EXPECT_NEAR(lrs[0], 0.4 * part, kTolerance) << "step " << s;
    EXPECT_NEAR(lrs[1], 0.01 * part, kTolerance) << "step " << s;
    EXPECT_EQ(scheduler.lr_at(s, 1), lrs[1]);
    optimizer.step();
    scheduler.step();
  }
  EXPECT_THROW(scheduler.lr_at(0, 2), InvalidArgument);
}

// ---- checkpoints

LrScheduleOptions warmup_cosine() {
  LrScheduleOptions o;
  o.warmup_steps = 3;
  o.warmup_start_factor = 0.1;
  o.decay = LrDecay::kCosine;
  o.total_steps = 12;
  o.end_factor = 0.05;
  return o;
}

// A small model with two param groups (different base LRs), its optimizer and scheduler.
struct ScheduledRun {
  explicit ScheduledRun(double lr0 = 0.2, double lr1 = 0.05) {
    model = torch::nn::Linear(4, 2);
    {  // from a formula, not torch's generator, which thread ranks share
      torch::NoGradGuard no_grad;
      model->weight.copy_(torch::linspace(-0.5, 0.6, 8).view({2, 4}));
      model->bias.fill_(0.1);
    }
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(
        std::vector<torch::Tensor>{model->weight},
        std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(lr0).momentum(0.9)));
    groups.emplace_back(
        std::vector<torch::Tensor>{model->bias},
        std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(lr1).momentum(0.9)));
    optimizer =
        std::make_unique<torch::optim::SGD>(std::move(groups), torch::optim::SGDOptions(1.0));
    scheduler = std::make_unique<WarmupDecayLR>(*optimizer, warmup_cosine());
    state.module = model.ptr().get();
    state.optimizer = optimizer.get();
    state.lr_scheduler = scheduler.get();
    state.rng = false;
  }
  // Steps from state.step up to `end`, returning the LRs each step ran at.
  std::vector<std::vector<double>> train_to(int64_t end) {
    std::vector<std::vector<double>> lrs;
    for (; state.step < end; ++state.step) {
      lrs.push_back(lrs_of(*optimizer));
      optimizer->zero_grad();
      const torch::Tensor x = torch::full({3, 4}, 0.1 * double(state.step + 1));
      model->forward(x).pow(2).sum().backward();
      optimizer->step();
      scheduler->step();
    }
    return lrs;
  }

  torch::nn::Linear model{nullptr};
  std::unique_ptr<torch::optim::SGD> optimizer;
  std::unique_ptr<WarmupDecayLR> scheduler;
  TrainingState state;
};

using Save = std::function<void(const std::string&, const TrainingState&)>;
using Load = std::function<bool(const std::string&, TrainingState&)>;

LoadOptions any_job() {
  LoadOptions o;
  o.any_job = true;
  return o;
}

// A run saved at step 5 and resumed (into an optimizer made with other LRs) runs every later
// step at the uninterrupted run's LRs, and ends with its parameters.
void expect_resume_continues(const std::string& path, const Save& save, const Load& load) {
  ScheduledRun whole;
  whole.train_to(5);
  save(path, whole.state);
  const std::vector<std::vector<double>> after = whole.train_to(14);

  ScheduledRun resumed(/*lr0=*/7.0, /*lr1=*/9.0);
  ASSERT_TRUE(load(path, resumed.state));
  EXPECT_EQ(resumed.state.step, 5);
  EXPECT_EQ(resumed.scheduler->step_count(), 5);
  EXPECT_EQ(resumed.scheduler->base_lrs(), (std::vector<double>{0.2, 0.05}));
  EXPECT_EQ(resumed.train_to(14), after);
  EXPECT_TRUE(torch::equal(resumed.model->weight, whole.model->weight));
}

TEST(LrSchedulerCheckpoint, PlainCheckpointResumesTheSchedule) {
  TempDir dir;
  expect_resume_continues(
      dir.file("plain.ckpt"),
      [](const std::string& p, const TrainingState& s) { save_checkpoint(p, s); },
      [](const std::string& p, TrainingState& s) { return load_checkpoint(p, s, any_job()); });
}

TEST(LrSchedulerCheckpoint, ShardedCheckpointResumesTheSchedule) {
  TempDir dir;
  expect_resume_continues(
      dir.file("sharded"),
      [](const std::string& p, const TrainingState& s) { save_sharded_checkpoint(p, s); },
      [](const std::string& p, TrainingState& s) {
        return load_sharded_checkpoint(p, s, any_job());
      });
}

TEST(LrSchedulerCheckpoint, GroupCheckpointsResumeTheScheduleOnEveryRank) {
  TempDir dir;
  for (const bool sharded : {false, true}) {
    const std::string path = dir.file(sharded ? "group-sharded" : "group.ckpt");
    run_with_groups(2, [&](int, std::shared_ptr<Group> group) {
      ScheduledRun whole;
      whole.train_to(4);
      if (sharded) {
        save_sharded_checkpoint(path, *group, whole.state);
      } else {
        save_checkpoint(path, *group, whole.state);
      }
      const auto after = whole.train_to(10);
      ScheduledRun resumed(1.0, 1.0);
      const bool loaded = sharded ? load_sharded_checkpoint(path, *group, resumed.state, any_job())
                                  : load_checkpoint(path, *group, resumed.state, any_job());
      ASSERT_TRUE(loaded);
      EXPECT_EQ(resumed.scheduler->step_count(), 4);
      EXPECT_EQ(resumed.train_to(10), after) << (sharded ? "sharded" : "plain");
    });
  }
}

// Note [Checkpoints without a scheduler]: the scheduler goes on at the file's step counter,
// with the base LRs it was made with.
void expect_old_checkpoint_loads(const std::string& path, const Save& save, const Load& load) {
  ScheduledRun old;
  old.train_to(6);
  old.state.lr_scheduler = nullptr;  // as a cohort before schedulers wrote it
  save(path, old.state);
  const auto after = old.train_to(12);

  ScheduledRun resumed;
  ASSERT_TRUE(load(path, resumed.state));
  EXPECT_EQ(resumed.scheduler->step_count(), 6);
  EXPECT_EQ(resumed.scheduler->base_lrs(), (std::vector<double>{0.2, 0.05}));
  EXPECT_EQ(resumed.train_to(12), after);
}

TEST(LrSchedulerCheckpoint, ACheckpointWithoutTheSchedulerGoesOnAtItsStep) {
  TempDir dir;
  expect_old_checkpoint_loads(
      dir.file("old.ckpt"),
      [](const std::string& p, const TrainingState& s) { save_checkpoint(p, s); },
      [](const std::string& p, TrainingState& s) { return load_checkpoint(p, s, any_job()); });
  expect_old_checkpoint_loads(
      dir.file("old-sharded"),
      [](const std::string& p, const TrainingState& s) { save_sharded_checkpoint(p, s); },
      [](const std::string& p, TrainingState& s) {
        return load_sharded_checkpoint(p, s, any_job());
      });
}

TEST(LrSchedulerCheckpoint, AnotherNumberOfParamGroupsIsRefusedBeforeAnythingChanges) {
  TempDir dir;
  const std::string path = dir.file("groups.ckpt");
  ScheduledRun saved;
  saved.train_to(3);
  TrainingState only_scheduler = saved.state;
  only_scheduler.optimizer = nullptr;
  save_checkpoint(path, only_scheduler);

  torch::nn::Linear other(4, 2);
  const torch::Tensor before = other->weight.clone();
  torch::optim::SGD one_group(other->parameters(), torch::optim::SGDOptions(0.1));
  WarmupDecayLR scheduler(one_group, warmup_cosine());
  TrainingState state;
  state.module = other.ptr().get();
  state.lr_scheduler = &scheduler;
  state.rng = false;
  try {
    load_checkpoint(path, state, any_job());
    ADD_FAILURE() << "loaded a scheduler of 2 groups into one of 1";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("2 base LRs"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(torch::equal(other->weight, before));
  EXPECT_EQ(scheduler.step_count(), 0);
}

// ---- bad options

void expect_rejected(const LrScheduleOptions& o, const std::string& words) {
  try {
    o.validate();
    ADD_FAILURE() << "accepted options that should name '" << words << "'";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
  auto weight = torch::zeros({1}, torch::requires_grad());
  torch::optim::SGD optimizer({weight}, torch::optim::SGDOptions(0.1));
  EXPECT_THROW(WarmupDecayLR(optimizer, o), InvalidArgument) << words;
  EXPECT_THROW(scheduled_lr(o, 0.1, 0), InvalidArgument) << words;
}

TEST(LrSchedule, BadOptionsAreRefusedWithWhatToDo) {
  LrScheduleOptions o;
  o.warmup_steps = -1;
  expect_rejected(o, "warmup_steps is -1");
  o = {};
  o.warmup_start_factor = 1.5;
  expect_rejected(o, "warmup_start_factor is 1.5");
  o = {};
  o.decay = LrDecay::kStep;
  expect_rejected(o, "step_size 0");
  o.step_size = 5;
  o.gamma = 0;
  expect_rejected(o, "gamma 0");
  o = {};
  o.decay = LrDecay::kCosine;
  expect_rejected(o, "total_steps 0");
  o.total_steps = 10;
  o.warmup_steps = 11;
  expect_rejected(o, "warmup_steps 11 > total_steps 10");
  o.warmup_steps = 2;
  o.end_factor = 2;
  expect_rejected(o, "end_factor 2");
  o = {};
  o.decay = LrDecay::kPolynomial;
  o.total_steps = 10;
  o.power = 0;
  expect_rejected(o, "power 0");

  LrScheduleOptions fine;
  EXPECT_THROW(scheduled_lr(fine, 0.1, -1), InvalidArgument);
  // A constant schedule needs no total: warm-up longer than any total is fine there.
  fine.warmup_steps = 100;
  EXPECT_NO_THROW(fine.validate());
}

TEST(WarmupDecayLR, LoadStateRefusesBadStates) {
  auto weight = torch::zeros({1}, torch::requires_grad());
  torch::optim::SGD optimizer({weight}, torch::optim::SGDOptions(0.1));
  WarmupDecayLR scheduler(optimizer, warmup_cosine());
  EXPECT_THROW(scheduler.load_state({-1, {0.1}}), InvalidArgument);
  EXPECT_THROW(scheduler.load_state({2, {0.1, 0.2}}), InvalidArgument);
  EXPECT_THROW(scheduler.load_state({2, {-0.1}}), InvalidArgument);
  scheduler.load_state({5, {0.3}});
  EXPECT_EQ(scheduler.step_count(), 5);
  EXPECT_EQ(lrs_of(optimizer)[0], scheduled_lr(warmup_cosine(), 0.3, 5));
}

}  // namespace lr_schedule_test
}  // namespace cohort::testing
