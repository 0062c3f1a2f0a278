#include "trust_ratio_harness.h"

#include <gtest/gtest.h>

#include <mutex>

#include "cohort/core/check.h"
#include "cohort/torch/checkpoint/checkpoint.h"
#include "cohort/torch/checkpoint/sharded_checkpoint.h"
#include "cohort/torch/ddp/ddp.h"
#include "cohort/torch/shard/fsdp.h"
#include "cohort/torch/shard/zero.h"
#include "ddp_harness.h"

namespace cohort::testing {

torch::nn::Sequential trust_ratio_model() {
  // Made from a generator of its own (thread ranks must not share torch's global one).
  auto generator = at::detail::createCPUGenerator(1234);
  torch::nn::Sequential net(torch::nn::Linear(10, 24), torch::nn::Functional(torch::tanh),
                            torch::nn::Linear(24, 24), torch::nn::Functional(torch::tanh),
                            torch::nn::Linear(24, 4));
  torch::NoGradGuard no_grad;
  for (auto& p : net->parameters()) {
    p.copy_(at::randn(p.sizes(), generator) * 0.3);
  }
  return net;
}

std::pair<torch::Tensor, torch::Tensor> trust_ratio_batch(int step, int batch) {
  auto generator = at::detail::createCPUGenerator(5000 + step);
  torch::Tensor inputs = at::randn({batch, 10}, generator);
  torch::Tensor targets = at::randn({batch, 4}, generator);
  return {inputs, targets};
}

torch::Tensor trust_ratio_loss(torch::nn::Sequential& model, const torch::Tensor& inputs,
                               const torch::Tensor& targets) {
  return (model->forward(inputs) - targets).pow(2).mean();
}

namespace {

std::vector<torch::Tensor> copies(const torch::nn::Module& module) {
  std::vector<torch::Tensor> out;
  for (const auto& p : module.parameters()) out.push_back(p.detach().clone());
  return out;
}

}  // namespace

std::vector<torch::Tensor> train_rank(const TrainCase& c, int rank, std::shared_ptr<Group> group) {
  auto model = trust_ratio_model();
  const int slice = c.global_batch / c.world;
  // Loads (before training) and saves (after) with the wrapper's checkpoint functions.
  using Checkpoint = std::function<void(TrainingState&, bool load)>;
  auto run = [&](torch::optim::Optimizer& optimizer, const std::function<void()>& step,
                 const Checkpoint& checkpoint) {
    TrainingState state;
    state.module = model.get();
    state.optimizer = &optimizer;
    state.rng = false;
    if (!c.load_from.empty()) checkpoint(state, true);
    for (int s = c.first_step; s < c.steps; ++s) {
      auto [inputs, targets] = trust_ratio_batch(s, c.global_batch);
      optimizer.zero_grad();
      trust_ratio_loss(model, inputs.narrow(0, rank * slice, slice),
                       targets.narrow(0, rank * slice, slice))
          .backward();
      step();
    }
    if (!c.save_to.empty()) checkpoint(state, false);
  };
  LoadOptions any_job;
  any_job.any_job = true;
  if (c.strategy == kOneProcess || c.strategy == StrategyKind::kDdp) {
    std::optional<DistributedDataParallel> ddp;
    if (c.strategy == StrategyKind::kDdp) ddp.emplace(model, group);
    auto optimizer = c.make_optimizer(model->named_parameters(), *model, {});
    COHORT_CHECK(ddp || (c.load_from.empty() && c.save_to.empty()), "checkpoints need ranks");
    run(
        *optimizer, [&] { optimizer->step(); },
        [&](TrainingState& state, bool load) {
          if (load) {
            COHORT_CHECK(load_checkpoint(c.load_from, *group, state, any_job), "no checkpoint");
          } else {
            save_checkpoint(c.save_to, *group, state);
          }
        });
    return copies(*model);
  }
  if (is_zero(*c.strategy)) {
    ZeroOptions options;
    options.stage = c.strategy == StrategyKind::kZero1 ? 1 : 2;
    options.ddp.first_bucket_cap_mb = 0;  // several buckets: ZeRO steps the optimizer per bucket
    options.ddp.bucket_cap_mb = 0.002;
    ZeroDataParallel zero(model, group, options);
    auto optimizer = c.make_optimizer(
        zero.named_parameters(), zero.module(),
        c.reduce_norms ? optim::shard_norm_reduction(zero) : optim::NormReduction());
    run(
        *optimizer, [&] { zero.step(*optimizer); },
        [&](TrainingState& state, bool load) {
          if (load) {
            COHORT_CHECK(load_sharded_checkpoint(c.load_from, zero, state, any_job),
                         "no checkpoint");
          } else {
            save_sharded_checkpoint(c.save_to, zero, state);
          }
        });
    return copies(*model);
  }
  FsdpOptions options;
  options.strategy = fsdp_sharding_of(*c.strategy);
  std::vector<torch::Tensor> result;
  {
    FullyShardedDataParallel fsdp(model, group, options);
    auto optimizer = c.make_optimizer(
        fsdp.named_parameters(), fsdp.module(),
        c.reduce_norms ? optim::shard_norm_reduction(fsdp) : optim::NormReduction());
    run(
        *optimizer, [&] { fsdp.step(*optimizer); },
        [&](TrainingState& state, bool load) {
          state.module = &fsdp.module();
          if (load) {
            COHORT_CHECK(load_sharded_checkpoint(c.load_from, fsdp, state, any_job),
                         "no checkpoint");
          } else {
            save_sharded_checkpoint(c.save_to, fsdp, state);
          }
        });
    auto full = fsdp.full_parameters();
    result = copies(*model);
  }
  return result;
}

void expect_refused_without_reduction(TrainCase c) {
  c.reduce_norms = false;
  const auto errors = errors_of(
      c.world, [&](int rank, std::shared_ptr<Group> group) { train_rank(c, rank, group); });
  for (const auto& message : errors) {
    EXPECT_NE(message.find("only a shard of each; pass cohort::optim::shard_norm_reduction("),
              std::string::npos)
        << message;
  }
}

std::vector<torch::Tensor> train_case(const TrainCase& c) {
  if (c.strategy == kOneProcess) return train_rank(c, 0, nullptr);
  std::vector<std::vector<torch::Tensor>> results(c.world);
  auto body = [&](int rank, std::shared_ptr<Group> group) {
    results[rank] = train_rank(c, rank, std::move(group));
  };
  if (c.strategy == StrategyKind::kHybridShard) {
    run_with_groups_on_nodes(c.node_of, body);
  } else {
    run_with_groups(c.world, body);
  }
  for (int rank = 1; rank < c.world; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank) + " against rank 0");
    expect_close(results[rank], results[0], 0, 0);
  }
  return results[0];
}

void expect_close(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& want,
                  double rtol, double atol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(got[i].sizes(), want[i].sizes()) << "tensor " << i;
    const torch::Tensor gap = (got[i] - want[i]).abs();
    const torch::Tensor allowed = atol + rtol * want[i].abs();
    EXPECT_TRUE((gap <= allowed).all().item<bool>())
        << "tensor " << i << " of shape " << want[i].sizes() << ": largest difference "
        << gap.max().item<double>() << " (rtol " << rtol << ", atol " << atol << ")";
  }
}

void train(torch::nn::Sequential& model, int first, int last, const std::function<void()>& step) {
  for (int s = first; s < last; ++s) {
    auto [inputs, targets] = trust_ratio_batch(s, 12);
    for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
    const auto dtype = model->parameters().front().scalar_type();
    trust_ratio_loss(model, inputs.to(dtype), targets.to(dtype)).backward();
    step();
  }
}

std::vector<torch::Tensor> parameters_of(torch::nn::Module& model) {
  std::vector<torch::Tensor> out;
  for (const auto& p : model.parameters()) out.push_back(p.detach().clone().to(torch::kFloat32));
  return out;
}

}  // namespace cohort::testing
