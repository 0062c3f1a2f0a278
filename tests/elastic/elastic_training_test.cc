// Elastic training end to end: members are processes (elastic_rank.cc) around a store this
// test hosts; faults are scripted at given steps and phases. After each, the parameters must
// equal a one-process replay of the committed steps, each at the world size it was committed
// at (tolerance 1e-5 absolute: DDP sums the ranks' gradients in another order than the
// replay), and every sample of the first epoch must have been trained on exactly once.
#include <gtest/gtest.h>
#include <signal.h>
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cohort/torch/amp/master_weights.h"
#include "cohort/torch/strategy/precision.h"
#include "elastic_job.h"
#include "elastic_model.h"
#include "support/etcd_cluster.h"
#include "support/process.h"
#include "support/test_support.h"

namespace cohort {
namespace {

using testing::ChildProcess;
using testing::ElasticJob;
using testing::EtcdCluster;
using testing::kDeadline;
using testing::kSteps;
using testing::read_params;

// What the members printed about committed steps: the world size of each, and how often
// each sample of epoch 0 was trained on.
struct Committed {
  std::map<int64_t, int> world_of_step;
  std::map<int64_t, std::vector<size_t>> trained_in_step;  // by every member that printed it
  std::string inconsistency;
};

// redo: a step may be committed again in a later generation (a resume from a checkpoint redoes
// the steps after it): the latest generation's commit of each step is the one that stands.
Committed read_commits(const std::string& output, bool redo = false) {
  Committed c;
  std::map<int64_t, uint64_t> generation_of_step;
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("commit ", 0) != 0) continue;
    std::istringstream in(line.substr(7));
    int64_t step = 0;
    int world = 0;
    uint64_t generation = 0, epoch = 0;
    std::string indices;
    in >> step >> world >> generation >> epoch >> indices;
    auto [g, first] = generation_of_step.emplace(step, generation);
    if (!first && g->second != generation) {
      if (!redo) {
        c.inconsistency = "step " + std::to_string(step) + " committed in two generations";
      } else if (generation < g->second) {
        continue;
      } else {  // a redo: the earlier commit of this step no longer stands
        g->second = generation;
        c.world_of_step.erase(step);
        c.trained_in_step.erase(step);
      }
    }
    auto [it, fresh] = c.world_of_step.emplace(step, world);
    if (!fresh && it->second != world) {
      c.inconsistency = "step " + std::to_string(step) + " committed at two world sizes";
    }
    std::istringstream list(indices);
    std::string index;
    while (std::getline(list, index, ',')) c.trained_in_step[step].push_back(std::stoul(index));
  }
  return c;
}

struct Replay {
  std::vector<float> parameters;
  std::map<int64_t, std::set<size_t>> samples_of_step;
};

torch::Tensor rows_of(const std::vector<size_t>& indices) {
  return torch::tensor(std::vector<int64_t>(indices.begin(), indices.end()), torch::kInt64);
}

// What DDP's average makes of the ranks' gradients: each rank's mean-loss gradient, computed
// on its own (under bfloat16 autocast its backward rounds in bfloat16 as a rank's does, which a
// backward through the mean of the losses would not), then the mean over the ranks in float32.
void backward_as_ranks_do(torch::nn::SequentialImpl& model, const testing::ElasticData& data,
                          const std::vector<std::vector<size_t>>& shares,
                          const PrecisionOptions& precision) {
  std::vector<torch::Tensor> sum;
  for (const auto& share : shares) {
    model.zero_grad();
    torch::Tensor loss;
    {
      const auto autocast = forward_scope(precision);
      loss = testing::elastic_loss(model, data, rows_of(share));
    }
    loss.backward();
    const auto parameters = model.parameters();
    for (size_t i = 0; i < parameters.size(); ++i) {
      if (sum.size() <= i) sum.push_back(torch::zeros_like(parameters[i]));
      sum[i] += parameters[i].grad();
    }
  }
  const auto parameters = model.parameters();
  for (size_t i = 0; i < parameters.size(); ++i) {
    parameters[i].mutable_grad() = sum[i] / static_cast<double>(shares.size());
  }
}

// The mean over the ranks of their mean losses from one forward over every rank's samples:
// the global batch a SyncBatchNorm
// normalizes over (a tail step may give the ranks different counts).
torch::Tensor global_batch_loss(torch::nn::SequentialImpl& model, const testing::ElasticData& data,
                                const std::vector<std::vector<size_t>>& shares) {
  std::vector<size_t> all;
  for (const auto& share : shares) all.insert(all.end(), share.begin(), share.end());
  const auto rows = rows_of(all);
  const auto per_sample = torch::nn::functional::cross_entropy(
      model.forward(data.inputs.index_select(0, rows)), data.targets.index_select(0, rows),
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  torch::Tensor sum = torch::zeros({});
  int64_t at = 0;
  for (const auto& share : shares) {
    const auto n = static_cast<int64_t>(share.size());
    sum = sum + per_sample.narrow(0, at, n).mean();
    at += n;
  }
  return sum / static_cast<double>(shares.size());
}

// How the members' model trains (elastic_rank's --sync-bn and --bf16).
struct ReplayModel {
  bool batch_norm = false;  // a BatchNorm, over each step's global batch (SyncBatchNorm)
  bool bf16 = false;        // forwards under bfloat16 autocast
  // A bfloat16 model under bfloat16 autocast whose SGD steps float32 masters (amp::
  // MasterWeights), which start as the model's bfloat16 rounding (ddp's) or, where
  // `masters_start_whole`, as the float32 parameters themselves (FSDP's float32 shards).
  bool master_weights = false;
  bool masters_start_whole = false;
};

// The committed steps replayed on one process: each step's gradient is the mean over its
// ranks of each rank's mean loss gradient (backward_as_ranks_do). With `schedule`, step s runs at
// scheduled_lr(schedule, 0.05, s). `how.batch_norm`: one forward over the step's samples of
// every rank (the global batch SyncBatchNorm normalizes over).
Replay replay(const std::map<int64_t, int>& world_of_step, size_t batch_per_rank,
              const std::optional<optim::LrScheduleOptions>& schedule = std::nullopt,
              const ReplayModel& how = {}) {
  Replay out;
  auto model = testing::make_elastic_model(16, how.batch_norm);
  std::optional<amp::MasterWeights> master;
  if (how.master_weights) {
    const auto whole = model->parameters();
    std::vector<torch::Tensor> float32;
    for (const auto& p : whole) float32.push_back(p.detach().clone());
    master.emplace(model, torch::kBFloat16);
    if (how.masters_start_whole) {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < float32.size(); ++i) master->parameters()[i].copy_(float32[i]);
      master->loaded_into_masters();
    }
  }
  torch::optim::SGD optimizer(master ? master->parameters() : model->parameters(),
                              torch::optim::SGDOptions(0.05).momentum(0.9));
  const auto data = testing::elastic_data();
  ElasticSampler sampler(data.inputs.size(0), testing::elastic_sampler_options(batch_per_rank, 0));
  for (const auto& [step, world] : world_of_step) {
    sampler.skip_small_tail(world);
    if (schedule) {
      optimizer.param_groups()[0].options().set_lr(optim::scheduled_lr(*schedule, 0.05, step));
    }
    if (master) {
      master->zero_grad();
    } else {
      optimizer.zero_grad();
    }
    std::vector<std::vector<size_t>> shares;
    for (int r = 0; r < world; ++r) {
      shares.push_back(sampler.step_indices(r, world));
      out.samples_of_step[step].insert(shares.back().begin(), shares.back().end());
    }
    const auto precision =
        precision_named(how.bf16 || how.master_weights ? "bf16" : "fp32", how.master_weights);
    if (how.batch_norm) {
      torch::Tensor loss;
      {
        const auto autocast = forward_scope(precision);
        loss = global_batch_loss(*model, data, shares);
      }
      loss.backward();
    } else {
      backward_as_ranks_do(*model, data, shares, precision);
    }
    if (master) {
      master->step(optimizer);
    } else {
      optimizer.step();
    }
    sampler.advance(world);
  }
  for (const auto& p : master ? master->parameters() : model->parameters()) {
    auto flat = p.detach().contiguous();
    out.parameters.insert(out.parameters.end(), flat.data_ptr<float>(),
                          flat.data_ptr<float>() + flat.numel());
  }
  return out;
}

// Every step committed once, at one world size; the parameters equal the replay's; what each
// member trained on in a committed step is that step's share of the replay's samples, and no
// sample is trained on twice in a step (a member that died after the vote printed nothing of
// its last step, so coverage is the replay's: ElasticSamplerTest checks it).
void expect_replay_parity(const std::string& output, const std::string& out_path,
                          size_t batch_per_rank = 4, bool redo = false,
                          const std::optional<optim::LrScheduleOptions>& schedule = std::nullopt,
                          const ReplayModel& how = {}) {
  const Committed c = read_commits(output, redo);
  ASSERT_TRUE(c.inconsistency.empty()) << c.inconsistency << "\n" << output;
  ASSERT_EQ(c.world_of_step.size(), static_cast<size_t>(kSteps)) << output;
  ASSERT_EQ(c.world_of_step.rbegin()->first, kSteps - 1);
  const Replay reference = replay(c.world_of_step, batch_per_rank, schedule, how);
  const auto& expected = reference.parameters;
  const auto got = read_params(out_path);
  ASSERT_EQ(got.size(), expected.size()) << output;
  float worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - expected[i]));
  EXPECT_LT(worst, 1e-5f) << "parameters differ from the replay of the committed steps";
  for (const auto& [step, trained] : c.trained_in_step) {
    const auto& samples = reference.samples_of_step.at(step);
    std::set<size_t> once;
    for (size_t index : trained) {
      EXPECT_TRUE(samples.count(index)) << "step " << step << " trained on sample " << index
                                        << ", which the replay's step does not take";
      EXPECT_TRUE(once.insert(index).second) << "step " << step << " trained twice on " << index;
    }
  }
}

void expect_replay_parity(ElasticJob& job, size_t batch_per_rank = 4, bool redo = false) {
  expect_replay_parity(job.output(), job.out_path(), batch_per_rank, redo);
}

// The commit lines of `output` for the steps before `step`.
std::string commits_before(const std::string& output, int64_t step) {
  std::string kept;
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("commit ", 0) == 0 && std::stoll(line.substr(7)) < step) kept += line + "\n";
  }
  return kept;
}

std::set<int> worlds_seen(const ElasticJob& job) {
  std::set<int> worlds;
  for (const auto& [step, world] : read_commits(job.output()).world_of_step) worlds.insert(world);
  return worlds;
}

TEST(ElasticTraining, WithoutFaultsEqualsTheReplay) {
  ElasticJob job(3, 2);
  job.start_all({});
  EXPECT_EQ(job.wait_all(), (std::vector<int>{0, 0, 0})) << job.output();
  expect_replay_parity(job);
  EXPECT_EQ(worlds_seen(job), (std::set<int>{3}));
}

class KilledMember : public ::testing::TestWithParam<const char*> {};

// One member of three is killed at step 6 in a phase; the two others redo that step and go on.
TEST_P(KilledMember, SurvivorsGoOnAndEqualTheReplay) {
  ElasticJob job(3, 2);
  job.start_all({"--kill", std::string("1:6:") + GetParam()});
  const auto codes = job.wait_all();
  EXPECT_EQ(codes[0], 0) << job.output();
  EXPECT_EQ(codes[1], 128 + SIGKILL) << job.output();
  EXPECT_EQ(codes[2], 0) << job.output();
  expect_replay_parity(job);
  EXPECT_EQ(worlds_seen(job), (std::set<int>{2, 3}));
  EXPECT_NE(job.output().find("rank 1 left"), std::string::npos) << job.output();
}

INSTANTIATE_TEST_SUITE_P(Phases, KilledMember,
                         ::testing::Values("forward", "backward", "allreduce", "optimizer"));

// Note [Following the generation]: the SyncBatchNorm layers reduce over each generation's
// group, so a kill costs one step and each step normalizes over its global batch (the replay's
// one forward over every rank's samples); they once reduced over the first generation's group
// and redid the step in generation after generation.
TEST(ElasticFollowsTheGeneration, SyncBatchNormThroughAKillEqualsTheReplay) {
  ElasticJob job(3, 2);
  job.start_all({"--sync-bn", "--kill", "1:6:backward"});
  const auto codes = job.wait_all();
  EXPECT_EQ(codes, (std::vector<int>{0, 128 + SIGKILL, 0})) << job.output();
  ReplayModel batch_norm;
  batch_norm.batch_norm = true;
  expect_replay_parity(job.output(), job.out_path(), 4, false, std::nullopt, batch_norm);
  EXPECT_EQ(worlds_seen(job), (std::set<int>{2, 3}));
}

// ElasticTrainerOptions::precision: the members' forwards run under bfloat16 autocast
// (ElasticTrainer::forward_scope) through a kill, as the replay's do.
TEST(ElasticFollowsTheGeneration, Bf16AutocastThroughAKillEqualsTheReplay) {
  ElasticJob job(3, 2);
  job.start_all({"--bf16", "--kill", "2:9:backward"});
  const auto codes = job.wait_all();
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 128 + SIGKILL})) << job.output();
  ReplayModel bf16;
  bf16.bf16 = true;
  expect_replay_parity(job.output(), job.out_path(), 4, false, std::nullopt, bf16);
}

// Note [Elastic master weights]: a bfloat16 model over float32 masters through a kill and a
// rejoin, under ddp (the trainer's amp::MasterWeights: the joiner takes rank 0's masters, not
// the rounding of its model) and FULL_SHARD (the float32 shards are the masters, carried by the
// buddy copies and the piece exchange): every member ends with the same masters bitwise, and
// they equal the replay's. Two members, then one: a bfloat16 sum of two gradients rounds alike
// in any order, where three would sum in the order of each strategy's reduction.
class MasterWeightsElastic : public ::testing::TestWithParam<const char*> {};

TEST_P(MasterWeightsElastic, ThroughAKillAndARejoinEqualTheReplay) {
  ElasticJob job(2, 1);
  const std::vector<std::string> how = {"--master-weights", "--strategy", GetParam()};
  std::vector<std::string> faults = how;
  faults.insert(faults.end(), {"--kill", "1:5:backward", "--await-step", "8", "--await-size", "2"});
  job.start_all(faults);
  ASSERT_EQ(job.member(1).wait(kDeadline), 128 + SIGKILL) << job.output();
  job.start(1, how, /*joiner=*/true);
  const auto codes = job.wait_all();
  EXPECT_EQ(codes[0], 0) << job.output();
  EXPECT_EQ(codes[2], 0) << job.output();
  EXPECT_NE(job.output().find("1 rank joined"), std::string::npos) << job.output();
  EXPECT_EQ(worlds_seen(job), (std::set<int>{1, 2}));
  ReplayModel master;
  master.master_weights = true;
  master.masters_start_whole = std::string(GetParam()) != "ddp";
  expect_replay_parity(job.output(), job.out_path(), 4, false, std::nullopt, master);
  std::set<std::string> masters;
  std::istringstream lines(job.output());
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("masters ", 0) == 0) masters.insert(line);
  }
  EXPECT_EQ(masters.size(), 1u) << "the members end with different masters:\n" << job.output();
}

INSTANTIATE_TEST_SUITE_P(Strategies, MasterWeightsElastic, ::testing::Values("ddp", "full_shard"));

// Note [Failures that do not heal]: a step that uses the first generation's group fails in
// every later generation with every member alive; the survivors end the job with its cause
// after three such generations instead of forming generations forever.
TEST(ElasticFollowsTheGeneration, AStepFailingWithEveryMemberAliveEndsTheJobWithItsCause) {
  ElasticJob job(3, 2);
  job.start_all({"--stale-group", "--kill", "1:6:forward"});
  const auto codes = job.wait_all();
  EXPECT_EQ(codes, (std::vector<int>{3, 128 + SIGKILL, 3})) << job.output();
  EXPECT_NE(job.output().find("failed in 3 generations in a row with every member alive"),
            std::string::npos)
      << job.output();
}

TEST(ElasticTraining, TwoFailuresInARow) {
  ElasticJob job(4, 2);
  job.start_all({"--kill", "1:4:backward", "--kill", "3:5:allreduce"});
  const auto codes = job.wait_all();
  EXPECT_EQ(codes[0], 0) << job.output();
  EXPECT_EQ(codes[2], 0) << job.output();
  expect_replay_parity(job);
  EXPECT_EQ(worlds_seen(job), (std::set<int>{2, 3, 4}));
}

TEST(ElasticTraining, ANewMemberJoinsAtAStepBoundaryAndIsHealed) {
  ElasticJob job(2, 1);
  job.start_all({"--await-step", "4", "--await-size", "3"});
  ASSERT_NE(job.member(0).wait_for_line("commit 0 ", kDeadline), "") << job.output();
  job.start(2, {}, /*joiner=*/true);
  EXPECT_EQ(job.wait_all(), (std::vector<int>{0, 0, 0})) << job.output();
  expect_replay_parity(job);
  EXPECT_EQ(worlds_seen(job), (std::set<int>{2, 3}));
  EXPECT_NE(job.output().find("1 rank joined"), std::string::npos) << job.output();
}

TEST(ElasticTraining, AKilledMemberRestartedJoinsAgain) {
  ElasticJob job(3, 2);
  job.start_all({"--kill", "2:5:backward", "--await-step", "8", "--await-size", "3"});
  ASSERT_EQ(job.member(2).wait(kDeadline), 128 + SIGKILL) << job.output();
  job.start(2, {}, /*joiner=*/true);
  const auto codes = job.wait_all();
  EXPECT_EQ(codes[0], 0) << job.output();
  EXPECT_EQ(codes[3], 0) << job.output();
  expect_replay_parity(job);
  // The restarted member may arrive while the survivors form generation 2 (then it joins that
  // one: "rank 2 left; 1 rank joined"), or after they committed steps at 2.
  EXPECT_NE(job.output().find("rank 2 left"), std::string::npos) << job.output();
  EXPECT_NE(job.output().find("1 rank joined"), std::string::npos) << job.output();
}

TEST(ElasticTraining, OverTcpWithoutSharedMemory) {
  ElasticJob job(3, 2, {"COHORT_SHM=0"});
  job.start_all({"--kill", "2:7:allreduce"});
  const auto codes = job.wait_all();
  EXPECT_EQ(codes[0], 0) << job.output();
  EXPECT_EQ(codes[1], 0) << job.output();
  expect_replay_parity(job);
  EXPECT_EQ(worlds_seen(job), (std::set<int>{2, 3}));
}

// A member stopped past the collective timeout is left behind; when it is continued it finds
// the job moved on without it, and is refused instead of being merged with its stale state.
TEST(ElasticTraining, AStoppedMemberIsDeclaredDeadAndRefusedWhenItComesBack) {
  ElasticJob job(3, 2, {"COHORT_TIMEOUT_S=3"});
  job.start_all({"--kill", "1:5:stop"});
  ASSERT_NE(job.member(1).wait_for_line("fault stop", kDeadline), "") << job.output();
  EXPECT_EQ(job.member(0).wait(kDeadline), 0) << job.output();
  EXPECT_EQ(job.member(2).wait(kDeadline), 0) << job.output();
  job.member(1).kill(SIGCONT);
  EXPECT_EQ(job.member(1).wait(kDeadline), 3) << job.output();
  EXPECT_NE(job.member(1).output().find("declared dead"), std::string::npos) << job.output();
  expect_replay_parity(job);
}

TEST(ElasticTraining, AJoinerWithAnotherModelIsRefusedAndTheJobGoesOn) {
  ElasticJob job(2, 1);
  job.start_all({"--await-step", "4", "--await-size", "3"});
  ASSERT_NE(job.member(0).wait_for_line("commit 0 ", kDeadline), "") << job.output();
  job.start(2, {"--hidden", "12"}, /*joiner=*/true);
  ASSERT_EQ(job.member(2).wait(kDeadline), 3) << job.output();
  EXPECT_NE(job.member(2).output().find("another model"), std::string::npos) << job.output();
  EXPECT_EQ(job.wait_all(), (std::vector<int>{0, 0, 3})) << job.output();
  expect_replay_parity(job);
}

// A joiner with another optimizer passes the rendezvous (the fingerprint is the model's) and
// fails while it is being healed (rank 0's optimizer state is SGD's): the members meet its loss
// inside the healing, form the next generation without it, and go on with nothing lost.
TEST(ElasticTraining, AJoinerThatFailsWhileBeingHealedIsLeftBehind) {
  ElasticJob job(2, 1);
  job.start_all({"--await-step", "4", "--await-size", "3"});
  ASSERT_NE(job.member(0).wait_for_line("commit 0 ", kDeadline), "") << job.output();
  auto& joiner = job.start(2, {"--adam"}, /*joiner=*/true);
  EXPECT_EQ(joiner.wait(kDeadline), 1) << job.output();
  EXPECT_NE(joiner.output().find("optimizer is Adam but rank 0's is SGD"), std::string::npos)
      << job.output();
  EXPECT_EQ(job.member(0).wait(kDeadline), 0) << job.output();
  EXPECT_EQ(job.member(1).wait(kDeadline), 0) << job.output();
  expect_replay_parity(job);
  EXPECT_EQ(worlds_seen(job), (std::set<int>{2}));
  EXPECT_NE(job.member(0).output().find("rank 2 left"), std::string::npos) << job.output();
}

// Rank 0 dies while it heals a joiner (after the parameters and counters, in the optimizer
// state): the joiner holds a mix of its own state and rank 0's, so the next generation heals it
// again, from rank 1, instead of taking its state for the job's.
TEST(ElasticTraining, TheSourceDyingWhileItHealsAJoinerLosesNothing) {
  ElasticJob job(2, 1);
  job.start_all(
      {"--opaque-optimizer", "--kill", "0:4:heal", "--await-step", "4", "--await-size", "3"});
  ASSERT_NE(job.member(0).wait_for_line("commit 0 ", kDeadline), "") << job.output();
  job.start(2, {"--opaque-optimizer"}, /*joiner=*/true);
  EXPECT_EQ(job.wait_all(), (std::vector<int>{128 + SIGKILL, 0, 0})) << job.output();
  EXPECT_NE(job.member(0).output().find("fault heal"), std::string::npos) << job.output();
  expect_replay_parity(job);
  EXPECT_EQ(worlds_seen(job), (std::set<int>{2}));
  EXPECT_NE(job.member(1).output().find("rank 0 left"), std::string::npos) << job.output();
}

// Note [Lost state]: the only member holding the state dies while it heals a joiner, which then
// holds a mix; instead of failing every restart with "no member holds the job's state", the
// joiner resumes the last checkpoint (written every 3 steps), redoes the steps after it and ends
// the job. (When the joiner is admitted, and so which step is lost, depends on timing.)
TEST(ElasticTraining, WhenNoMemberHoldsTheStateTheJobResumesItsCheckpoint) {
  ElasticJob job(1, 1, {"COHORT_JOB_ID=lost-state"});  // as cohortrun sets it for every member
  const std::vector<std::string> saving = {"--opaque-optimizer", "--checkpoint-dir",
                                           job.checkpoint_dir(), "--checkpoint-every", "3"};
  std::vector<std::string> first = saving;
  first.insert(first.end(), {"--kill", "0:4:heal", "--await-step", "4", "--await-size", "2"});
  job.start_all(first);
  ASSERT_NE(job.member(0).wait_for_line("commit 3 ", kDeadline), "") << job.output();
  job.start(1, saving, /*joiner=*/true);
  EXPECT_EQ(job.wait_all(), (std::vector<int>{128 + SIGKILL, 0})) << job.output();
  std::smatch said;
  const std::string output = job.output();
  ASSERT_TRUE(std::regex_search(output, said,
                                std::regex("the job's state of step (\\d+) .*: resumed from the "
                                           "checkpoint of step (\\d+) .*; (\\d+) committed step")))
      << output;
  const int lost = std::stoi(said[1]), resumed = std::stoi(said[2]), redone = std::stoi(said[3]);
  EXPECT_GE(lost, 4) << output;
  EXPECT_EQ(resumed % 3, 0) << output;
  EXPECT_GE(resumed, 3) << output;
  EXPECT_EQ(redone, lost - resumed) << output;
  expect_replay_parity(job.output(), job.out_path(), 4, /*redo=*/true);
}

// ---- The job's store on etcd (COHORT_RDZV_BACKEND=etcd; cohort/comm/etcd_store.h)

std::vector<std::string> etcd_env(const EtcdCluster& cluster, const std::string& job) {
  return {"COHORT_RDZV_BACKEND=etcd", "COHORT_RDZV_ENDPOINTS=" + cluster.endpoints(),
          "COHORT_JOB_ID=" + job};
}

// With the store on etcd no member hosts it: losing rank 0 (whose node would host cohortrun's
// store) costs the job what losing any member does, and losing one of etcd's three members
// costs nothing. The etcd member dies while the job holds before step 8 for a joiner, so that
// the joiner's arrival, its healing and rank 0's death (step 12) all go through the two left.
// Every step is committed once and the parameters equal the replay's.
TEST(ElasticOnEtcd, AKilledRankZeroAndAKilledEtcdMemberLoseNothing) {
  EtcdCluster cluster;
  ElasticJob job(3, 2, etcd_env(cluster, "etcd-kills"));
  job.start_all({"--kill", "0:12:backward", "--await-step", "8", "--await-size", "4"});
  ASSERT_NE(job.member(1).wait_for_line("commit 7 ", kDeadline), "") << job.output();
  cluster.kill(0);
  job.start(3, {}, /*joiner=*/true);
  EXPECT_EQ(job.wait_all(), (std::vector<int>{128 + SIGKILL, 0, 0, 0})) << job.output();
  expect_replay_parity(job);
  EXPECT_EQ(worlds_seen(job), (std::set<int>{3, 4}));
}

// etcd's quorum lost while the job needs its store (here: holding for a joiner): every member
// ends with an error naming etcd within the group's timeout (COHORT_TIMEOUT_S bounds a wait for
// etcd), instead of hanging or blaming a peer.
TEST(ElasticOnEtcd, LosingEtcdsQuorumEndsEveryMemberWithAnErrorNamingEtcd) {
  EtcdCluster cluster;
  std::vector<std::string> env = etcd_env(cluster, "etcd-quorum");
  env.push_back("COHORT_TIMEOUT_S=4");
  ElasticJob job(2, 1, env);
  job.start_all({"--await-step", "3", "--await-size", "3"});
  ASSERT_NE(job.member(0).wait_for_line("commit 2 ", kDeadline), "") << job.output();
  cluster.kill(0);
  cluster.kill(1);
  const auto codes = job.wait_all();
  for (size_t m = 0; m < codes.size(); ++m) {
    EXPECT_NE(codes[m], 0) << job.output();
    EXPECT_NE(codes[m], -1) << "member " << m << " still ran at the deadline\n" << job.output();
    EXPECT_NE(job.member(m).output().find("etcd"), std::string::npos) << job.output();
    EXPECT_NE(job.member(m).output().find("quorum"), std::string::npos) << job.output();
  }
}

TEST(ElasticTraining, AJoinerWithAnotherJobsTokenCannotReachTheStore) {
  ElasticJob job(2, 1);
  job.start_all({});
  auto& stranger = job.start(2, {}, /*joiner=*/true, "another-token");
  EXPECT_EQ(stranger.wait(kDeadline), 1) << job.output();
  EXPECT_NE(stranger.output().find("token"), std::string::npos) << stranger.output();
  EXPECT_EQ(job.member(0).wait(kDeadline), 0) << job.output();
  EXPECT_EQ(job.member(1).wait(kDeadline), 0) << job.output();
}

TEST(ElasticTraining, AMemberArrivingAfterTheJobFinishedIsRefused) {
  ElasticJob job(2, 1);
  job.start_all({});
  EXPECT_EQ(job.wait_all(), (std::vector<int>{0, 0})) << job.output();
  auto& late = job.start(2, {}, /*joiner=*/true);
  EXPECT_EQ(late.wait(kDeadline), 3) << late.output();
  EXPECT_NE(late.output().find("the job has finished"), std::string::npos) << late.output();
}

// init_elastic refuses a store that a rank would host: its death would end the job.
TEST(ElasticTraining, AStoreHostedByARankIsRefused) {
  ChildProcess member(
      {ELASTIC_RANK},
      {"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(testing::free_port()), "RANK=0",
       "WORLD_SIZE=2", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=2", "OMP_NUM_THREADS=1"});
  EXPECT_EQ(member.wait(kDeadline), 1) << member.output();
  EXPECT_NE(member.output().find("must be hosted by the launcher"), std::string::npos)
      << member.output();
}

TEST(ElasticTraining, BelowTheMinimumTheSurvivorsEndWithANamedError) {
  ElasticJob job(2, 2, {"COHORT_ELASTIC_TIMEOUT_S=2"});
  job.start_all({"--kill", "1:3:backward"});
  EXPECT_EQ(job.member(0).wait(kDeadline), 3) << job.output();
  EXPECT_NE(job.member(0).output().find("needs at least 2"), std::string::npos) << job.output();
}

// ---- Sharded strategies (ZeRO-1, ZeRO-2, FULL_SHARD) with buddy copies (Note [Buddy copies]):
// the same faults, the same bar (the replay of the committed steps, 1e-5 absolute).

class ShardedElastic : public ::testing::TestWithParam<const char*> {
 protected:
  std::vector<std::string> args(std::vector<std::string> more) const {
    more.insert(more.begin(), {"--strategy", GetParam()});
    return more;
  }
};

// A job that ends at step 12 (rank 0 died at step 7, so its successor wrote the checkpoint of
// step 10); a second job, at another world size, resumes it at its start: steps 10 and 11 are
// redone, and its parameters equal the replay of steps 0..9 of the first and 10..29 of its own.
class ResumedElastic : public ::testing::TestWithParam<std::string> {};

TEST_P(ResumedElastic, ANewJobResumesTheCheckpointAndEqualsTheReplay) {
  ElasticJob first(3, 2);
  first.start_all({"--strategy", GetParam(), "--kill", "0:7:backward", "--stop-after", "12",
                   "--checkpoint-dir", first.checkpoint_dir(), "--checkpoint-every", "5"});
  EXPECT_EQ(first.wait_all(), (std::vector<int>{128 + SIGKILL, 0, 0})) << first.output();
  ElasticJob second(2, 2);
  second.start_all(
      {"--strategy", GetParam(), "--checkpoint-dir", first.checkpoint_dir(), "--resume"});
  EXPECT_EQ(second.wait_all(), (std::vector<int>{0, 0})) << second.output();
  EXPECT_EQ(commits_before(second.output(), 10), "") << second.output();
  expect_replay_parity(commits_before(first.output(), 10) + second.output(), second.out_path());
}

// Issue 58: a ZeRO-2 job's sharded checkpoint, offered to a kDdp job, is read whole and the job
// goes on from its step as the uninterrupted run would (it used to start from step 0 unsaid).
TEST(ResumedElasticAcrossStrategies, ADdpJobResumesAZero2CheckpointAndEqualsTheReplay) {
  ElasticJob first(2, 2);
  first.start_all({"--strategy", "zero2", "--stop-after", "10", "--checkpoint-dir",
                   first.checkpoint_dir(), "--checkpoint-every", "5"});
  EXPECT_EQ(first.wait_all(), (std::vector<int>{0, 0})) << first.output();
  ElasticJob second(2, 2);
  second.start_all({"--strategy", "ddp", "--checkpoint-dir", first.checkpoint_dir(), "--resume"});
  EXPECT_EQ(second.wait_all(), (std::vector<int>{0, 0})) << second.output();
  EXPECT_EQ(commits_before(second.output(), 10), "") << second.output();
  expect_replay_parity(commits_before(first.output(), 10) + second.output(), second.out_path());
}

// Under DiLoCo a sharded checkpoint lacks the outer state: refused by name on every member, not
// resumed without it.
TEST(ResumedElasticAcrossStrategies, ADiLoCoJobRefusesAShardedCheckpointByName) {
  ElasticJob first(2, 2);
  first.start_all({"--strategy", "zero2", "--stop-after", "5", "--checkpoint-dir",
                   first.checkpoint_dir(), "--checkpoint-every", "5"});
  EXPECT_EQ(first.wait_all(), (std::vector<int>{0, 0})) << first.output();
  ElasticJob second(2, 2);
  second.start_all(
      {"--strategy", "diloco", "--checkpoint-dir", first.checkpoint_dir(), "--resume"});
  EXPECT_EQ(second.wait_all(), (std::vector<int>{1, 1})) << second.output();
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_NE(second.member(i).output().find("holds a sharded strategy's checkpoint, which has "
                                             "no 'diloco' state"),
              std::string::npos)
        << second.output();
  }
}

// The reverse is not re-sliced into shards: every member refuses it by name.
TEST(ResumedElasticAcrossStrategies, AShardedJobRefusesADdpCheckpointByName) {
  ElasticJob first(2, 2);
  first.start_all(
      {"--stop-after", "5", "--checkpoint-dir", first.checkpoint_dir(), "--checkpoint-every", "5"});
  EXPECT_EQ(first.wait_all(), (std::vector<int>{0, 0})) << first.output();
  ElasticJob second(2, 2);
  second.start_all({"--strategy", "zero2", "--checkpoint-dir", first.checkpoint_dir(), "--resume"});
  EXPECT_EQ(second.wait_all(), (std::vector<int>{1, 1})) << second.output();
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_NE(second.member(i).output().find("holds a checkpoint written under kDdp"),
              std::string::npos)
        << second.output();
  }
}

// Without --resume the second job may not take another job's checkpoint: CheckpointError on
// every member, which names the way on.
TEST(ResumedElasticDdp, AnotherJobsCheckpointIsRefusedWithoutResume) {
  ElasticJob first(2, 2);
  first.start_all(
      {"--stop-after", "5", "--checkpoint-dir", first.checkpoint_dir(), "--checkpoint-every", "5"});
  EXPECT_EQ(first.wait_all(), (std::vector<int>{0, 0})) << first.output();
  ElasticJob second(2, 2);
  second.start_all({"--checkpoint-dir", first.checkpoint_dir()});
  EXPECT_EQ(second.wait_all(), (std::vector<int>{1, 1})) << second.output();
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_NE(second.member(i).output().find("another job"), std::string::npos) << second.output();
    // The way on, as an ElasticTrainer user writes it.
    EXPECT_NE(second.member(i).output().find("ElasticTrainerOptions::resume.any_job = true"),
              std::string::npos)
        << second.output();
  }
  // Issue 58: a restarted member would refuse it again; it is refused at once, with the
  // reason, instead of waiting out the join timeout (300 s) for a generation that never forms.
  const auto start = std::chrono::steady_clock::now();
  ChildProcess& restarted = second.start(0, {"--checkpoint-dir", first.checkpoint_dir()});
  EXPECT_EQ(restarted.wait(kDeadline), 3) << restarted.output();  // elastic_rank: ElasticError
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  EXPECT_NE(restarted.output().find("cannot join: the job ended on an error that a new member "
                                    "would meet again: "),
            std::string::npos)
      << restarted.output();
  EXPECT_NE(restarted.output().find("another job"), std::string::npos) << restarted.output();
}

// A checkpoint whose sampler file is gone cannot be resumed where it stopped: every member
// ends with the error that names the file, none starts from step 0 with the old weights.
TEST(ResumedElasticDdp, ACheckpointWithoutItsSamplerFileIsRefusedOnEveryMember) {
  ElasticJob first(2, 2);
  first.start_all(
      {"--stop-after", "5", "--checkpoint-dir", first.checkpoint_dir(), "--checkpoint-every", "5"});
  EXPECT_EQ(first.wait_all(), (std::vector<int>{0, 0})) << first.output();
  ASSERT_EQ(std::remove((first.checkpoint_dir() + "/elastic-5.txt").c_str()), 0);
  ElasticJob second(2, 2);
  second.start_all({"--checkpoint-dir", first.checkpoint_dir(), "--resume"});
  EXPECT_EQ(second.wait_all(), (std::vector<int>{1, 1})) << second.output();
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_NE(second.member(i).output().find("has no readable " + first.checkpoint_dir() +
                                             "/elastic-5.txt"),
              std::string::npos)
        << second.output();
  }
}

INSTANTIATE_TEST_SUITE_P(Strategies, ResumedElastic,
                         ::testing::Values("ddp", "zero1", "zero2", "full_shard"));

// ---- The end of a run (Note [Elastic end]): a member lost after the last step, or during the
// final evaluation, costs the end what it costs a step; the survivors finish it.

// The "end ..." lines of the members that saw the end through: each member's final parameters'
// sum, which must be the same on every one of them.
std::vector<std::string> end_lines(const std::string& output) {
  std::vector<std::string> lines;
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("end seen at step ", 0) == 0) lines.push_back(line);
  }
  return lines;
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
  return count;
}

class ElasticEnd : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(ElasticEnd, TheSurvivorsFinishTheSynchronizationAndTheEvaluation) {
  const auto [strategy, phase] = GetParam();
  ElasticJob job(3, 2);
  job.start_all(
      {"--strategy", strategy, "--end", "--kill", "1:" + std::to_string(kSteps) + ":" + phase});
  EXPECT_EQ(job.wait_all(), (std::vector<int>{0, 128 + SIGKILL, 0})) << job.output();
  EXPECT_EQ(count_of(job.output(), "evaluated "), 1u) << job.output();
  EXPECT_NE(job.output().find(" on 2 rank(s)"), std::string::npos) << job.output();
  const auto ends = end_lines(job.output());
  ASSERT_EQ(ends.size(), 2u) << job.output();
  EXPECT_EQ(ends[0], ends[1]) << "the survivors end with different parameters";
  // DiLoCo's final synchronization is a committed step of its own.
  const int64_t last = kSteps + (std::string(strategy) == "diloco" ? 1 : 0);
  EXPECT_EQ(ends[0].rfind("end seen at step " + std::to_string(last) + ",", 0), 0u) << ends[0];
}

// ElasticTrainer::between_steps: a member lost during an evaluation between steps is met by the
// next step's recovery; the survivors' evaluation returns false instead of ending them, and the
// training equals the replay.
TEST(ElasticBetweenSteps, AMemberLostDuringAnEvaluationCostsTheNextStepOnly) {
  ElasticJob job(3, 2);
  job.start_all({"--evaluate-every", "10", "--kill", "1:10:evaluate"});
  EXPECT_EQ(job.wait_all(), (std::vector<int>{0, 128 + SIGKILL, 0})) << job.output();
  expect_replay_parity(job);
  EXPECT_EQ(count_of(job.output(), "evaluation at step 10: a member was lost"), 2u) << job.output();
  EXPECT_EQ(count_of(job.output(), "evaluation at step 20: done"), 2u) << job.output();
}

INSTANTIATE_TEST_SUITE_P(Phases, ElasticEnd,
                         ::testing::Values(std::make_pair("diloco", "end"),
                                           std::make_pair("ddp", "evaluate")),
                         [](const auto& phase) {
                           return std::string(phase.param.first) + "_" + phase.param.second;
                         });

// Note [Elastic saves]: a full disk fails the periodic saves on every member alike; the job
// goes on, the checkpoint of step 5 stays whole with its sampler file (no empty or temporary
// file beside it), and a new job resumes from it.
class FullDisk : public ::testing::TestWithParam<const char*> {};

TEST_P(FullDisk, PeriodicSavesAreSkippedOnEveryMemberAndThePreviousCheckpointStays) {
  // Over TCP: the file-size limit that stands for the full disk would also refuse the shared
  // memory of the next generation's group.
  ElasticJob job(3, 2, {"COHORT_SHM=0"});
  job.start_all({"--strategy", GetParam(), "--checkpoint-dir", job.checkpoint_dir(),
                 "--checkpoint-every", "5", "--fill-disk-at", "7", "--kill", "0:12:backward"});
  EXPECT_EQ(job.wait_all(), (std::vector<int>{128 + SIGKILL, 0, 0})) << job.output();
  // Saves at 10 (generation 1), 15, 20, 25 and 30 (generation 2) failed; both survivors
  // counted each.
  EXPECT_EQ(count_of(job.member(1).output(), "failed saves 5"), 1u) << job.output();
  EXPECT_EQ(count_of(job.member(2).output(), "failed saves 5"), 1u) << job.output();
  EXPECT_NE(job.output().find("the previous checkpoint there is kept"), std::string::npos)
      << job.output();
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(job.checkpoint_dir())) {
    const std::string name = entry.path().filename().string();
    EXPECT_GT(std::filesystem::file_size(entry.path()), 0u) << name << " is empty";
    EXPECT_EQ(name.find(".tmp"), std::string::npos) << name << " was left behind";
    if (name.rfind("elastic-", 0) == 0) names.push_back(name);
  }
  EXPECT_EQ(names, std::vector<std::string>{"elastic-5.txt"});
  ElasticJob second(2, 2);
  second.start_all({"--strategy", GetParam(), "--checkpoint-dir", job.checkpoint_dir(), "--resume",
                    "--stop-after", "6"});
  EXPECT_EQ(second.wait_all(), (std::vector<int>{0, 0})) << second.output();
  EXPECT_EQ(commits_before(second.output(), 5), "") << second.output();
  EXPECT_NE(second.output().find("commit 5 "), std::string::npos) << second.output();
}

INSTANTIATE_TEST_SUITE_P(Strategies, FullDisk, ::testing::Values("ddp", "zero2"));

// ElasticTrainerOptions::lr_schedule is part of the job's state: its position is the committed
// step count, so the survivors redo a step at that step's LR, and a job that resumes a
// checkpoint goes on where the schedule was (a WarmupDecayLR in each process would restart at
// step 0). The replay trains step s at the schedule's LR of step s.
TEST(ElasticSchedule, SurvivorsOfAKillTrainEachStepAtItsScheduledRate) {
  ElasticJob job(3, 2);
  job.start_all({"--lr-warmup", "8", "--kill", "1:6:backward"});
  EXPECT_EQ(job.wait_all(), (std::vector<int>{0, 128 + SIGKILL, 0})) << job.output();
  expect_replay_parity(job.output(), job.out_path(), 4, false,
                       testing::elastic_lr_schedule(8, kSteps));
}

TEST(ElasticSchedule, AResumedShardedJobGoesOnWhereTheScheduleWas) {
  ElasticJob first(3, 2);
  first.start_all({"--strategy", "zero2", "--lr-warmup", "8", "--stop-after", "12",
                   "--checkpoint-dir", first.checkpoint_dir(), "--checkpoint-every", "5"});
  EXPECT_EQ(first.wait_all(), (std::vector<int>{0, 0, 0})) << first.output();
  ElasticJob second(3, 2);  // and a member lost at step 20: healed from its buddy copy
  second.start_all({"--strategy", "zero2", "--lr-warmup", "8", "--checkpoint-dir",
                    first.checkpoint_dir(), "--resume", "--kill", "1:20:backward"});
  EXPECT_EQ(second.wait_all(), (std::vector<int>{0, 128 + SIGKILL, 0})) << second.output();
  expect_replay_parity(commits_before(first.output(), 10) + second.output(), second.out_path(), 4,
                       false, testing::elastic_lr_schedule(8, kSteps));
}

TEST_P(ShardedElastic, WithoutFaultsEqualsTheReplay) {
  ElasticJob job(3, 2);
  job.start_all(args({}));
  EXPECT_EQ(job.wait_all(), (std::vector<int>{0, 0, 0})) << job.output();
  expect_replay_parity(job);
}

TEST_P(ShardedElastic, AMemberKilledInBackwardIsHealedFromTheBuddyCopies) {
  ElasticJob job(3, 2);
  job.start_all(args({"--kill", "1:6:backward"}));
  const auto codes = job.wait_all();
  EXPECT_EQ(codes, (std::vector<int>{0, 128 + SIGKILL, 0})) << job.output();
  expect_replay_parity(job);
  EXPECT_EQ(worlds_seen(job), (std::set<int>{2, 3}));
}

// Killed inside its optimizer step, after the vote: the step is committed, and the dead
// member's ranges at that step exist only in its successor's buddy copy.
TEST_P(ShardedElastic, AMemberKilledInTheOptimizerStepIsHealedFromTheBuddyCopies) {
  ElasticJob job(3, 2);
  job.start_all(args({"--kill", "1:6:optimizer"}));
  const auto codes = job.wait_all();
  EXPECT_EQ(codes, (std::vector<int>{0, 128 + SIGKILL, 0})) << job.output();
  expect_replay_parity(job);
  EXPECT_EQ(worlds_seen(job), (std::set<int>{2, 3}));
}

// Refreshed every 3 steps (at steps 3 and 6), the copy of rank 1's ranges is its refresh of
// step 6 and the log of steps 6 and 7 when rank 1 dies in step 7's optimizer step.
TEST_P(ShardedElastic, AMemberKilledAfterARefreshIsHealedFromTheRefreshAndTheLog) {
  ElasticJob job(3, 2);
  job.start_all(args({"--kill", "1:7:optimizer", "--buddy-refresh-steps", "3"}));
  const auto codes = job.wait_all();
  EXPECT_EQ(codes, (std::vector<int>{0, 128 + SIGKILL, 0})) << job.output();
  expect_replay_parity(job);
  EXPECT_EQ(worlds_seen(job), (std::set<int>{2, 3}));
}

TEST_P(ShardedElastic, AKilledMemberRestartedJoinsAgain) {
  ElasticJob job(3, 2);
  job.start_all(args({"--kill", "2:5:backward", "--await-step", "8", "--await-size", "3"}));
  ASSERT_EQ(job.member(2).wait(kDeadline), 128 + SIGKILL) << job.output();
  job.start(2, args({}), /*joiner=*/true);
  const auto codes = job.wait_all();
  EXPECT_EQ(codes[0], 0) << job.output();
  EXPECT_EQ(codes[3], 0) << job.output();
  expect_replay_parity(job);
  EXPECT_NE(job.output().find("1 rank joined"), std::string::npos) << job.output();
}

TEST_P(ShardedElastic, TwoFailuresInARow) {
  ElasticJob job(4, 2);
  job.start_all(args({"--kill", "1:4:backward", "--kill", "3:5:allreduce"}));
  const auto codes = job.wait_all();
  EXPECT_EQ(codes[0], 0) << job.output();
  EXPECT_EQ(codes[2], 0) << job.output();
  expect_replay_parity(job);
  EXPECT_EQ(worlds_seen(job), (std::set<int>{2, 3, 4}));
}

// Without buddy copies a dead member's shards are lost: the survivors resume from the
// trainer's checkpoint of step 5 and redo steps 5..7 at the new world size.
TEST_P(ShardedElastic, WithoutBuddyCopiesALossResumesFromTheCheckpoint) {
  ElasticJob job(3, 2);
  job.start_all(args({"--kill", "1:8:backward", "--no-buddy", "--checkpoint-dir",
                      job.checkpoint_dir(), "--checkpoint-every", "5"}));
  const auto codes = job.wait_all();
  EXPECT_EQ(codes, (std::vector<int>{0, 128 + SIGKILL, 0})) << job.output();
  EXPECT_NE(job.output().find("rank 1's shards were lost (buddy copies are off): resumed from "
                              "the checkpoint of step 5"),
            std::string::npos)
      << job.output();
  expect_replay_parity(job, 4, /*redo=*/true);
  const Committed c = read_commits(job.output(), /*redo=*/true);
  EXPECT_EQ(c.world_of_step.at(4), 3);
  EXPECT_EQ(c.world_of_step.at(5), 2) << "step 5 was not redone after the resume";
}

TEST_P(ShardedElastic, WithoutBuddyCopiesOrCheckpointALossIsANamedError) {
  ElasticJob job(3, 2);
  job.start_all(args({"--kill", "1:6:backward", "--no-buddy"}));
  const auto codes = job.wait_all();
  EXPECT_EQ(codes, (std::vector<int>{3, 128 + SIGKILL, 3})) << job.output();
  EXPECT_NE(job.member(0).output().find("the shards of rank 1 of generation 1 were lost"),
            std::string::npos)
      << job.output();
}

// HYBRID_SHARD on 2 simulated nodes of 2 (COHORT_NODE_ID): each node holds a whole replica, so
// no buddy copies are needed for a node's loss. Five processes on a loaded CI machine: a
// survivor slower than the settle time to reach the next generation would be left out (and
// with it the only copy of its ranges that is left), so they wait for one longer.
constexpr const char* kPatientSettle = "COHORT_ELASTIC_SETTLE_MS=5000";
std::vector<std::string> hybrid_args(std::vector<std::string> more) {
  more.insert(more.begin(), {"--strategy", "hybrid_shard", "--ranks-per-node", "2", "--no-buddy"});
  return more;
}

// Node 1 (ranks 2 and 3) dies whole after the vote of step 6: node 0's replica holds every
// range at the committed step, and the job goes on there.
TEST(HybridShardElastic, ANodeLostWholeLosesNothing) {
  ElasticJob job(4, 2, {kPatientSettle});
  job.start_all(hybrid_args({"--kill", "2:6:optimizer", "--kill", "3:6:optimizer"}));
  EXPECT_EQ(job.wait_all(), (std::vector<int>{0, 0, 128 + SIGKILL, 128 + SIGKILL})) << job.output();
  expect_replay_parity(job);
  EXPECT_EQ(worlds_seen(job), (std::set<int>{2, 4}));
}

// One member of node 1 dies: node 0 still holds every range, the nodes are uneven (2 and 1),
// so that generation shards over all 3 (FULL_SHARD); the restarted member rejoins on node 1 and
// HYBRID_SHARD is back at 4.
TEST(HybridShardElastic, AMemberLostFromANodeShardsOverAllUntilItRejoins) {
  ElasticJob job(4, 2, {kPatientSettle});
  job.start_all(hybrid_args({"--kill", "3:5:backward", "--await-step", "10", "--await-size", "4"}));
  ASSERT_EQ(job.member(3).wait(kDeadline), 128 + SIGKILL) << job.output();
  // Restarted once the survivors formed their uneven generation (else it may join that one).
  ASSERT_NE(job.member(0).wait_for_line("membership generation 2: rank 3 left; 3 ranks", kDeadline),
            "")
      << job.output();
  job.start(3, hybrid_args({}), /*joiner=*/true);
  const auto codes = job.wait_all();
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 0, 128 + SIGKILL, 0})) << job.output();
  expect_replay_parity(job);
  EXPECT_EQ(worlds_seen(job), (std::set<int>{3, 4}));
  EXPECT_NE(job.output().find("its nodes hold 1 to 2 members"), std::string::npos) << job.output();
}

INSTANTIATE_TEST_SUITE_P(Strategies, ShardedElastic,
                         ::testing::Values("zero1", "zero2", "full_shard"));

}  // namespace
}  // namespace cohort
