// cohort-elastic-bench: what elastic training costs (docs/bench.md, "Elastic"; bench/elastic.sh
// runs it). Ranks started by cohortrun train an MLP (--layers x --width, Adam) on synthetic data
// with cohort::ElasticTrainer, or with plain DDP (--plain, the baseline of the steady-state
// cost; --strategy zero1|zero2|full_shard with or without --no-buddy: what buddy copies cost),
// and print machine-readable lines:
//   STEP <step> <unix ns> <world>    each committed step, on rank 0
//   KILL <unix ns>                   the first process of launch rank --kill-rank, just before
//                                    it kills itself mid-backward at step --kill-step
//   CHANGE <generation> <world> <seconds> <state bytes>   each membership change, on rank 0
//   BCAST <bytes> <seconds>          rank 0, at the end: one broadcast of the healed state's
//                                    size on the final group (the link's rate, for the heal)
//   BCAST_FRESH <bytes> <seconds>    the same into memory the receivers never touched (as a
//                                    joiner's state lands)
//   STEPMS <median ms>               rank 0, at the end: the median step time
#include <signal.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cohort/comm/elastic.h"
#include "cohort/comm/init.h"
#include "cohort/core/env.h"
#include "cohort/torch/ddp/ddp.h"
#include "cohort/torch/elastic/elastic_trainer.h"
#include "cohort/torch/tensor_buffer.h"

namespace {

struct Options {
  int64_t layers = 4, width = 512, batch = 32, steps = 200, samples = 100000;
  int kill_rank = -1;
  int64_t kill_step = -1;
  bool plain = false;
  std::string strategy = "ddp";  // a strategy layer name (cohort::strategy_named)
  bool buddy = true;
  int64_t buddy_refresh_steps = cohort::ElasticTrainerOptions{}.buddy_refresh_steps;
};

// The trainer of --strategy: DDP steps the optimizer given; the sharded ones build theirs.
std::unique_ptr<cohort::ElasticTrainer> make_trainer(cohort::ElasticGroup& elastic,
                                                     torch::nn::Sequential& model,
                                                     torch::optim::Optimizer& optimizer,
                                                     const Options& o) {
  cohort::ElasticTrainerOptions options;
  options.sampler.batch_per_rank = static_cast<size_t>(o.batch);
  options.strategy = cohort::strategy_named(o.strategy).value();
  options.buddy_copies = o.buddy;
  options.buddy_refresh_steps = o.buddy_refresh_steps;
  const auto samples = static_cast<size_t>(o.samples);
  if (options.strategy == cohort::StrategyKind::kDdp) {
    return std::make_unique<cohort::ElasticTrainer>(elastic, model, optimizer, samples, options);
  }
  auto adam = [](const torch::OrderedDict<std::string, torch::Tensor>& parameters) {
    return std::make_unique<torch::optim::Adam>(parameters.values(),
                                                torch::optim::AdamOptions(1e-4));
  };
  return std::make_unique<cohort::ElasticTrainer>(elastic, model, adam, samples, options);
}

int64_t unix_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

torch::nn::Sequential make_model(const Options& o) {
  torch::manual_seed(1);
  torch::nn::Sequential model;
  for (int64_t i = 0; i < o.layers; ++i) {
    model->push_back(torch::nn::Linear(o.width, o.width));
    model->push_back(torch::nn::ReLU());
  }
  model->push_back(torch::nn::Linear(o.width, 10));
  return model;
}

// Parameters plus Adam's two moments, in bytes: what a joiner receives.
int64_t state_bytes(torch::nn::Module& model) {
  int64_t bytes = 0;
  for (const auto& p : model.parameters()) bytes += 3 * p.numel() * p.element_size();
  return bytes;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

torch::Tensor loss_of(torch::nn::Sequential& model, const Options& o, int64_t step, int rank) {
  const auto x = torch::randn({o.batch, o.width}, torch::TensorOptions().dtype(torch::kFloat));
  const auto y = torch::randint(0, 10, {o.batch});
  (void)step;
  (void)rank;
  return torch::nn::functional::cross_entropy(model->forward(x), y);
}

void print_link_rate(cohort::Group& group, int64_t bytes) {
  auto payload = torch::zeros({bytes / 4}, torch::kFloat);
  group.broadcast(cohort::tensor_buffer(payload));  // warm the path
  const auto start = std::chrono::steady_clock::now();
  group.broadcast(cohort::tensor_buffer(payload));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (group.rank() == 0) std::printf("BCAST %lld %.6f\n", (long long)bytes, s);
  // Into memory the receivers never touched, as a joiner's state lands: its page faults count.
  auto fresh = group.rank() == 0 ? payload : torch::empty({bytes / 4}, torch::kFloat);
  const auto fresh_start = std::chrono::steady_clock::now();
  group.broadcast(cohort::tensor_buffer(fresh));
  const double fresh_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - fresh_start).count();
  if (group.rank() == 0) std::printf("BCAST_FRESH %lld %.6f\n", (long long)bytes, fresh_s);
}

int run_plain(const Options& o) {
  auto group = cohort::init();
  torch::set_num_threads(1);
  auto model = make_model(o);
  cohort::DistributedDataParallel ddp(model, group);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-4));
  std::vector<double> ms;
  for (int64_t step = 0; step < o.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    optimizer.zero_grad();
    loss_of(model, o, step, group->rank()).backward();
    optimizer.step();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  if (group->rank() == 0) std::printf("STEPMS %.3f\n", median(ms));
  return 0;
}

int run_elastic(const Options& o) {
  auto elastic = cohort::init_elastic();
  torch::set_num_threads(1);
  auto model = make_model(o);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-4));
  auto owned = make_trainer(*elastic, model, optimizer, o);
  cohort::ElasticTrainer& trainer = *owned;
  const bool first = cohort::env_int("COHORT_ELASTIC_RESTART").value_or(0) == 0;
  const bool killer = first && cohort::env_int("RANK").value_or(0) == o.kill_rank;
  trainer.on_membership_change([&](const cohort::Membership& m) {
    if (m.rank == 0 && m.generation > 1) {
      std::printf("CHANGE %llu %d %.6f %lld\n", (unsigned long long)m.generation, m.size,
                  trainer.last_change_seconds(), (long long)state_bytes(*model));
      std::fflush(stdout);
    }
  });
  std::vector<double> ms;
  while (trainer.committed_steps() < o.steps) {
    const auto start = std::chrono::steady_clock::now();
    const bool committed = trainer.step([&](const cohort::ElasticStep& step) {
      auto loss = loss_of(model, o, step.step, step.rank);
      if (killer && step.step == o.kill_step) {
        model->parameters().front().register_hook([](torch::Tensor g) {
          std::printf("KILL %lld\n", (long long)unix_ns());
          std::fflush(stdout);
          raise(SIGKILL);
          return g;
        });
      }
      loss.backward();
    });
    if (!committed) continue;
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
    if (trainer.membership().rank == 0) {
      std::printf("STEP %lld %lld %d\n", (long long)trainer.committed_steps() - 1,
                  (long long)unix_ns(), trainer.membership().size);
      std::fflush(stdout);
    }
  }
  trainer.finish();
  print_link_rate(trainer.elastic().group(), state_bytes(*model));
  if (trainer.membership().rank == 0) std::printf("STEPMS %.3f\n", median(ms));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("cohort-elastic-bench: the cost of elastic training (docs/bench.md)");
  Options o;
  app.add_option("--layers", o.layers);
  app.add_option("--width", o.width);
  app.add_option("--batch", o.batch, "samples per rank and step");
  app.add_option("--steps", o.steps, "committed steps");
  app.add_option("--kill-rank", o.kill_rank, "launch rank whose first process dies");
  app.add_option("--kill-step", o.kill_step, "the step it dies in (mid-backward)");
  app.add_flag("--plain", o.plain, "plain DDP, no elasticity (the baseline)");
  app.add_option("--strategy", o.strategy, "the strategy layer's: " + cohort::strategy_names())
      ->check([](const std::string& name) {
        return cohort::strategy_named(name) ? std::string()
                                            : "not one of " + cohort::strategy_names();
      });
  app.add_flag("!--no-buddy", o.buddy, "sharded strategies: no buddy copies");
  app.add_option("--buddy-refresh-steps", o.buddy_refresh_steps,
                 "sharded strategies: steps a buddy copy is logged between refreshes");
  CLI11_PARSE(app, argc, argv);
  try {
    return o.plain ? run_plain(o) : run_elastic(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cohort-elastic-bench: %s\n", e.what());
    return 1;
  }
}
