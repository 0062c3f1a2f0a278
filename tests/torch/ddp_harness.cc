#include "ddp_harness.h"

#include <gtest/gtest.h>

#include <optional>
#include <sstream>

#include "cohort/comm/memory_store.h"
#include "cohort/core/error.h"
#include "support/test_support.h"

namespace cohort::testing {
namespace {

constexpr int kClasses = 4;

struct Mlp : TestModel {
  Mlp() {
    fc1 = register_module("fc1", torch::nn::Linear(10, 32));
    fc2 = register_module("fc2", torch::nn::Linear(32, 32));
    fc3 = register_module("fc3", torch::nn::Linear(32, kClasses));
  }
  torch::Tensor forward(torch::Tensor x, int, int) override {
    return fc3(torch::relu(fc2(torch::relu(fc1(x)))));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};

struct ConvBatchNorm : TestModel {
  ConvBatchNorm() {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3)));
    bn = register_module("bn", torch::nn::BatchNorm2d(4));
    fc = register_module("fc", torch::nn::Linear(4 * 6 * 6, kClasses));
  }
  torch::Tensor forward(torch::Tensor x, int, int) override {
    return fc(torch::relu(bn(conv(x))).flatten(1));
  }
  torch::nn::Conv2d conv{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
  torch::nn::Linear fc{nullptr};
};

struct Branchy : TestModel {
  explicit Branchy(std::function<bool(int, int)> use) : use_branch(std::move(use)) {
    trunk = register_module("trunk", torch::nn::Linear(10, 16));
    branch = register_module("branch", torch::nn::Linear(16, 16));
    head = register_module("head", torch::nn::Linear(16, kClasses));
  }
  torch::Tensor forward(torch::Tensor x, int step, int rank) override {
    auto h = torch::relu(trunk(x));
    if (use_branch(step, rank)) h = h + torch::tanh(branch(h));
    return head(h);
  }
  std::function<bool(int, int)> use_branch;
  torch::nn::Linear trunk{nullptr}, branch{nullptr}, head{nullptr};
};

struct Reordered : TestModel {
  Reordered() {
    late = register_module("late", torch::nn::Linear(16, kClasses));
    early = register_module("early", torch::nn::Linear(10, 16));
  }
  torch::Tensor forward(torch::Tensor x, int, int) override { return late(torch::relu(early(x))); }
  torch::nn::Linear late{nullptr}, early{nullptr};
};

// The data of one micro-batch of one step: world * samples_per_rank samples.
struct Batch {
  torch::Tensor inputs;
  torch::Tensor targets;
  Batch slice(int rank, int samples_per_rank) const {
    return {inputs.narrow(0, rank * samples_per_rank, samples_per_rank),
            targets.narrow(0, rank * samples_per_rank, samples_per_rank)};
  }
};

std::vector<std::vector<Batch>> make_data(const ParityCase& c) {
  torch::manual_seed(1234);
  std::vector<std::vector<Batch>> data(c.steps);
  const int64_t n = c.world * c.samples_per_rank;
  for (auto& step : data) {
    for (int m = 0; m < c.micro_batches; ++m) {
      auto inputs = c.image_inputs ? torch::randn({n, 1, 8, 8}) : torch::randn({n, 10});
      step.push_back({inputs, torch::randint(kClasses, {n}, torch::kLong)});
    }
  }
  return data;
}

// The inputs go to the parameters' device and dtype (a no-op but on a GPU or under mixed
// precision).
torch::Tensor loss_of(TestModel& model, const Batch& batch, int step, int rank) {
  const torch::Tensor first = model.parameters().front();
  const auto inputs = batch.inputs.to(first.device(), first.scalar_type());
  return torch::nn::functional::cross_entropy(model.forward(inputs, step, rank),
                                              batch.targets.to(first.device()));
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const ParityCase& c,
                                                        std::vector<torch::Tensor> parameters) {
  if (c.optimizer == OptimizerKind::kAdamW) {
    return std::make_unique<torch::optim::AdamW>(
        std::move(parameters),
        torch::optim::AdamWOptions(c.lr > 0 ? c.lr : 0.01).weight_decay(0.01));
  }
  return std::make_unique<torch::optim::SGD>(
      std::move(parameters),
      torch::optim::SGDOptions(c.lr > 0 ? c.lr : 0.05).momentum(0.9).weight_decay(1e-3));
}

// What one process trains: the parameters that require grad.
std::vector<torch::Tensor> trainable(TestModel& model) {
  std::vector<torch::Tensor> parameters;
  for (const auto& p : model.parameters()) {
    if (p.requires_grad()) parameters.push_back(p);
  }
  return parameters;
}

// Parameters then buffers, copied to the CPU.
std::vector<torch::Tensor> snapshot(TestModel& model) {
  const auto copy = [](const torch::Tensor& t) { return t.detach().to(torch::kCPU, false, true); };
  std::vector<torch::Tensor> state;
  for (const auto& p : model.parameters()) state.push_back(copy(p));
  for (const auto& b : model.buffers()) state.push_back(copy(b));
  return state;
}

// A rank's model wrapped as the case says, with its optimizer.
class RankTrainer {
 public:
  virtual ~RankTrainer() = default;
  virtual DistributedDataParallel::NoSync no_sync() = 0;
  virtual void clip_and_step(double clip_norm) = 0;
  virtual void join(const std::function<void()>& loop) = 0;
  // Ends what no_sync() started where the guard it returns does not (FSDP's own guard).
  virtual void end_no_sync() {}
  // The model's parameters and buffers as this rank holds them after a step.
  virtual std::vector<torch::Tensor> state(TestModel& model) { return snapshot(model); }
  torch::optim::Optimizer& optimizer() { return *optimizer_; }

 protected:
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

class DdpTrainer final : public RankTrainer {
 public:
  DdpTrainer(const ParityCase& c, std::shared_ptr<TestModel> model, std::shared_ptr<Group> group)
      : model_(model), ddp_(model, std::move(group), c.options) {
    optimizer_ = make_optimizer(c, trainable(*model));
  }
  DistributedDataParallel::NoSync no_sync() override { return ddp_.no_sync(); }
  void clip_and_step(double clip_norm) override {
    if (clip_norm > 0) torch::nn::utils::clip_grad_norm_(trainable(*model_), clip_norm);
    optimizer_->step();
  }
  void join(const std::function<void()>& loop) override { ddp_.join(loop); }

 private:
  std::shared_ptr<TestModel> model_;
  DistributedDataParallel ddp_;
};

class ZeroTrainer final : public RankTrainer {
 public:
  ZeroTrainer(const ParityCase& c, std::shared_ptr<TestModel> model, std::shared_ptr<Group> group)
      : zero_(std::move(model), std::move(group), zero_options(c)) {
    optimizer_ = make_optimizer(c, zero_.parameters());
  }
  DistributedDataParallel::NoSync no_sync() override { return zero_.no_sync(); }
  void clip_and_step(double clip_norm) override {
    if (clip_norm > 0) clip_grad_norm(zero_, clip_norm);
    zero_.step(*optimizer_);
  }
  void join(const std::function<void()>&) override {
    ADD_FAILURE() << "uneven inputs are not a ZeRO case";
  }

 private:
  static ZeroOptions zero_options(const ParityCase& c) {
    ZeroOptions options;
    options.stage = c.strategy == StrategyKind::kZero1 ? 1 : 2;
    options.ddp = c.options;
    return options;
  }
  ZeroDataParallel zero_;
};

class FsdpTrainer final : public RankTrainer {
 public:
  FsdpTrainer(const ParityCase& c, int rank, std::shared_ptr<TestModel> model,
              std::shared_ptr<Group> group)
      : case_(c), rank_(rank), fsdp_(std::move(model), std::move(group), fsdp_options(c)) {
    optimizer_ = make_optimizer(c, fsdp_.parameters());
  }
  DistributedDataParallel::NoSync no_sync() override {
    guards_.push_back(fsdp_.no_sync());
    return {};
  }
  void end_no_sync() override { guards_.clear(); }
  void clip_and_step(double clip_norm) override {
    if (clip_norm > 0) clip_grad_norm(fsdp_, clip_norm);
    fsdp_.step(*optimizer_);
    if (case_.inspect_fsdp) case_.inspect_fsdp(rank_, step_, fsdp_);
    ++step_;
  }
  void join(const std::function<void()>&) override {
    ADD_FAILURE() << "uneven inputs are not an FSDP case";
  }
  // Under param_dtype the model's parameters are bfloat16 copies; the trained values are the
  // float32 masters, which full_parameters() shows.
  std::vector<torch::Tensor> state(TestModel& model) override {
    if (!case_.fsdp.mixed_precision.param_dtype) return snapshot(model);
    auto full = fsdp_.full_parameters();
    return snapshot(model);
  }

 private:
  static FsdpOptions fsdp_options(const ParityCase& c) {
    FsdpOptions options = c.fsdp;
    options.strategy = c.fsdp_sharding.value_or(fsdp_sharding_of(c.strategy));
    if (options.units.empty() && !options.auto_wrap.predicate &&
        options.auto_wrap.min_parameters == 0) {
      options.auto_wrap.min_parameters = 1;
    }
    options.ddp = c.options;
    return options;
  }
  const ParityCase& case_;
  int rank_;
  int step_ = 0;
  FullyShardedDataParallel fsdp_;
  std::vector<FullyShardedDataParallel::NoSync> guards_;
};

std::unique_ptr<RankTrainer> make_trainer(const ParityCase& c, std::shared_ptr<TestModel> model,
                                          std::shared_ptr<Group> group, int rank) {
  if (is_fsdp(c.strategy)) {
    return std::make_unique<FsdpTrainer>(c, rank, std::move(model), std::move(group));
  }
  if (c.fsdp_sharding) {
    ADD_FAILURE() << "fsdp_sharding set for " << strategy_name(c.strategy) << ", no FSDP kind";
  }
  if (c.strategy == StrategyKind::kDdp) {
    return std::make_unique<DdpTrainer>(c, std::move(model), std::move(group));
  }
  return std::make_unique<ZeroTrainer>(c, std::move(model), std::move(group));
}

std::vector<std::string> state_names(TestModel& model) {
  std::vector<std::string> names;
  for (const auto& p : model.named_parameters()) names.push_back(p.key());
  for (const auto& b : model.named_buffers()) names.push_back("buffer " + b.key());
  return names;
}

int steps_of(const ParityCase& c, int rank) {
  return c.steps_of_rank ? c.steps_of_rank(rank) : c.steps;
}

// The reference's low-precision copy of its model (ParityCase::reference_param_dtype).
class ComputeCopy {
 public:
  ComputeCopy(const ParityCase& c, TestModel& master)
      : master_(master), copy_(c.make_model()), dtype_(*c.reference_param_dtype) {
    copy_->to(c.device);
  }

  // The master's parameters cast to the dtype, without gradients; its buffers as they are.
  TestModel& load() {
    torch::NoGradGuard no_grad;
    const auto from = master_.parameters();
    auto to = copy_->parameters();
    for (size_t i = 0; i < to.size(); ++i) {
      to[i].set_data(from[i].detach().to(dtype_));
      to[i].mutable_grad() = torch::Tensor();
      to[i].set_requires_grad(from[i].requires_grad());
    }
    copy_buffers(master_, *copy_);
    return *copy_;
  }

  // The copy's gradients, cast to the master's dtype, become the master's; buffers go back.
  void store() {
    torch::NoGradGuard no_grad;
    auto to = master_.parameters();
    const auto from = copy_->parameters();
    for (size_t i = 0; i < to.size(); ++i) {
      if (from[i].grad().defined()) to[i].mutable_grad() = from[i].grad().to(to[i].scalar_type());
    }
    copy_buffers(*copy_, master_);
  }

 private:
  static void copy_buffers(TestModel& from, TestModel& to) {
    const auto source = from.buffers();
    auto target = to.buffers();
    for (size_t i = 0; i < target.size(); ++i) target[i].copy_(source[i]);
  }

  TestModel& master_;
  std::shared_ptr<TestModel> copy_;
  torch::Dtype dtype_;
};

// ParityCase::reference_sums_in_rank_order: the gradient of each rank's slice on its own, then
// ((g0 + g1) + g2 ...) / world into the model's gradients.
void sum_slices_in_rank_order(const ParityCase& c, TestModel& model, const Batch& batch, int step) {
  const std::vector<torch::Tensor> parameters = trainable(model);
  std::vector<torch::Tensor> sums(parameters.size());
  for (int rank = 0; rank < c.world; ++rank) {
    for (const auto& p : parameters) p.mutable_grad() = torch::Tensor();
    loss_of(model, batch.slice(rank, c.samples_per_rank), step, rank).backward();
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < parameters.size(); ++i) {
      const torch::Tensor g =
          parameters[i].grad().defined() ? parameters[i].grad() : torch::zeros_like(parameters[i]);
      sums[i] = rank == 0 ? g.clone() : sums[i] + g;
    }
  }
  for (size_t i = 0; i < parameters.size(); ++i) {
    parameters[i].mutable_grad() = sums[i] / static_cast<double>(c.world);
  }
}

// One process on the whole global batch: what the data-parallel job must reproduce. Returns
// the state after every step.
std::vector<std::vector<torch::Tensor>> train_reference(
    const ParityCase& c, TestModel& model, const std::vector<std::vector<Batch>>& data) {
  auto optimizer = make_optimizer(c, trainable(model));
  std::optional<ComputeCopy> copy;
  if (c.reference_param_dtype) copy.emplace(c, model);
  std::vector<std::vector<torch::Tensor>> states;
  for (int step = 0; step < c.steps; ++step) {
    optimizer->zero_grad();
    TestModel& runner = copy ? copy->load() : model;
    if (c.reference_sums_in_rank_order) {
      sum_slices_in_rank_order(c, runner, data[step][0], step);
    }
    for (int m = 0; m < c.micro_batches && !c.reference_sums_in_rank_order; ++m) {
      const Batch& batch = data[step][m];
      const bool uneven = static_cast<bool>(c.steps_of_rank);
      if (!c.reference_per_slice && !uneven) {
        loss_of(runner, batch, step, -1).backward();
        continue;
      }
      // Each rank's slice on its own, averaged over the whole world (finished ranks count as
      // zeros). Buffers end as the lowest training rank's (DDP broadcasts them from it).
      torch::Tensor loss = torch::zeros({}, c.device);
      std::vector<torch::Tensor> authority_buffers;
      for (int rank = 0; rank < c.world; ++rank) {
        if (step >= steps_of(c, rank)) continue;
        loss = loss + loss_of(runner, batch.slice(rank, c.samples_per_rank), step, rank);
        if (authority_buffers.empty()) {
          for (const auto& b : runner.buffers()) authority_buffers.push_back(b.detach().clone());
        }
      }
      (loss / c.world).backward();
      torch::NoGradGuard no_grad;
      auto buffers = runner.buffers();
      for (size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_(authority_buffers[i]);
    }
    if (copy) copy->store();
    if (c.clip_norm > 0) torch::nn::utils::clip_grad_norm_(trainable(model), c.clip_norm);
    optimizer->step();
    states.push_back(snapshot(model));
  }
  return states;
}

// One rank's training loop; returns the state after each of its steps.
std::vector<std::vector<torch::Tensor>> train_rank(const ParityCase& c, int rank,
                                                   std::shared_ptr<Group> group,
                                                   std::shared_ptr<TestModel> model,
                                                   const std::vector<std::vector<Batch>>& data) {
  if (c.wrap_group) group = c.wrap_group(std::move(group));
  auto trainer = make_trainer(c, model, std::move(group), rank);
  std::vector<std::vector<torch::Tensor>> states;
  auto loop = [&] {
    for (int step = 0; step < steps_of(c, rank); ++step) {
      trainer->optimizer().zero_grad();
      for (int m = 0; m < c.micro_batches; ++m) {
        const Batch mine = data[step][m].slice(rank, c.samples_per_rank);
        if (m + 1 < c.micro_batches && !c.sync_every_micro_batch) {
          auto guard = trainer->no_sync();
          loss_of(*model, mine, step, rank).backward();
          trainer->end_no_sync();
        } else {
          loss_of(*model, mine, step, rank).backward();
        }
      }
      trainer->clip_and_step(c.clip_norm);
      states.push_back(trainer->state(*model));
    }
  };
  if (c.steps_of_rank) {
    trainer->join(loop);
    states.push_back(snapshot(*model));  // after join: the last trainer's state
  } else {
    loop();
  }
  return states;
}

std::string compare_norms(const std::vector<torch::Tensor>& got,
                          const std::vector<torch::Tensor>& want,
                          const std::vector<std::string>& names, double norm_rtol) {
  for (size_t i = 0; i < want.size(); ++i) {
    const auto reference = want[i].to(torch::kFloat64);
    const double error = (got[i].to(torch::kFloat64) - reference).norm().item<double>();
    const double allowed = norm_rtol * reference.norm().item<double>();
    if (error <= allowed) continue;
    std::ostringstream out;
    out << names[i] << ": ||difference|| " << error << " > " << allowed << " (||value|| "
        << reference.norm().item<double>() << ")";
    return out.str();
  }
  return "";
}

std::string compare(const ParityCase& c, const std::vector<torch::Tensor>& got,
                    const std::vector<torch::Tensor>& want, const std::vector<std::string>& names) {
  if (c.norm_rtol > 0) return compare_norms(got, want, names, c.norm_rtol);
  const double rtol = c.rtol, atol = c.atol;
  for (size_t i = 0; i < want.size(); ++i) {
    const auto error = (got[i].to(torch::kFloat64) - want[i].to(torch::kFloat64)).abs();
    const auto allowed = atol + rtol * want[i].to(torch::kFloat64).abs();
    if ((error <= allowed).all().item<bool>()) continue;
    std::ostringstream out;
    out << names[i] << ": max |difference| " << error.max().item<double>() << ", max |value| "
        << want[i].abs().max().item<double>();
    return out.str();
  }
  return "";
}

std::vector<std::shared_ptr<Group>> make_groups(int world, bool over_tcp, bool shared_memory) {
  auto options = quick_options(std::chrono::seconds(60));
  options.shared_memory = shared_memory;
  return over_tcp ? make_tcp_groups(world, options) : make_inproc_groups(world, options);
}

// Ranks as threads over TCP, rank r on node node_of[r].
std::vector<std::shared_ptr<Group>> make_groups_on_nodes(const std::vector<std::string>& node_of) {
  const int world = static_cast<int>(node_of.size());
  auto store = std::make_shared<MemoryStore>();
  std::vector<std::shared_ptr<Group>> groups(world);
  run_ranks(world, [&](int rank) {
    GroupOptions options = quick_options(std::chrono::seconds(60));
    options.host = "127.0.0.1";
    options.node_id = node_of[rank];
    groups[rank] = Group::create(store, rank, world, options);
  });
  return groups;
}

}  // namespace

ModelFactory mlp() {
  return [] { return std::make_shared<Mlp>(); };
}
ModelFactory conv_batchnorm() {
  return [] { return std::make_shared<ConvBatchNorm>(); };
}
ModelFactory branchy(std::function<bool(int, int)> use_branch) {
  return [use_branch] { return std::make_shared<Branchy>(use_branch); };
}
ModelFactory reordered() {
  return [] { return std::make_shared<Reordered>(); };
}

torch::nn::Sequential layers(const std::vector<int64_t>& widths) {
  torch::nn::Sequential net;
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    net->push_back(torch::nn::Linear(widths[i], widths[i + 1]));
  }
  return net;
}

std::vector<std::string> errors_of(int world,
                                   const std::function<void(int, std::shared_ptr<Group>)>& body,
                                   bool over_tcp, bool shared_memory) {
  std::vector<std::string> errors(world);
  run_with_groups(
      world,
      [&](int rank, std::shared_ptr<Group> group) {
        try {
          body(rank, std::move(group));
        } catch (const MismatchError& e) {
          errors[rank] = std::string("MismatchError: ") + e.what();
        } catch (const std::exception& e) {
          errors[rank] = e.what();
        }
      },
      over_tcp, shared_memory);
  return errors;
}

void run_with_groups(int world, const std::function<void(int, std::shared_ptr<Group>)>& fn,
                     bool over_tcp, bool shared_memory) {
  auto groups = make_groups(world, over_tcp, shared_memory);
  run_ranks(world, [&](int rank) { fn(rank, groups[rank]); });
}

void run_with_groups_on_nodes(const std::vector<std::string>& node_of,
                              const std::function<void(int, std::shared_ptr<Group>)>& fn) {
  auto groups = make_groups_on_nodes(node_of);
  run_ranks(static_cast<int>(node_of.size()), [&](int rank) { fn(rank, groups[rank]); });
}

namespace {

// Rank r starts from seed 100 + r: DDP must make everyone start from rank 0's weights, which
// the reference (seed 100) shares.
std::shared_ptr<TestModel> make_model(const ParityCase& c) {
  auto model = c.make_model();
  for (const auto& name : c.frozen) {
    auto* parameter = model->named_parameters().find(name);
    if (parameter == nullptr) {
      ADD_FAILURE() << "no parameter '" << name << "' to freeze";
      continue;
    }
    parameter->set_requires_grad(false);
  }
  return model;
}

std::shared_ptr<TestModel> model_of_rank(const ParityCase& c, int rank) {
  torch::manual_seed(100 + rank);
  auto model = make_model(c);
  model->to(c.device);
  return model;
}

struct Reference {
  std::vector<std::string> names;
  std::vector<std::vector<torch::Tensor>> states;
};

Reference reference_run(const ParityCase& c, const std::vector<std::vector<Batch>>& data) {
  torch::manual_seed(100);
  auto model = make_model(c);
  model->to(c.device);
  return {state_names(*model), train_reference(c, *model, data)};
}

void expect_rank_matches(const ParityCase& c, int rank,
                         const std::vector<std::vector<torch::Tensor>>& states,
                         const Reference& reference) {
  const int steps = steps_of(c, rank);
  ASSERT_EQ(states.size(), static_cast<size_t>(steps + (c.steps_of_rank ? 1 : 0)))
      << "rank " << rank;
  for (int step = 0; step < steps; ++step) {
    const auto error = compare(c, states[step], reference.states[step], reference.names);
    ASSERT_EQ(error, "") << "world " << c.world << " rank " << rank << " step " << step;
  }
  if (c.steps_of_rank) {
    const auto error = compare(c, states.back(), reference.states.back(), reference.names);
    ASSERT_EQ(error, "") << "world " << c.world << " rank " << rank << " after join";
  }
}

}  // namespace

void expect_parity(const ParityCase& c) {
  torch::set_num_threads(1);
  const auto data = make_data(c);
  std::vector<std::shared_ptr<TestModel>> models;
  for (int rank = 0; rank < c.world; ++rank) models.push_back(model_of_rank(c, rank));
  const Reference reference = reference_run(c, data);

  std::vector<std::vector<std::vector<torch::Tensor>>> states(c.world);
  const auto groups = c.node_of.empty() ? make_groups(c.world, c.over_tcp, c.shared_memory)
                                        : make_groups_on_nodes(c.node_of);
  run_ranks(c.world, [&](int rank) {
    states[rank] = train_rank(c, rank, groups[rank], models[rank], data);
  });
  for (int rank = 0; rank < c.world; ++rank) {
    expect_rank_matches(c, rank, states[rank], reference);
  }
}

std::vector<std::vector<torch::Tensor>> final_states(const ParityCase& c) {
  torch::set_num_threads(1);
  const auto data = make_data(c);
  std::vector<std::shared_ptr<TestModel>> models;
  for (int rank = 0; rank < c.world; ++rank) models.push_back(model_of_rank(c, rank));
  std::vector<std::vector<torch::Tensor>> states(c.world);
  const auto groups = make_groups(c.world, c.over_tcp, c.shared_memory);
  run_ranks(c.world, [&](int rank) {
    states[rank] = train_rank(c, rank, groups[rank], models[rank], data).back();
  });
  return states;
}

void expect_parity_as_rank(const ParityCase& c, std::shared_ptr<Group> group) {
  ASSERT_EQ(group->size(), c.world) << "the case is for a world of " << c.world;
  torch::set_num_threads(1);
  const int rank = group->rank();
  const auto data = make_data(c);
  auto model = model_of_rank(c, rank);
  const Reference reference = reference_run(c, data);
  const auto states = train_rank(c, rank, std::move(group), model, data);
  expect_rank_matches(c, rank, states, reference);
}

}  // namespace cohort::testing
