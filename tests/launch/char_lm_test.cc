// The character language model example (examples/char_lm) at 2 ranks under cohortrun on a tiny
// model for a few steps: it must finish, report a finite validation loss and memory for every
// rank, and learn (the training loss falls), under DDP, ZeRO and FSDP, whose sharded
// checkpoints resume under another strategy at another number of ranks, and under bfloat16
// autocast; missing data, an unknown strategy and float16 on a CPU must be clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/process.h"

namespace cohort {
namespace {

using nlohmann::json;

constexpr std::chrono::seconds kDeadline{120};
constexpr int kSteps = 24;

// 1 block of width 32 at context 32 (about 21,000 parameters): a few seconds on 2 cores. A short
// warm-up and a larger learning rate than the default so that a few steps show learning.
const std::string kTinyModel =
    " --layers 1 --width 32 --heads 2 --context 32 --dropout 0 --warmup-steps 4 --lr 3e-3 ";

struct ExampleRun {
  testing::ShellResult result;
  std::string dir;  // holds steps.jsonl and the checkpoint
};

// `steps` steps in all (a resumed run counts the steps before it); in `dir` when given (to
// resume from its checkpoint), else in a fresh directory.
ExampleRun run_example(int ranks, const std::string& extra = "", int steps = kSteps,
                       std::string dir = "") {
  if (dir.empty()) dir = testing::fresh_temp_dir("char_lm_" + std::to_string(ranks));
  const std::string command = COHORTRUN " --nproc-per-node " + std::to_string(ranks) + " " CHAR_LM +
                              kTinyModel + "--max-steps " + std::to_string(steps) +
                              " --log-every 8 --sample 40 --checkpoint " + dir + "/ck --metrics " +
                              dir + "/steps.jsonl " + extra;
  return {testing::run_shell(command, {"OMP_NUM_THREADS=1"}, kDeadline), dir};
}

std::vector<json> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
  return lines;
}

// The number after `label` in rank 0's final line; NaN when it is not there.
double figure_after(const std::string& output, const std::string& label) {
  const size_t final_line = output.find("[0] final: ");
  if (final_line == std::string::npos) return std::nan("");
  const size_t at = output.find(label, final_line);
  if (at == std::string::npos) return std::nan("");
  return std::strtod(output.c_str() + at + label.size(), nullptr);
}

// The mean of the last 4 steps' training losses in steps.jsonl, and the first step's: one step
// is noisy.
std::pair<double, double> first_and_last_loss(const std::vector<json>& steps) {
  double last = 0;
  for (size_t i = steps.size() - 4; i < steps.size(); ++i)
    last += steps[i]["loss"].get<double>() / 4;
  return {steps.front()["loss"].get<double>(), last};
}

TEST(CharLmExample, LearnsAtTwoRanksAndReportsValidationLossAndMemory) {
  const ExampleRun run = run_example(2);
  ASSERT_EQ(run.result.exit_code, 0) << run.result.output;
  const std::string& out = run.result.output;
  const double validation = figure_after(out, "validation loss ");
  const double baseline = figure_after(out, "unigram baseline ");
  EXPECT_TRUE(std::isfinite(validation) && validation > 0) << out;
  EXPECT_TRUE(std::isfinite(baseline) && baseline > 0) << out;
  EXPECT_NE(out.find("on 2 rank(s), " + std::to_string(kSteps) + " steps"), std::string::npos)
      << out;
  for (const char* rank : {"memory of rank 0: model state", "memory of rank 1: model state"})
    EXPECT_NE(out.find(rank), std::string::npos) << out;
  EXPECT_NE(out.find("[0] sample:"), std::string::npos) << out;

  const std::vector<json> steps = read_lines(run.dir + "/steps.jsonl");
  ASSERT_EQ(steps.size(), size_t(kSteps));
  EXPECT_EQ(steps.back()["step"].get<int>(), kSteps);
  EXPECT_FALSE(steps.back()["bucket_latency_ms"].empty()) << "2 ranks reduce gradients";
  const auto [first, last] = first_and_last_loss(steps);
  EXPECT_LT(last, first - 0.3) << "the training loss must fall: " << first << " -> " << last;
  // The library's schedule (cohort/torch/optim/lr_schedule.h): warm-up over 4 steps, then a
  // cosine to --min-lr-ratio 0.1 of --lr at the last step.
  for (int s = 0; s < kSteps; ++s) {
    const double done = double(s - 4) / double(kSteps - 4);
    const double lr =
        s < 4 ? 3e-3 * (s + 1) / 4.0 : 3e-3 * (0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * done)));
    EXPECT_NEAR(steps[size_t(s)]["lr"].get<double>(), lr, 1e-15) << "step " << s + 1;
  }
}

// The number after `label` on rank 0's memory line of rank `rank`; NaN when it is not there.
double memory_figure(const std::string& output, int rank, const std::string& label) {
  const size_t line = output.find("memory of rank " + std::to_string(rank) + ":");
  if (line == std::string::npos) return std::nan("");
  const size_t end = output.find('\n', line);
  const size_t at = output.find(label, line);
  if (at == std::string::npos || at > end) return std::nan("");
  return std::strtod(output.c_str() + at + label.size(), nullptr);
}

// --activation-checkpointing recomputes every block (4 here, with dropout: the generator is
// restored for the recomputation) and trains exactly the same model: every step's loss is equal
// to the digit; the steps' tensor memory is smaller.
void expect_checkpointing_trains_the_same(const std::string& strategy) {
  const std::string model =
      " --layers 4 --width 32 --heads 2 --context 32 --dropout 0.1 --batch-size 32 --skip-eval "
      "--sample 0 --max-steps 8 --strategy " +
      strategy;
  auto run = [&](const std::string& extra) {
    const std::string dir = testing::fresh_temp_dir("char_lm_ac");
    const std::string command = COHORTRUN " --nproc-per-node 2 " CHAR_LM + model +
                                " --checkpoint " + dir + "/ck --metrics " + dir + "/steps.jsonl " +
                                extra;
    return ExampleRun{testing::run_shell(command, {"OMP_NUM_THREADS=1"}, kDeadline), dir};
  };
  const ExampleRun plain = run(""), checkpointed = run("--activation-checkpointing");
  ASSERT_EQ(plain.result.exit_code, 0) << plain.result.output;
  ASSERT_EQ(checkpointed.result.exit_code, 0) << checkpointed.result.output;
  EXPECT_NE(checkpointed.result.output.find(
                "activation checkpointing: 4 region(s) recomputed in backward: blocks.0, "
                "blocks.1, blocks.2, blocks.3"),
            std::string::npos)
      << checkpointed.result.output;
  const std::vector<json> want = read_lines(plain.dir + "/steps.jsonl");
  const std::vector<json> got = read_lines(checkpointed.dir + "/steps.jsonl");
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_EQ(got[i]["loss"].get<double>(), want[i]["loss"].get<double>()) << "step " << i + 1;
  for (int rank : {0, 1}) {
    const double with = memory_figure(checkpointed.result.output, rank, "tensors of the steps ");
    const double without = memory_figure(plain.result.output, rank, "tensors of the steps ");
    EXPECT_LT(with, without) << "rank " << rank << ":\n"
                             << plain.result.output << "\n"
                             << checkpointed.result.output;
  }
}

TEST(CharLmExample, ActivationCheckpointingTrainsTheSameModelWithLessMemoryUnderDdp) {
  expect_checkpointing_trains_the_same("ddp");
}

TEST(CharLmExample, ActivationCheckpointingTrainsTheSameModelWithLessMemoryUnderFullShard) {
  expect_checkpointing_trains_the_same("full_shard");
}

// --diloco 4 --diloco-dtype bf16 (docs/compression.md, "DiLoCo"): nothing is communicated but
// every 4th step, which averages the whole model's change in bfloat16 (2 bytes a parameter).
// The planner's probe (--plan-out writes what it measured) runs as the training step does:
// under the run's bfloat16 autocast and with its activation checkpointing, each of which keeps
// less of the forward for backward than plain float32 does.
TEST(CharLmExample, ThePlannersProbeRunsUnderTheRunsPrecisionAndCheckpointing) {
  auto probed_activation_bytes = [](const std::string& extra) {
    const std::string dir = testing::fresh_temp_dir("char_lm_probe");
    const auto result = testing::run_shell(
        COHORTRUN " --nproc-per-node 1 " CHAR_LM
                  " --layers 2 --width 32 --heads 2 --context 32 --dropout 0 --max-steps 1 "
                  "--sample 0 --skip-eval --checkpoint '' --plan-out " +
            dir + "/job.json " + extra,
        {"OMP_NUM_THREADS=1"}, kDeadline);
    EXPECT_EQ(result.exit_code, 0) << result.output;
    std::ifstream in(dir + "/job.json");
    return json::parse(in).at("compute").at("activation_bytes").get<int64_t>();
  };
  const int64_t plain = probed_activation_bytes("");
  EXPECT_LT(probed_activation_bytes("--precision bf16"), plain * 9 / 10);
  EXPECT_LT(probed_activation_bytes("--activation-checkpointing"), plain * 9 / 10);
}

TEST(CharLmExample, DiLoCoInBfloat16SendsTheModelEveryFourSteps) {
  const ExampleRun run = run_example(2, "--diloco 4 --diloco-dtype bf16 --skip-eval", 8);
  ASSERT_EQ(run.result.exit_code, 0) << run.result.output;
  const std::string& out = run.result.output;
  const size_t model = out.find("context 32: ");  // "... context 32: N parameters"
  ASSERT_NE(model, std::string::npos) << out;
  const int64_t parameters = std::strtoll(out.c_str() + model + 12, nullptr, 10);
  ASSERT_GT(parameters, 0) << out;
  const std::vector<json> steps = read_lines(run.dir + "/steps.jsonl");
  ASSERT_EQ(steps.size(), size_t(8));
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i]["reduced_bytes"].get<int64_t>(), (i + 1) % 4 == 0 ? 2 * parameters : 0)
        << "step " << i + 1;
  }
}

// Checkpoints are written in the background by default and synchronously with
// --sync-checkpoint (docs/checkpoints.md, "Asynchronous saves"); both say what they cost, and
// both resume to the same training: the same loss two steps after the resume.
TEST(CharLmExample, BackgroundAndSynchronousCheckpointsResumeTheSameRun) {
  std::vector<double> losses;
  for (const std::string mode : {"", "--sync-checkpoint"}) {
    SCOPED_TRACE(mode.empty() ? "background" : mode);
    const ExampleRun run = run_example(2, "--checkpoint-every 4 --skip-eval " + mode, 8);
    ASSERT_EQ(run.result.exit_code, 0) << run.result.output;
    const std::string said = mode.empty() ? "] checkpoints: 3 written in the background in "
                                          : "] checkpoints: 3 written synchronously; ";
    EXPECT_NE(run.result.output.find(said), std::string::npos) << run.result.output;
    const ExampleRun resumed = run_example(1, "--resume --skip-eval " + mode, 10, run.dir);
    ASSERT_EQ(resumed.result.exit_code, 0) << resumed.result.output;
    EXPECT_NE(resumed.result.output.find("resumed from " + run.dir + "/ck at epoch 1, step 8"),
              std::string::npos)
        << resumed.result.output;
    losses.push_back(read_lines(run.dir + "/steps.jsonl").back()["loss"].get<double>());
  }
  EXPECT_EQ(losses[0], losses[1]);
}

// `strategy` at 2 ranks learns as DDP does and saves a sharded checkpoint (a directory: a
// manifest and one file per rank), which `resume_as` at 1 rank resumes. `memory_line`: what
// rank 1's memory line must say.
void expect_sharded_run_learns_and_resumes(const std::string& strategy,
                                           const std::string& resume_as,
                                           const std::string& memory_line) {
  const ExampleRun run = run_example(2, "--strategy " + strategy);
  ASSERT_EQ(run.result.exit_code, 0) << run.result.output;
  const std::string& out = run.result.output;
  EXPECT_NE(out.find("strategy " + strategy + ", precision fp32, on 2 rank(s)"), std::string::npos)
      << out;
  EXPECT_TRUE(std::isfinite(figure_after(out, "validation loss "))) << out;
  EXPECT_NE(out.find("memory of rank 0: model state"), std::string::npos) << out;
  EXPECT_NE(out.find(memory_line), std::string::npos) << out;
  const std::vector<json> steps = read_lines(run.dir + "/steps.jsonl");
  ASSERT_EQ(steps.size(), size_t(kSteps));
  const auto [first, last] = first_and_last_loss(steps);
  EXPECT_LT(last, first - 0.3) << "the training loss must fall: " << first << " -> " << last;
  const std::string files = testing::run_shell("ls " + run.dir + "/ck", {}, kDeadline).output;
  EXPECT_NE(files.find("manifest.ckpt"), std::string::npos) << files;
  EXPECT_NE(files.find("shard-00001-of-00002."), std::string::npos) << files;

  const ExampleRun resumed =
      run_example(1, "--strategy " + resume_as + " --resume --skip-eval", kSteps + 4, run.dir);
  ASSERT_EQ(resumed.result.exit_code, 0) << resumed.result.output;
  EXPECT_NE(resumed.result.output.find("resumed from " + run.dir + "/ck at epoch 1, step " +
                                       std::to_string(kSteps)),
            std::string::npos)
      << resumed.result.output;
  EXPECT_NE(resumed.result.output.find(std::to_string(kSteps + 4) + " steps"), std::string::npos)
      << resumed.result.output;
}

TEST(CharLmExample, Zero2LearnsAtTwoRanksAndZero1ResumesItsCheckpointAtOne) {
  expect_sharded_run_learns_and_resumes("zero2", "zero1", "memory of rank 1: model state");
}

// Under FSDP the memory line also shows the whole units (transformer blocks) held at once.
TEST(CharLmExample, FullShardLearnsAtTwoRanksAndZero2ResumesItsCheckpointAtOne) {
  expect_sharded_run_learns_and_resumes("full_shard", "zero2", "+ units gathered at once");
}

// bfloat16 autocast (docs/amp.md): the same tiny model learns as in float32.
TEST(CharLmExample, Bf16AutocastLearnsAtTwoRanks) {
  const ExampleRun run = run_example(2, "--precision bf16 --strategy zero2");
  ASSERT_EQ(run.result.exit_code, 0) << run.result.output;
  const std::string& out = run.result.output;
  EXPECT_NE(out.find("strategy zero2, precision bf16, on 2 rank(s)"), std::string::npos) << out;
  EXPECT_TRUE(std::isfinite(figure_after(out, "validation loss "))) << out;
  const std::vector<json> steps = read_lines(run.dir + "/steps.jsonl");
  ASSERT_EQ(steps.size(), size_t(kSteps));
  const auto [first, last] = first_and_last_loss(steps);
  EXPECT_LT(last, first - 0.3) << "the training loss must fall: " << first << " -> " << last;
}

// --master-weights under DDP: the model in bfloat16, AdamW over float32 masters, which the
// checkpoint holds (under the model's names), so that a float32 run at 1 rank resumes it.
TEST(CharLmExample, Bf16MasterWeightsLearnsAndFloat32ResumesItsCheckpoint) {
  const ExampleRun run = run_example(2, "--precision bf16 --master-weights");
  ASSERT_EQ(run.result.exit_code, 0) << run.result.output;
  const std::string& out = run.result.output;
  EXPECT_NE(out.find("precision bf16 with float32 master weights, on 2 rank(s)"), std::string::npos)
      << out;
  const std::vector<json> steps = read_lines(run.dir + "/steps.jsonl");
  ASSERT_EQ(steps.size(), size_t(kSteps));
  const auto [first, last] = first_and_last_loss(steps);
  EXPECT_LT(last, first - 0.3) << "the training loss must fall: " << first << " -> " << last;
  const ExampleRun resumed = run_example(1, "--resume --skip-eval", kSteps + 4, run.dir);
  ASSERT_EQ(resumed.result.exit_code, 0) << resumed.result.output;
  EXPECT_NE(resumed.result.output.find("at epoch 1, step " + std::to_string(kSteps)),
            std::string::npos)
      << resumed.result.output;
}

TEST(CharLmExampleErrors, AMissingDataDirectoryNamesThePathAndTheFix) {
  const ExampleRun run = run_example(1, "--data /nonexistent/fortunes");
  EXPECT_EQ(run.result.exit_code, 2) << run.result.output;
  EXPECT_NE(run.result.output.find("fortune directory '/nonexistent/fortunes' cannot be read"),
            std::string::npos)
      << run.result.output;
  EXPECT_NE(run.result.output.find("run ./scripts/setup"), std::string::npos) << run.result.output;
}

TEST(CharLmExampleErrors, AnUnknownStrategyIsAClearError) {
  const ExampleRun run = run_example(1, "--strategy zero3");
  EXPECT_NE(run.result.exit_code, 0) << run.result.output;  // CLI11's code for a bad value
  EXPECT_NE(run.result.output.find("zero3 not in"), std::string::npos) << run.result.output;
}

}  // namespace
}  // namespace cohort
