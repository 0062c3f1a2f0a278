// DiLoCo and Streaming DiLoCo against a one-process replay: W workers simulated one after the
// other in one process, each with its own model copy and inner optimizer, the pseudo-gradients
// averaged and the outer optimizer stepped at the same steps as the schedule says (fragment f
// of F at the steps s with s mod H = f H / F). Every rank's parameters must match its replayed
// worker's after every step, |got - want| <= 1e-6 + 1e-5 |want| (float32; the allreduce sums in
// another order than the replay). With H = 1 and an outer SGD of learning rate 1 the ranks
// must match one process training on the whole batch with SGD (DDP's result).
#include "cohort/torch/local_sgd/diloco.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "cohort/core/error.h"
#include "cohort/torch/checkpoint/checkpoint.h"
#include "cohort/torch/compress/powersgd.h"
#include "cohort/torch/compress/quantization.h"
#include "cohort/torch/ddp/comm_hook.h"
#include "cohort/torch/ddp/ddp.h"
#include "ddp_harness.h"
#include "support/process.h"

namespace cohort::testing {
namespace diloco_test {

constexpr int kBatch = 4;  // samples per rank per step

// 10 -> 16 -> 4: parameters of 160, 16, 64 and 4 elements, drawn from a generator of their own
// (the ranks are threads, which share the default one).
torch::nn::Sequential make_model() {
  torch::nn::Sequential model = layers({10, 16, 4});
  auto generator = at::make_generator<at::CPUGeneratorImpl>(3);
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters()) p.copy_(torch::randn(p.sizes(), generator) * 0.3);
  return model;
}

struct Batch {
  torch::Tensor inputs, targets;
};

Batch batch_of(int step, int rank) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(1000 * step + rank);
  return {torch::randn({kBatch, 10}, generator), torch::randint(0, 4, {kBatch}, generator)};
}

torch::Tensor loss_of(torch::nn::Sequential& model, const Batch& batch) {
  return torch::nn::functional::cross_entropy(model->forward(batch.inputs), batch.targets);
}

enum class Inner { kSgd, kAdamW };

std::unique_ptr<torch::optim::Optimizer> inner_optimizer(Inner kind,
                                                         std::vector<torch::Tensor> parameters) {
  if (kind == Inner::kAdamW)
    return std::make_unique<torch::optim::AdamW>(parameters, torch::optim::AdamWOptions(0.01));
  return std::make_unique<torch::optim::SGD>(parameters, torch::optim::SGDOptions(0.1));
}

struct Case {
  int world = 2;
  int steps = 12;
  Inner inner = Inner::kAdamW;
  DiLoCoOptions options;
  // After the last step: a round for every fragment with inner steps since its last one (what
  // DiLoCo::synchronize_all() does; overlap_steps 0), as one more state.
  bool synchronize_all_at_end = false;
};

std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)> outer_of(
    const Case&) {
  return [](std::vector<torch::Tensor> p) {
    return std::make_unique<torch::optim::SGD>(
        p, torch::optim::SGDOptions(0.7).momentum(0.9).nesterov(true));
  };
}

bool due(const DiLoCoOptions& o, int64_t fragment, int64_t step) {
  return step % o.inner_steps == (fragment * o.inner_steps / o.fragments) % o.inner_steps;
}

// The replay: states[step][worker] = that worker's parameters after the step, worker w
// training on batch(step, w).
std::vector<std::vector<std::vector<torch::Tensor>>> replay(
    const Case& c, const std::vector<int64_t>& fragments,
    const std::function<Batch(int, int)>& batch = batch_of) {
  std::vector<torch::nn::Sequential> models;
  std::vector<std::unique_ptr<torch::optim::Optimizer>> inners;
  for (int w = 0; w < c.world; ++w) {
    models.push_back(make_model());
    inners.push_back(inner_optimizer(c.inner, models.back()->parameters()));
  }
  std::vector<torch::Tensor> outer_parameters;
  for (const auto& p : models[0]->parameters())
    outer_parameters.push_back(p.detach().clone().requires_grad_(true));
  auto outer = outer_of(c)(outer_parameters);
  struct Round {
    int64_t fragment;
    std::vector<torch::Tensor> average;  // per parameter (only the fragment's are used)
    int64_t apply_at;
  };
  std::vector<Round> pending;
  auto apply = [&](const Round& round, double merge_local) {
    for (size_t i = 0; i < outer_parameters.size(); ++i) {
      if (fragments[i] == round.fragment) outer_parameters[i].mutable_grad() = round.average[i];
    }
    outer->step();
    for (size_t i = 0; i < outer_parameters.size(); ++i) {
      if (fragments[i] != round.fragment) continue;
      outer_parameters[i].mutable_grad() = torch::Tensor();
      for (int w = 0; w < c.world; ++w) {
        torch::Tensor local = models[w]->parameters()[i];
        local.copy_(local * merge_local + outer_parameters[i] * (1 - merge_local));
      }
    }
  };
  std::vector<std::vector<std::vector<torch::Tensor>>> states;
  for (int step = 1; step <= c.steps; ++step) {
    for (int w = 0; w < c.world; ++w) {
      inners[w]->zero_grad();
      loss_of(models[w], batch(step, w)).backward();
      inners[w]->step();
    }
    torch::NoGradGuard no_grad;
    while (!pending.empty() && pending.front().apply_at <= step) {
      apply(pending.front(), c.options.merge_local);
      pending.erase(pending.begin());
    }
    for (int64_t f = 0; f < c.options.fragments; ++f) {
      if (!due(c.options, f, step)) continue;
      Round round{f, {}, step + c.options.overlap_steps};
      for (size_t i = 0; i < outer_parameters.size(); ++i) {
        torch::Tensor sum = torch::zeros_like(outer_parameters[i]);
        for (int w = 0; w < c.world; ++w) sum += outer_parameters[i] - models[w]->parameters()[i];
        round.average.push_back(sum / c.world);
      }
      if (c.options.overlap_steps == 0) {
        apply(round, 0.0);
      } else {
        pending.push_back(round);
      }
    }
    states.emplace_back();
    for (int w = 0; w < c.world; ++w) {
      states.back().emplace_back();
      for (const auto& p : models[w]->parameters()) states.back().back().push_back(p.clone());
    }
  }
  if (!c.synchronize_all_at_end) return states;
  torch::NoGradGuard no_grad;
  for (int64_t f = 0; f < c.options.fragments; ++f) {
    if (due(c.options, f, c.steps)) continue;  // synchronized by the last step itself
    Round round{f, {}, c.steps};
    for (size_t i = 0; i < outer_parameters.size(); ++i) {
      torch::Tensor sum = torch::zeros_like(outer_parameters[i]);
      for (int w = 0; w < c.world; ++w) sum += outer_parameters[i] - models[w]->parameters()[i];
      round.average.push_back(sum / c.world);
    }
    apply(round, 0.0);
  }
  states.emplace_back();
  for (int w = 0; w < c.world; ++w) {
    states.back().emplace_back();
    for (const auto& p : models[w]->parameters()) states.back().back().push_back(p.clone());
  }
  return states;
}

void expect_close(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& want,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const bool close = ((got[i] - want[i]).abs() <= 1e-6 + 1e-5 * want[i].abs()).all().item<bool>();
    EXPECT_TRUE(close) << what << " parameter " << i << ": max |difference| "
                       << (got[i] - want[i]).abs().max().item<double>();
  }
}

std::vector<torch::Tensor> parameters_of(torch::nn::Sequential& model) {
  std::vector<torch::Tensor> out;
  for (const auto& p : model->parameters()) out.push_back(p.detach().clone());
  return out;
}

// Inner steps first..last on `rank`'s batches, each followed by diloco.step(); after each,
// `check(step)` when given.
void inner_steps(torch::nn::Sequential& model, torch::optim::Optimizer& inner, DiLoCo& diloco,
                 int rank, int first, int last, const std::function<void(int)>& check = {}) {
  for (int step = first; step <= last; ++step) {
    inner.zero_grad();
    loss_of(model, batch_of(step, rank)).backward();
    inner.step();
    diloco.step();
    if (check) check(step);
  }
}

// inner_steps from 1 to c.steps, the parameters after each step close to replayed `worker`'s.
void expect_steps_match_replay(const Case& c, torch::nn::Sequential& model,
                               torch::optim::Optimizer& inner, DiLoCo& diloco, int rank,
                               const std::vector<std::vector<std::vector<torch::Tensor>>>& states,
                               int worker) {
  inner_steps(model, inner, diloco, rank, 1, c.steps, [&](int step) {
    expect_close(parameters_of(model), states[step - 1][worker],
                 "rank " + std::to_string(rank) + " step " + std::to_string(step));
  });
}

// 8 inner steps (AdamW) at 2 ranks with DiLoCo H = 2 and what `adjust` sets (called on each
// rank, for a hook object of its own): rank 0's parameters at the end and its sent_bytes().
std::pair<std::vector<torch::Tensor>, int64_t> train_two_ranks(
    const std::function<void(DiLoCoOptions&)>& adjust) {
  std::vector<torch::Tensor> rank0;
  int64_t sent = 0;
  run_with_groups(2, [&](int rank, std::shared_ptr<Group> group) {
    torch::nn::Sequential model = make_model();
    torch::optim::AdamW inner(model->parameters(), torch::optim::AdamWOptions(0.01));
    DiLoCoOptions options;
    options.inner_steps = 2;
    adjust(options);
    DiLoCo diloco(group, *model, options);
    for (int step = 1; step <= 8; ++step) {
      inner.zero_grad();
      loss_of(model, batch_of(step, rank)).backward();
      inner.step();
      diloco.step();
    }
    if (rank != 0) return;
    sent = diloco.sent_bytes();
    for (const auto& p : model->parameters()) rank0.push_back(p.detach().clone());
  });
  return {rank0, sent};
}

// Runs the case at c.world ranks (threads); checks every rank against the replay, and that the
// fragments are `fragments`.
void expect_matches_replay(const Case& c, const std::vector<int64_t>& fragments) {
  const auto states = replay(c, fragments);
  run_with_groups(c.world, [&](int rank, std::shared_ptr<Group> group) {
    torch::nn::Sequential model = make_model();
    if (rank != 0) {  // DiLoCo must start every rank from rank 0's model
      torch::NoGradGuard no_grad;
      for (auto& p : model->parameters()) p.add_(1.0);
    }
    auto inner = inner_optimizer(c.inner, model->parameters());
    DiLoCoOptions options = c.options;
    options.outer_optimizer = outer_of(c);
    DiLoCo diloco(group, *model, options);
    ASSERT_EQ(diloco.fragment_of_parameter(), fragments);
    expect_steps_match_replay(c, model, *inner, diloco, rank, states, rank);
  });
}

TEST(DiLoCo, EveryHStepsWithAdamWInsideAndNesterovOutsideMatchesTheReplay) {
  for (int world : {2, 3}) {
    Case c;
    c.world = world;
    c.options.inner_steps = 3;
    expect_matches_replay(c, {0, 0, 0, 0});
  }
}

TEST(DiLoCo, StreamingFragmentsAtStaggeredStepsMatchTheReplay) {
  Case c;
  c.options.inner_steps = 4;
  c.options.fragments = 2;  // the first weight; the rest (16 + 64 + 4 elements)
  expect_matches_replay(c, {0, 1, 1, 1});
  c.options.fragments = 4;
  c.world = 3;
  expect_matches_replay(c, {0, 1, 2, 3});
}

// Hierarchical DiLoCo at 2 nodes x 2 ranks: DDP inside each node makes the node one worker
// training on its two ranks' batches together, and DiLoCo runs between the nodes: every rank
// matches its node's worker in a 2-worker replay; only the first rank of each node sends.
// synchronize_all() right after a scheduled round, and at a step where only some fragments
// have progress: the paper's algorithm has no outer step on a zero pseudo-gradient, so a
// fragment synchronized at this step must not move (momentum alone would move it).
TEST(DiLoCo, SynchronizeAllStepsOnlyTheFragmentsWithInnerStepsSinceTheirRound) {
  struct Sweep {
    int64_t inner_steps, fragments, steps, expected_rounds;
    std::vector<int64_t> fragment_of;
  };
  // H 3, F 1, 6 steps: synchronized at step 6, nothing left. H 4, F 2, 4 steps: fragment 0
  // synchronized at step 4, fragment 1 at step 2 (two inner steps since).
  for (const Sweep& sweep : {Sweep{3, 1, 6, 0, {0, 0, 0, 0}}, Sweep{4, 2, 4, 1, {0, 1, 1, 1}}}) {
    for (int world : {2, 3}) {
      Case c;
      c.world = world;
      c.steps = static_cast<int>(sweep.steps);
      c.options.inner_steps = sweep.inner_steps;
      c.options.fragments = sweep.fragments;
      c.synchronize_all_at_end = true;
      const auto states = replay(c, sweep.fragment_of);
      run_with_groups(world, [&](int rank, std::shared_ptr<Group> group) {
        torch::nn::Sequential model = make_model();
        auto inner = inner_optimizer(c.inner, model->parameters());
        DiLoCoOptions options = c.options;
        options.outer_optimizer = outer_of(c);
        DiLoCo diloco(group, *model, options);
        inner_steps(model, *inner, diloco, rank, 1, c.steps);
        EXPECT_EQ(diloco.synchronize_all(), sweep.expected_rounds);
        const std::string what = "H " + std::to_string(sweep.inner_steps) + " F " +
                                 std::to_string(sweep.fragments) + " rank " + std::to_string(rank) +
                                 " after synchronize_all";
        expect_close(parameters_of(model), states.back()[rank], what);
        for (int w = 0; w < world; ++w) expect_close(parameters_of(model), states.back()[w], what);
        // Once more: every fragment is synchronized now, so nothing moves at all.
        const std::vector<torch::Tensor> before = parameters_of(model);
        EXPECT_EQ(diloco.synchronize_all(), 0);
        const std::vector<torch::Tensor> after = parameters_of(model);
        for (size_t i = 0; i < before.size(); ++i) {
          EXPECT_TRUE(torch::equal(before[i], after[i])) << what << ", again: parameter " << i;
        }
      });
    }
  }
}

TEST(DiLoCo, HierarchicalWithDdpInsideNodesMatchesAReplayOfOneWorkerPerNode) {
  Case c;
  c.world = 2;  // workers: the nodes
  c.options.inner_steps = 3;
  c.options.fragments = 2;
  auto node_batch = [](int step, int node) {
    const Batch a = batch_of(step, 2 * node), b = batch_of(step, 2 * node + 1);
    return Batch{torch::cat({a.inputs, b.inputs}), torch::cat({a.targets, b.targets})};
  };
  const auto states = replay(c, {0, 1, 1, 1}, node_batch);
  std::vector<int64_t> sent(4, -1);
  run_with_groups_on_nodes({"a", "a", "b", "b"}, [&](int rank, std::shared_ptr<Group> group) {
    torch::nn::Sequential model = make_model();
    auto node = group->split(group->node_rank(), group->rank());
    DistributedDataParallel ddp(model.ptr(), node);
    auto inner = inner_optimizer(c.inner, model->parameters());
    DiLoCoOptions options = c.options;
    options.outer_optimizer = outer_of(c);
    options.hierarchical = true;
    DiLoCo diloco(group, *model, options);
    expect_steps_match_replay(c, model, *inner, diloco, rank, states, rank / 2);
    sent[rank] = diloco.sent_bytes();
  });
  // 12 steps, H = 3: 4 rounds of each fragment (160 and 84 elements), float32.
  EXPECT_EQ(sent, (std::vector<int64_t>{4 * 244 * 4, 0, 4 * 244 * 4, 0}));
}

// DiLoCo as a checkpoint part: 2 ranks, H = 4, SGD inside (stateless: the one-file checkpoint
// holds rank 0's inner optimizer for every rank) and Nesterov outside. A checkpoint taken at
// step 8 (every rank just synchronized) and loaded into fresh models, inner optimizers and
// DiLoCos goes on to step 12 exactly as the uninterrupted run; loaded without the part (the
// outer momentum and the schedule lost) it does not. One taken at step 9 with a round in flight
// (overlap 2) keeps that round and applies it at step 10: rank 0 equals the uninterrupted run
// until the next round (rank 1 resumed from rank 0's local model, which its pseudo-gradient
// then carries into the round at step 12).
TEST(DiLoCoCheckpoint, ResumesTheOuterStateAndTheScheduleExactly) {
  const std::string dir = fresh_temp_dir("diloco_checkpoint");
  for (const int64_t overlap : {0, 2}) {
    SCOPED_TRACE("overlap " + std::to_string(overlap));
    const int saved_at = overlap == 0 ? 8 : 9;
    const int last = overlap == 0 ? 12 : 11;
    const std::string path = dir + "/run" + std::to_string(overlap) + ".ckpt";
    run_with_groups(2, [&](int rank, std::shared_ptr<Group> group) {
      DiLoCoOptions options;
      options.inner_steps = 4;
      options.overlap_steps = overlap;
      auto run = [&] {
        torch::nn::Sequential model = make_model();
        auto inner = inner_optimizer(Inner::kSgd, model->parameters());
        auto diloco = std::make_unique<DiLoCo>(group, *model, options);
        return std::make_tuple(model, std::move(inner), std::move(diloco));
      };
      auto state_of = [](torch::nn::Sequential& model, torch::optim::Optimizer& inner) {
        TrainingState state{model.ptr().get(), &inner};
        state.rng = false;  // the rank threads share the default generator
        return state;
      };
      auto [whole, whole_inner, whole_diloco] = run();
      inner_steps(whole, *whole_inner, *whole_diloco, rank, 1, last);

      auto [first, first_inner, first_diloco] = run();
      inner_steps(first, *first_inner, *first_diloco, rank, 1, saved_at);
      TrainingState saved = state_of(first, *first_inner);
      saved.parts = {{"diloco", first_diloco.get()}};
      save_checkpoint(path, *group, saved);

      auto [resumed, resumed_inner, resumed_diloco] = run();
      TrainingState loaded = state_of(resumed, *resumed_inner);
      loaded.parts = {{"diloco", resumed_diloco.get()}};
      ASSERT_TRUE(load_checkpoint(path, *group, loaded));
      EXPECT_EQ(resumed_diloco->inner_step(), saved_at);
      inner_steps(resumed, *resumed_inner, *resumed_diloco, rank, saved_at + 1, last);
      if (overlap == 0 || rank == 0) {
        expect_close(parameters_of(resumed), parameters_of(whole), "rank " + std::to_string(rank));
      }
      if (overlap != 0) return;
      auto [forgetful, forgetful_inner, forgetful_diloco] = run();
      TrainingState without = state_of(forgetful, *forgetful_inner);
      ASSERT_TRUE(load_checkpoint(path, *group, without));
      inner_steps(forgetful, *forgetful_inner, *forgetful_diloco, rank, saved_at + 1, last);
      EXPECT_FALSE(torch::allclose(parameters_of(forgetful)[0], parameters_of(whole)[0]))
          << "the part made no difference: the test cannot see it";
    });
  }
}

// A round in flight whose hook finishes with a collective (PowerSGD's second allreduce) is
// finished by every rank before rank 0 writes the part (CheckpointPart::before_save), so the
// ranks' collectives stay in step: the run saves twice mid-round and trains on to the end.
TEST(DiLoCoCheckpoint, ASaveWithAPowerSgdRoundInFlightKeepsTheRanksInStep) {
  const std::string path = fresh_temp_dir("diloco_checkpoint_powersgd") + "/run.ckpt";
  run_with_groups(2, [&](int rank, std::shared_ptr<Group> group) {
    torch::nn::Sequential model = make_model();
    auto inner = inner_optimizer(Inner::kSgd, model->parameters());
    DiLoCoOptions options;
    options.inner_steps = 4;
    options.fragments = 2;
    options.overlap_steps = 2;
    PowerSgdOptions powersgd;
    powersgd.start_iter = 0;
    options.hook = powersgd_hook(powersgd);
    DiLoCo diloco(group, *model, options);
    TrainingState state{model.ptr().get(), inner.get()};
    state.rng = false;
    state.parts = {{"diloco", &diloco}};
    inner_steps(model, *inner, diloco, rank, 1, 5);  // a round of each fragment in flight
    save_checkpoint(path, *group, state);
    inner_steps(model, *inner, diloco, rank, 6, 9);
    save_checkpoint(path, *group, state);
    inner_steps(model, *inner, diloco, rank, 10, 12);
    EXPECT_EQ(diloco.inner_step(), 12);
  });
}

TEST(DiLoCoCheckpoint, AnotherModelOrFragmentCountIsACheckpointErrorNamingThePart) {
  const std::string path = fresh_temp_dir("diloco_checkpoint_errors") + "/run.ckpt";
  run_with_groups(1, [&](int, std::shared_ptr<Group> group) {
    torch::nn::Sequential model = make_model();
    DiLoCoOptions options;
    options.inner_steps = 2;
    DiLoCo diloco(group, *model, options);
    TrainingState state{model.ptr().get()};
    state.parts = {{"diloco", &diloco}};
    save_checkpoint(path, state);
    options.fragments = 2;
    DiLoCo two_fragments(group, *model, options);
    state.parts = {{"diloco", &two_fragments}};
    try {
      load_checkpoint(path, state, LoadOptions{true});
      ADD_FAILURE() << "no error";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("part 'diloco'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("this DiLoCo has 2"), std::string::npos) << e.what();
    }
    state.parts = {{"other", &diloco}};
    EXPECT_THROW(load_checkpoint(path, state, LoadOptions{true}), CheckpointError);
  });
}

// The round through a communication hook: the plain averaging hook gives the replay's result.
TEST(DiLoCo, ThroughTheAllreduceHookMatchesTheReplay) {
  Case c;
  c.options.inner_steps = 3;
  c.options.fragments = 2;
  c.options.hook = allreduce_hook();  // stateless: one object may serve every rank
  expect_matches_replay(c, {0, 1, 1, 1});
}

// QSGD with error feedback (8-bit levels and one float32 norm per fragment and rank): each
// round sends 4 + n bytes, and the model stays close to the float32 run's.
TEST(DiLoCo, QsgdPseudoGradientsWithErrorFeedbackSendAByteAnElement) {
  const auto [float32, float32_bytes] = train_two_ranks([](DiLoCoOptions&) {});
  const auto [qsgd, qsgd_bytes] = train_two_ranks([](DiLoCoOptions& o) {
    QsgdOptions quantized;
    quantized.levels = 127;
    quantized.error_feedback = true;
    o.hook = qsgd_hook(quantized);  // one per rank: it keeps each fragment's residual
  });
  EXPECT_EQ(float32_bytes, 4 * 244 * 4);  // 4 rounds of 244 float32 elements
  EXPECT_EQ(qsgd_bytes, 4 * (4 + 244));
  for (size_t i = 0; i < float32.size(); ++i) {
    EXPECT_TRUE(torch::allclose(qsgd[i], float32[i], 0.05, 0.01)) << "parameter " << i;
    EXPECT_FALSE(torch::equal(qsgd[i], float32[i])) << "parameter " << i;
  }
}

// Streaming DiLoCo's overlap: each round applied one step after it started (its allreduce
// running beside that step), the local parameters mixed half and half with the outer ones.
TEST(DiLoCo, OverlappedRoundsMixedWithTheLocalParametersMatchTheReplay) {
  Case c;
  c.options.inner_steps = 4;
  c.options.fragments = 2;
  c.options.overlap_steps = 1;
  c.options.merge_local = 0.5;
  expect_matches_replay(c, {0, 1, 1, 1});
}

// H = 1, outer SGD of learning rate 1 without momentum, written with DiLoCo's own options
// (outer_momentum 0 is plain SGD): the mean of the ranks' SGD steps is the SGD step of the mean
// gradient, so the ranks train as one process on the whole batch (DDP), as docs/compression.md
// says.
TEST(DiLoCo, OneInnerStepAndAnOuterLearningRateOfOneWithoutMomentumIsDdp) {
  const int world = 2, steps = 8;
  torch::nn::Sequential reference = make_model();
  torch::optim::SGD sgd(reference->parameters(), torch::optim::SGDOptions(0.1));
  std::vector<std::vector<torch::Tensor>> want;
  for (int step = 1; step <= steps; ++step) {
    sgd.zero_grad();
    Batch whole{torch::cat({batch_of(step, 0).inputs, batch_of(step, 1).inputs}),
                torch::cat({batch_of(step, 0).targets, batch_of(step, 1).targets})};
    loss_of(reference, whole).backward();
    sgd.step();
    want.emplace_back();
    for (const auto& p : reference->parameters()) want.back().push_back(p.detach().clone());
  }
  run_with_groups(world, [&](int rank, std::shared_ptr<Group> group) {
    torch::nn::Sequential model = make_model();
    torch::optim::SGD inner(model->parameters(), torch::optim::SGDOptions(0.1));
    DiLoCoOptions options;
    options.inner_steps = 1;
    options.outer_lr = 1.0;
    options.outer_momentum = 0.0;
    DiLoCo diloco(group, *model, options);
    for (int step = 1; step <= steps; ++step) {
      inner.zero_grad();
      loss_of(model, batch_of(step, rank)).backward();
      inner.step();
      EXPECT_EQ(diloco.step(), 1);
      std::vector<torch::Tensor> mine;
      for (const auto& p : model->parameters()) mine.push_back(p.detach().clone());
      expect_close(mine, want[step - 1], "rank " + std::to_string(rank));
    }
  });
}

// bfloat16 on the wire: half the bytes, and a model close to the float32 run's.
TEST(DiLoCo, Bfloat16PseudoGradientsSendHalfTheBytes) {
  const auto [float32, float32_bytes] = train_two_ranks([](DiLoCoOptions&) {});
  const auto [bfloat16, bfloat16_bytes] =
      train_two_ranks([](DiLoCoOptions& o) { o.wire_dtype = torch::kBFloat16; });
  EXPECT_EQ(float32_bytes, 4 * 244 * 4);  // 4 rounds of 244 float32 elements
  EXPECT_EQ(bfloat16_bytes, float32_bytes / 2);
  for (size_t i = 0; i < float32.size(); ++i) {
    EXPECT_TRUE(torch::allclose(bfloat16[i], float32[i], 1e-2, 1e-3)) << "parameter " << i;
    EXPECT_FALSE(torch::equal(bfloat16[i], float32[i])) << "parameter " << i;
  }
}

TEST(DiLoCoErrors, BadOptionsAreRefused) {
  run_with_groups(1, [&](int, std::shared_ptr<Group> group) {
    torch::nn::Sequential model = make_model();
    auto refused = [&](DiLoCoOptions options, const std::string& message) {
      try {
        DiLoCo diloco(group, *model, options);
        ADD_FAILURE() << "no error for " << message;
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
      }
    };
    DiLoCoOptions o;
    o.inner_steps = 0;
    refused(o, "inner_steps must be >= 1");
    o = {};
    o.fragments = 5;
    refused(o, "fragments must be between 1 and the number of trainable parameters (4)");
    o = {};
    o.wire_dtype = torch::kFloat16;
    refused(o, "wire_dtype must be float32 or bfloat16");
    o = {};
    o.inner_steps = 4;
    o.overlap_steps = 4;
    refused(o, "overlap_steps must be at least 0 and less than inner_steps (4)");
    o = {};
    o.outer_momentum = -0.1;
    refused(o, "outer_momentum must be at least 0 and below 1 (0: plain SGD), got -0.1");
    o.outer_momentum = 1.0;
    refused(o, "outer_momentum must be at least 0 and below 1");
    o = {};
    o.outer_lr = 0;
    refused(o, "outer_lr must be above 0");
    o = {};
    o.hook = allreduce_hook();
    o.wire_dtype = torch::kBFloat16;
    refused(o, "a hook decides what the pseudo-gradients travel as");
    o = {};
    o.outer_optimizer = [](std::vector<torch::Tensor>) {
      return std::unique_ptr<torch::optim::Optimizer>();
    };
    refused(o, "outer_optimizer returned null");
  });
  run_with_groups(1, [&](int, std::shared_ptr<Group> group) {
    try {
      DiLoCo diloco(group, std::vector<torch::Tensor>{torch::zeros({3}, torch::kLong)});
      ADD_FAILURE() << "no error for an integer parameter";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("every parameter must be a floating-point tensor"),
                std::string::npos)
          << e.what();
    }
  });
}

}  // namespace diloco_test
}  // namespace cohort::testing
