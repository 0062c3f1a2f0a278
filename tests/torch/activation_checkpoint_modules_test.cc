// checkpoint_modules: the policy's choices, gradients bit for bit equal to the unwrapped model's
// (CPU, deterministic operators), the model's tree untouched, the errors for what cannot be
// checkpointed; and the memory a checkpointed model really saves, counted at the allocator.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "cohort/core/error.h"
#include "cohort/torch/activation_checkpoint/checkpoint_modules.h"
#include "cohort/torch/tensor_memory.h"

namespace cohort::testing {
namespace activation_checkpoint_modules_test {

// Width -> 4 width -> width with GELU, dropout and a residual: an MLP block of a transformer.
struct MlpBlockImpl : torch::nn::Module {
  explicit MlpBlockImpl(int64_t width, double dropout = 0.1) {
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})));
    up = register_module("up", torch::nn::Linear(width, 4 * width));
    down = register_module("down", torch::nn::Linear(4 * width, width));
    drop = register_module("drop", torch::nn::Dropout(dropout));
  }
  torch::Tensor forward(torch::Tensor x) { return x + drop(down(torch::gelu(up(norm(x))))); }
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear up{nullptr}, down{nullptr};
  torch::nn::Dropout drop{nullptr};
};
TORCH_MODULE(MlpBlock);

// Blocks in a Sequential named "blocks", a head outside it.
struct StackImpl : torch::nn::Module {
  StackImpl(int64_t blocks_count, int64_t width, double dropout = 0.1) {
    blocks = register_module("blocks", torch::nn::Sequential());
    for (int64_t i = 0; i < blocks_count; ++i) blocks->push_back(MlpBlock(width, dropout));
    head = register_module("head", torch::nn::Linear(width, 3));
  }
  torch::Tensor forward(torch::Tensor x) { return head(blocks->forward(x)); }
  torch::nn::Sequential blocks{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(Stack);

Stack make_stack(int64_t blocks_count = 4, int64_t width = 8) {
  torch::manual_seed(0);
  return Stack(blocks_count, width);
}

// Parameter gradients (by name) of forward -> sum of squares -> backward from seed 11.
std::vector<std::pair<std::string, torch::Tensor>> gradients(
    torch::nn::Module& model, const std::function<torch::Tensor(torch::Tensor)>& forward) {
  torch::manual_seed(5);
  const auto x = torch::randn({6, 5, 8});
  torch::manual_seed(11);
  forward(x).pow(2).sum().backward();
  std::vector<std::pair<std::string, torch::Tensor>> grads;
  for (auto& item : model.named_parameters()) {
    grads.push_back({item.key(), item.value().grad().clone()});
    item.value().mutable_grad() = torch::Tensor();
  }
  return grads;
}

void expect_same(const std::vector<std::pair<std::string, torch::Tensor>>& got,
                 const std::vector<std::pair<std::string, torch::Tensor>>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i].first);
    EXPECT_TRUE(torch::equal(got[i].second, want[i].second)) << got[i].first;
  }
}

bool uses_checkpoint_node(const torch::Tensor& y) {
  std::vector<torch::autograd::Node*> pending{y.grad_fn().get()};
  std::set<torch::autograd::Node*> seen;
  while (!pending.empty()) {
    auto* node = pending.back();
    pending.pop_back();
    if (node == nullptr || !seen.insert(node).second) continue;
    if (node->name() == "cohort::CheckpointBackward") return true;
    for (const auto& edge : node->next_edges()) pending.push_back(edge.function.get());
  }
  return false;
}

TEST(CheckpointModules, EverySequentialChildGivesTheSameGradientsAndLeavesTheTreeAlone) {
  Stack model = make_stack();
  const auto plain = gradients(*model, [&](torch::Tensor x) { return model(x); });
  std::vector<std::string> names_before;
  for (const auto& item : model->named_modules()) names_before.push_back(item.key());

  CheckpointPolicy policy;
  policy.sequential_children = true;
  EXPECT_EQ(checkpoint_modules(*model, policy),
            (std::vector<std::string>{"blocks.0", "blocks.1", "blocks.2", "blocks.3"}));
  const auto checkpointed = gradients(*model, [&](torch::Tensor x) { return model(x); });
  expect_same(checkpointed, plain);

  std::vector<std::string> names_after;
  for (const auto& item : model->named_modules()) names_after.push_back(item.key());
  EXPECT_EQ(names_after, names_before);
  EXPECT_TRUE(uses_checkpoint_node(model(torch::randn({2, 5, 8}))));
  model->eval();
  EXPECT_FALSE(uses_checkpoint_node(model(torch::randn({2, 5, 8}))));
}

// libtorch cannot put a torch::nn::Sequential into a Sequential (its forward() is a template,
// which the parent's type-erased handle cannot name): a subclass with a plain forward() can be
// (docs/activation_checkpointing.md, "A Sequential inside a Sequential"), and checkpoint_modules
// reaches the children of both levels, by path.
struct StageImpl : torch::nn::SequentialImpl {
  using SequentialImpl::SequentialImpl;
  torch::Tensor forward(torch::Tensor x) { return SequentialImpl::forward(x); }
};
TORCH_MODULE(Stage);

TEST(CheckpointModules, ASequentialInsideASequentialThroughASubclass) {
  auto make = [] {
    torch::manual_seed(0);
    return torch::nn::Sequential(Stage(MlpBlock(8), MlpBlock(8)), Stage(MlpBlock(8), MlpBlock(8)),
                                 torch::nn::Linear(8, 3));
  };
  torch::nn::Sequential model = make();
  const auto plain = gradients(*model, [&](torch::Tensor x) { return model->forward(x); });
  CheckpointPolicy inner;
  inner.paths = {"0.1", "1.0"};  // children of the inner Sequentials
  EXPECT_EQ(checkpoint_modules(*model, inner), (std::vector<std::string>{"0.1", "1.0"}));
  expect_same(gradients(*model, [&](torch::Tensor x) { return model->forward(x); }), plain);

  torch::nn::Sequential whole = make();
  CheckpointPolicy outer;
  outer.paths = {"0"};  // an inner Sequential itself, as one region
  EXPECT_EQ(checkpoint_modules(*whole, outer), (std::vector<std::string>{"0"}));
  EXPECT_TRUE(uses_checkpoint_node(whole->forward(torch::randn({2, 5, 8}))));
  whole->zero_grad();
  expect_same(gradients(*whole, [&](torch::Tensor x) { return whole->forward(x); }), plain);
}

TEST(CheckpointModules, EveryOtherBlockByPredicate) {
  Stack model = make_stack();
  const auto plain = gradients(*model, [&](torch::Tensor x) { return model(x); });
  CheckpointPolicy policy;
  policy.predicate = [](const std::string&, const torch::nn::Module& m) {
    return dynamic_cast<const MlpBlockImpl*>(&m) != nullptr;
  };
  policy.every = 2;
  EXPECT_EQ(checkpoint_modules(*model, policy), (std::vector<std::string>{"blocks.0", "blocks.2"}));
  expect_same(gradients(*model, [&](torch::Tensor x) { return model(x); }), plain);
}

TEST(CheckpointModules, ASpanOfASequentialWithBatchNormIsOneRegion) {
  torch::manual_seed(0);
  using namespace torch::nn;
  auto make = [] {
    torch::manual_seed(0);
    return Sequential(Conv2d(Conv2dOptions(1, 4, 3)), BatchNorm2d(4), ReLU(),
                      Conv2d(Conv2dOptions(4, 4, 3)), BatchNorm2d(4), ReLU(), MaxPool2d(2),
                      Flatten(), Linear(16, 3));
  };
  Sequential plain = make(), checkpointed = make();
  CheckpointPolicy policy;
  policy.spans = {{"", 0, 7}};
  EXPECT_EQ(checkpoint_modules(*checkpointed, policy), (std::vector<std::string>{"[0:7]"}));
  torch::manual_seed(2);
  const auto x = torch::randn({5, 1, 8, 8});
  auto grads = [&](Sequential& m) {
    m->forward(x).pow(2).sum().backward();
    std::vector<torch::Tensor> g;
    for (auto& p : m->parameters()) g.push_back(p.grad());
    return g;
  };
  const auto want = grads(plain), got = grads(checkpointed);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(torch::equal(got[i], want[i])) << i;
  const auto want_buffers = plain->buffers(), got_buffers = checkpointed->buffers();
  for (size_t i = 0; i < want_buffers.size(); ++i)
    EXPECT_TRUE(torch::equal(got_buffers[i], want_buffers[i])) << "buffer " << i;
}

// ---- what cannot be checkpointed

std::string error_of(torch::nn::Module& model, const CheckpointPolicy& policy) {
  try {
    checkpoint_modules(model, policy);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

struct ListModelImpl : torch::nn::Module {
  ListModelImpl() {
    list = register_module("list", torch::nn::ModuleList(torch::nn::Linear(4, 4)));
    member = register_module("member", torch::nn::Linear(4, 4));
  }
  torch::nn::ModuleList list{nullptr};
  torch::nn::Linear member{nullptr};
};

TEST(CheckpointModulesErrors, WhatNoHookReachesIsRefusedWithWhatToDoInstead) {
  ListModelImpl model;
  CheckpointPolicy policy;
  policy.paths = {"list.0"};
  const std::string list_error = error_of(model, policy);
  EXPECT_NE(list_error.find("is held by a torch::nn::ModuleList"), std::string::npos) << list_error;
  EXPECT_NE(list_error.find("cohort::checkpoint(module, x)"), std::string::npos) << list_error;
  policy.paths = {"member"};
  const std::string member_error = error_of(model, policy);
  EXPECT_NE(member_error.find("whose forward() calls it directly"), std::string::npos)
      << member_error;
  policy.paths = {"nowhere"};
  EXPECT_NE(error_of(model, policy).find("no submodule is named 'nowhere'"), std::string::npos);
}

TEST(CheckpointModulesErrors, AModuleCheckpointedTwiceIsRefused) {
  Stack model = make_stack();
  CheckpointPolicy policy;
  policy.paths = {"blocks.1"};
  checkpoint_modules(*model, policy);
  EXPECT_NE(error_of(*model, policy).find("is checkpointed already"), std::string::npos);
  CheckpointPolicy span;
  span.spans = {{"blocks", 0, 2}};
  EXPECT_NE(error_of(*model, span).find("is checkpointed already"), std::string::npos);
}

TEST(CheckpointModulesErrors, ARegionReturningANonTensorIsRefused) {
  torch::nn::Sequential model(torch::nn::LSTM(4, 4));  // returns (output, (h, c))
  CheckpointPolicy policy;
  policy.sequential_children = true;
  checkpoint_modules(*model, policy);
  try {
    model->forward<std::tuple<torch::Tensor, std::tuple<torch::Tensor, torch::Tensor>>>(
        torch::randn({2, 1, 4}));
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("returned a std::tuple"), std::string::npos) << e.what();
  }
}

TEST(CheckpointModulesErrors, BadPolicies) {
  Stack model = make_stack();
  CheckpointPolicy nothing;
  EXPECT_NE(error_of(*model, nothing).find("chose nothing"), std::string::npos);
  CheckpointPolicy zero;
  zero.sequential_children = true;
  zero.every = 0;
  EXPECT_NE(error_of(*model, zero).find("every must be at least 1"), std::string::npos);
  CheckpointPolicy beyond;
  beyond.spans = {{"blocks", 2, 9}};
  EXPECT_NE(error_of(*model, beyond).find("beyond its 4 children"), std::string::npos);
}

// ---- memory

// Peak CPU tensor bytes of one forward and backward of `blocks_count` blocks, above what is
// held before it (the model, its gradients from a first step, the input).
int64_t step_peak_bytes(int64_t blocks_count, bool checkpointed) {
  track_cpu_tensor_memory();
  Stack model = make_stack(blocks_count, 64);
  if (checkpointed) {
    CheckpointPolicy policy;
    policy.sequential_children = true;
    checkpoint_modules(*model, policy);
  }
  const auto x = torch::randn({32, 16, 64});
  model(x).pow(2).sum().backward();  // the gradients exist from now on
  const int64_t before = cpu_tensor_bytes();
  reset_peak_cpu_tensor_bytes();
  model(x).pow(2).sum().backward();
  return peak_cpu_tensor_bytes() - before;
}

TEST(CheckpointModulesMemory, PeakGrowsWithOneBlocksActivationsInsteadOfAllOfThem) {
  const int64_t plain4 = step_peak_bytes(4, false), plain8 = step_peak_bytes(8, false);
  const int64_t checkpointed4 = step_peak_bytes(4, true);
  const int64_t checkpointed8 = step_peak_bytes(8, true);
  // Without checkpointing each block keeps its activations (about 10 tensors of the block's
  // width or 4x it), with it only its input: 4 more blocks add far less.
  const int64_t per_block_plain = (plain8 - plain4) / 4;
  const int64_t per_block_checkpointed = (checkpointed8 - checkpointed4) / 4;
  const int64_t boundary = 32 * 16 * 64 * 4;  // one block's input, float32
  EXPECT_GT(per_block_plain, 8 * boundary) << plain4 << " " << plain8;
  EXPECT_LE(per_block_checkpointed, 2 * boundary) << checkpointed4 << " " << checkpointed8;
  EXPECT_LT(checkpointed8, plain8 / 3) << checkpointed8 << " vs " << plain8;
}

}  // namespace activation_checkpoint_modules_test
}  // namespace cohort::testing
