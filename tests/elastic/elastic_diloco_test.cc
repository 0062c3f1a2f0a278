// ElasticTrainer with DiLoCo (ElasticTrainerOptions::diloco) end to end (Note [Elastic DiLoCo]):
// members are processes (elastic_rank.cc --strategy diloco) that print every step they commit, with
// the samples of their inner step. The test replays those lines on one process: each member's own
// model and inner SGD, and at each synchronization the outer Nesterov SGD over the average of the
// pseudo-gradients of the members that committed it and took its inner step. A
// member lost between synchronizations takes its progress with it; a joiner starts from the
// outer parameters with a fresh inner optimizer. The parameters rank 0 writes at the end
// must equal its model in the replay (tolerance 1e-5 absolute: the allreduce adds the
// pseudo-gradients in another order).
#include <gtest/gtest.h>
#include <signal.h>
#include <torch/torch.h>

#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "elastic_job.h"
#include "elastic_model.h"

namespace cohort {
namespace {

using testing::ElasticJob;
using testing::kDeadline;
using testing::kSteps;
constexpr int64_t kInnerSteps = 4;

// One "diloco" line: a member's commit of a step.
struct CommitLine {
  int member = 0;
  int rank = 0;
  int world = 0;
  bool trained = false;  // took the step's inner step (else: healed while it was redone)
  std::vector<int64_t> indices;
};

struct Printed {
  std::map<int64_t, std::vector<CommitLine>> by_step;
  std::vector<int64_t> fragment_of;
};

Printed read_lines(const std::string& output) {
  Printed p;
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream in(line);
    std::string kind;
    in >> kind;
    if (kind == "fragments" && p.fragment_of.empty()) {
      std::string list, f;
      in >> list;
      std::istringstream items(list);
      while (std::getline(items, f, ',')) p.fragment_of.push_back(std::stoll(f));
    }
    if (kind != "diloco") continue;
    CommitLine c;
    int64_t step = 0;
    std::string inner_world, indices;
    in >> step >> c.member >> c.rank >> c.world >> inner_world >> indices;
    c.trained = inner_world != "-";
    std::istringstream list(indices);
    std::string index;
    while (c.trained && std::getline(list, index, ',')) c.indices.push_back(std::stoll(index));
    p.by_step[step].push_back(c);
  }
  return p;
}

// The replay: each member's model and inner optimizer, and the outer state.
class DiLoCoReplay {
 public:
  explicit DiLoCoReplay(std::vector<int64_t> fragment_of) : fragment_of_(std::move(fragment_of)) {
    auto model = testing::make_elastic_model();
    for (const auto& p : model->parameters()) outer_.push_back(p.detach().clone().requires_grad_());
    outer_optimizer_ = std::make_unique<torch::optim::SGD>(
        outer_, torch::optim::SGDOptions(0.7).momentum(0.9).nesterov(true));
  }

  void run_step(int64_t step, const std::vector<CommitLine>& lines) {
    for (const auto& line : lines) {
      if (!locals_.count(line.member)) join(line.member);
    }
    for (const auto& line : lines) {
      if (!line.trained) continue;
      Local& local = locals_.at(line.member);
      local.optimizer->zero_grad();
      testing::elastic_loss(*local.model, data_, torch::tensor(line.indices)).backward();
      local.optimizer->step();
    }
    std::set<int64_t> due;
    for (int64_t f = 0; f < fragments(); ++f) {
      if ((step + 1) % kInnerSteps == (f * kInnerSteps / fragments()) % kInnerSteps) due.insert(f);
    }
    if (!due.empty()) synchronize(due, lines);
  }

  std::vector<float> parameters_of(int member) const {
    std::vector<float> out;
    for (const auto& p : locals_.at(member).model->parameters()) {
      auto flat = p.detach().contiguous();
      out.insert(out.end(), flat.data_ptr<float>(), flat.data_ptr<float>() + flat.numel());
    }
    return out;
  }

 private:
  struct Local {
    torch::nn::Sequential model;
    std::unique_ptr<torch::optim::SGD> optimizer;
  };

  int64_t fragments() const { return fragment_of_.empty() ? 1 : fragment_of_.back() + 1; }

  // A member that joins: the outer parameters, a fresh inner optimizer.
  void join(int member) {
    Local local{testing::make_elastic_model(), nullptr};
    torch::NoGradGuard no_grad;
    auto parameters = local.model->parameters();
    for (size_t i = 0; i < parameters.size(); ++i) parameters[i].copy_(outer_[i]);
    local.optimizer = std::make_unique<torch::optim::SGD>(
        parameters, torch::optim::SGDOptions(0.05).momentum(0.9));
    locals_.emplace(member, std::move(local));
  }

  // The rounds of the fragments `due`, over the members that committed the step: the average of
  // the pseudo-gradients of those that took its inner step (not a joiner healed while it was
  // redone); then every member takes the outer values of
  // those fragments, and members that did not commit it are gone.
  void synchronize(const std::set<int64_t>& due, const std::vector<CommitLine>& lines) {
    std::set<int> members, with_progress;
    for (const auto& line : lines) {
      members.insert(line.member);
      if (line.trained) with_progress.insert(line.member);
    }
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < outer_.size(); ++i) {
      if (!due.count(fragment_of_.empty() ? 0 : fragment_of_[i])) continue;
      auto sum = torch::zeros_like(outer_[i]);
      for (int m : with_progress) sum += outer_[i] - locals_.at(m).model->parameters()[i];
      outer_[i].mutable_grad() = sum / static_cast<double>(with_progress.size());
    }
    outer_optimizer_->step();
    for (auto& p : outer_) p.mutable_grad() = torch::Tensor();
    for (auto it = locals_.begin(); it != locals_.end();) {
      it = members.count(it->first) ? std::next(it) : locals_.erase(it);
    }
    for (auto& [member, local] : locals_) {
      auto parameters = local.model->parameters();
      for (size_t i = 0; i < parameters.size(); ++i) {
        if (due.count(fragment_of_.empty() ? 0 : fragment_of_[i])) parameters[i].copy_(outer_[i]);
      }
    }
  }

  std::vector<int64_t> fragment_of_;
  testing::ElasticData data_ = testing::elastic_data();
  std::vector<torch::Tensor> outer_;
  std::unique_ptr<torch::optim::SGD> outer_optimizer_;
  std::map<int, Local> locals_;
};

struct Outcome {
  Printed printed;
  std::set<int> worlds;  // at which steps were committed
};

// Every step committed, each at one world size by all its members; rank 0's parameters (in
// `out_path`) equal its model in the replay.
Outcome expect_diloco_replay_parity(const std::string& output, const std::string& out_path) {
  Outcome o{read_lines(output), {}};
  EXPECT_EQ(o.printed.by_step.size(), static_cast<size_t>(kSteps)) << output;
  DiLoCoReplay replay(o.printed.fragment_of);
  int last_rank0 = -1;
  for (const auto& [step, lines] : o.printed.by_step) {
    for (const auto& line : lines) {
      EXPECT_EQ(line.world, lines.front().world) << "step " << step << "\n" << output;
      if (line.rank == 0) last_rank0 = line.member;
    }
    o.worlds.insert(lines.front().world);
    replay.run_step(step, lines);
  }
  const auto expected = replay.parameters_of(last_rank0);
  const auto got = testing::read_params(out_path);
  EXPECT_EQ(got.size(), expected.size()) << output;
  float worst = 0;
  for (size_t i = 0; i < std::min(got.size(), expected.size()); ++i) {
    worst = std::max(worst, std::abs(got[i] - expected[i]));
  }
  EXPECT_LT(worst, 1e-5f) << "parameters differ from the replay\n" << output;
  return o;
}

Outcome expect_diloco_replay_parity(ElasticJob& job) {
  return expect_diloco_replay_parity(job.output(), job.out_path());
}

std::vector<std::string> diloco_args(std::vector<std::string> more = {}) {
  std::vector<std::string> args = {"--strategy", "diloco", "--diloco-steps",
                                   std::to_string(kInnerSteps)};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

TEST(ElasticDiLoCo, WithoutFaultsEqualsTheReplay) {
  ElasticJob job(3, 2);
  job.start_all(diloco_args());
  EXPECT_EQ(job.wait_all(), (std::vector<int>{0, 0, 0})) << job.output();
  EXPECT_EQ(expect_diloco_replay_parity(job).worlds, (std::set<int>{3}));
}

TEST(ElasticDiLoCo, StreamingFragmentsEqualTheReplay) {
  ElasticJob job(2, 1);
  job.start_all(diloco_args({"--diloco-fragments", "2"}));
  EXPECT_EQ(job.wait_all(), (std::vector<int>{0, 0})) << job.output();
  const Outcome o = expect_diloco_replay_parity(job);
  EXPECT_EQ(o.printed.fragment_of, (std::vector<int64_t>{0, 1, 1, 1})) << job.output();
}

// Member 2 dies at step 5, between the synchronizations after steps 3 and 7: the survivors
// notice at step 7's, redo it without it (its progress since step 3 is gone) and go on.
TEST(ElasticDiLoCo, AMemberLostBetweenSynchronizationsTakesOnlyItsProgress) {
  ElasticJob job(3, 2);
  job.start_all(diloco_args({"--kill", "2:5:forward"}));
  const auto codes = job.wait_all();
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 128 + SIGKILL})) << job.output();
  const Outcome o = expect_diloco_replay_parity(job);
  EXPECT_EQ(o.worlds, (std::set<int>{2, 3}));
  for (const auto& line : o.printed.by_step.at(7)) {
    EXPECT_TRUE(line.trained && line.world == 2) << job.output();  // its inner step kept
  }
  EXPECT_NE(job.output().find("rank 2 left"), std::string::npos) << job.output();
}

TEST(ElasticDiLoCo, ANewMemberJoinsWithTheOuterState) {
  ElasticJob job(2, 1);
  job.start_all(diloco_args({"--await-step", "4", "--await-size", "3"}));
  ASSERT_NE(job.member(0).wait_for_line("diloco 0 ", kDeadline), "") << job.output();
  job.start(2, diloco_args(), /*joiner=*/true);
  EXPECT_EQ(job.wait_all(), (std::vector<int>{0, 0, 0})) << job.output();
  EXPECT_EQ(expect_diloco_replay_parity(job).worlds, (std::set<int>{2, 3}));
  EXPECT_NE(job.output().find("1 rank joined"), std::string::npos) << job.output();
}

// Member 2 dies at step 5; the survivors hold before step 7 until its restart waits in the
// store, so the generation that redoes step 7's synchronization heals it first: it has no
// progress to add, and the average is the survivors'.
TEST(ElasticDiLoCo, AJoinerHealedWhileASynchronizationIsRedoneAddsNoProgress) {
  ElasticJob job(3, 2);
  job.start_all(diloco_args({"--kill", "2:5:forward", "--await-step", "7", "--await-size", "4"}));
  ASSERT_EQ(job.member(2).wait(kDeadline), 128 + SIGKILL) << job.output();
  job.start(2, diloco_args(), /*joiner=*/true);
  const auto codes = job.wait_all();
  EXPECT_EQ(codes[0], 0) << job.output();
  EXPECT_EQ(codes[1], 0) << job.output();
  EXPECT_EQ(codes[3], 0) << job.output();
  const Outcome o = expect_diloco_replay_parity(job);
  bool healed_in_the_redo = false;
  for (const auto& line : o.printed.by_step.at(7)) healed_in_the_redo |= !line.trained;
  EXPECT_TRUE(healed_in_the_redo) << job.output();
}

// The trainer's checkpoint of step 8 (right after a synchronization) holds the outer state as a
// part; a job of one member resumes it (rank 0's model and inner optimizer, the outer state)
// and goes on as member 0 of the first job would have.
TEST(ElasticDiLoCo, ANewJobResumesTheOuterStateFromTheCheckpoint) {
  ElasticJob first(3, 2);
  first.start_all(diloco_args({"--stop-after", "8", "--checkpoint-dir", first.checkpoint_dir(),
                               "--checkpoint-every", "8"}));
  ASSERT_EQ(first.wait_all(), (std::vector<int>{0, 0, 0})) << first.output();
  ElasticJob second(1, 1);
  second.start_all(diloco_args({"--checkpoint-dir", first.checkpoint_dir(), "--resume"}));
  ASSERT_EQ(second.wait_all(), (std::vector<int>{0})) << second.output();
  expect_diloco_replay_parity(first.output() + second.output(), second.out_path());
}

}  // namespace
}  // namespace cohort
