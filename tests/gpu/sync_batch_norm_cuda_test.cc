// SyncBatchNorm on CUDA tensors against torch's own BatchNorm on the whole global batch, on the
// same GPU: W rank processes (this binary again) over a TCP group (the statistics travel
// through host memory) or a staged group of it (device buffers staged by cohort), and a world
// of one over an NCCL group. Processes, not threads: the
// autograd engine runs every CUDA backward of a process on one thread per device, so two thread
// ranks blocked in SyncBatchNorm's backward allreduce would wait for each other forever.
// Tolerance |got - want| <= tol/10 + tol |want|: 1e-4 in float32 (cuDNN's and cohort's sums in
// other orders), 3e-2 for bfloat16 inputs. Skipped where there is no GPU or libtorch has no
// CUDA. With COHORT_SYNCBN_DUMP=<dir>, each rank writes its output and input gradient there as
// raw float32 (out_<case>_<rank>.bin, grad_...), for tests/gpu/pytorch_sync_batch_norm.py.
#ifdef COHORT_TEST_WITH_TORCH

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <fstream>
#include <numeric>
#include <sstream>
#include <vector>

#include "cohort/comm/cuda_staging.h"
#include "cohort/comm/init.h"
#include "cohort/comm/nccl.h"
#include "cohort/torch/nn/sync_batch_norm.h"
#include "cohort/torch/tensor_buffer.h"
#include "gpu/gpu_support.h"

namespace cohort {
namespace sync_batch_norm_cuda_test {

#define COHORT_REQUIRE_TORCH_CUDA()                                                \
  do {                                                                             \
    COHORT_REQUIRE_GPUS(1);                                                        \
    if (!torch::cuda::is_available()) GTEST_SKIP() << "this libtorch has no CUDA"; \
  } while (0)

void expect_close(const torch::Tensor& got, const torch::Tensor& want, const std::string& what,
                  double tol) {
  const torch::Tensor g = got.to(torch::kCPU, torch::kDouble);
  const torch::Tensor w = want.to(torch::kCPU, torch::kDouble);
  ASSERT_EQ(g.sizes(), w.sizes()) << what;
  EXPECT_TRUE(((g - w).abs() <= tol / 10 + tol * w.abs()).all().item<bool>())
      << what << ": max |diff| " << (g - w).abs().max().item<double>();
}

std::vector<int64_t> parse_sizes(const std::string& text) {
  std::vector<int64_t> sizes;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) sizes.push_back(std::stoll(item));
  return sizes;
}

void dump(const torch::Tensor& t, const std::string& name) {
  const char* dir = std::getenv("COHORT_SYNCBN_DUMP");
  if (dir == nullptr) return;
  const torch::Tensor host = t.to(torch::kCPU, torch::kFloat).contiguous();
  std::ofstream(std::string(dir) + "/" + name + ".bin", std::ios::binary)
      .write(static_cast<const char*>(host.data_ptr()), host.numel() * sizeof(float));
}

// One rank of a job started by run_job: takes its slice of one CUDA batch (the same on every
// rank: seeded on the CPU); its output and input gradient must be the slices of the
// reference's, and the ranks' weight gradients must add up to the reference's.
TEST(SyncBatchNormCuda, DISABLED_RankOfAJob) {
  const std::vector<int64_t> sizes = parse_sizes(std::getenv("COHORT_TEST_SIZES"));
  const bool bf16 = std::string(std::getenv("COHORT_TEST_DTYPE")) == "bf16";
  const double tol = bf16 ? 3e-2 : 1e-4;
  auto group = cohort::init();
  if (std::string(std::getenv("COHORT_TEST_GROUP")) == "staged") {
    group = create_cuda_staged_group(group);
    EXPECT_TRUE(group->takes_device_buffers());
  }
  const int rank = group->rank();
  const torch::Device gpu(torch::kCUDA, 0);
  const int64_t global = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  torch::manual_seed(5);
  const torch::Tensor input = (torch::randn({global, 6, 5, 5}) * 3 + 1).to(gpu);
  const torch::Tensor upstream = torch::randn({global, 6, 5, 5}).to(gpu);
  torch::Tensor ref_in = input.clone().requires_grad_();
  torch::Tensor ref_w = torch::ones({6}, gpu).requires_grad_();
  torch::Tensor ref_b = torch::zeros({6}, gpu).requires_grad_();
  torch::Tensor ref_mean = torch::zeros({6}, gpu), ref_var = torch::ones({6}, gpu);
  const torch::Tensor ref_out =
      torch::batch_norm(ref_in, ref_w, ref_b, ref_mean, ref_var, true, 0.1, 1e-5, true);
  (ref_out * upstream).sum().backward();

  std::vector<int64_t> starts(sizes.size() + 1, 0);
  std::partial_sum(sizes.begin(), sizes.end(), starts.begin() + 1);
  const int64_t begin = starts[rank], end = starts[rank + 1];
  nn::SyncBatchNorm layer(torch::nn::BatchNormOptions(6), group);
  layer->to(gpu);
  torch::Tensor in = input.slice(0, begin, end)
                         .to(bf16 ? torch::kBFloat16 : torch::kFloat)
                         .detach()
                         .requires_grad_();
  const torch::Tensor out = layer->forward(in);
  EXPECT_EQ(out.device(), gpu);
  expect_close(out, ref_out.slice(0, begin, end), "output", tol);
  (out.to(torch::kFloat) * upstream.slice(0, begin, end)).sum().backward();
  expect_close(in.grad(), ref_in.grad().slice(0, begin, end), "input gradient", tol);
  expect_close(layer->running_var, ref_var, "running_var", tol);
  const std::string name = std::getenv("COHORT_TEST_SIZES") + std::string("_") +
                           std::getenv("COHORT_TEST_DTYPE") + "_" + std::to_string(rank);
  dump(out, "out_" + name);
  dump(in.grad(), "grad_" + name);
  torch::Tensor weight_grads = layer->weight.grad().to(torch::kCPU).contiguous();
  group->allreduce(tensor_buffer(weight_grads));
  expect_close(weight_grads, ref_w.grad(), "weight gradients summed", tol);
  // The exit code tells the parent (gtest's result alone would not fail the process).
  std::exit(::testing::Test::HasFailure() ? 1 : 0);
}

// Starts one process per entry of `sizes` running DISABLED_RankOfAJob; each must exit 0.
// group: "host" (the statistics through host memory) or "staged" (create_cuda_staged_group:
// device buffers staged by cohort).
void run_job(const std::string& sizes, const std::string& dtype, const std::string& group = "host") {
  const int world = static_cast<int>(parse_sizes(sizes).size());
  testing::run_rank_processes(world, "SyncBatchNormCuda.DISABLED_RankOfAJob",
                              {"COHORT_TEST_SIZES=" + sizes, "COHORT_TEST_DTYPE=" + dtype,
                               "COHORT_TEST_GROUP=" + group});
}

TEST(SyncBatchNormCuda, Float32ThroughAHostGroup) {
  COHORT_REQUIRE_TORCH_CUDA();
  run_job("4,4", "fp32");
  run_job("3,0,5,2", "fp32");
}

// Statistics and gradients reduced on the device buffers, staged by cohort through host memory.
TEST(SyncBatchNormCuda, Float32ThroughAStagedGroup) {
  COHORT_REQUIRE_TORCH_CUDA();
  run_job("4,4", "fp32", "staged");
  run_job("3,0,5,2", "fp32", "staged");
}

TEST(SyncBatchNormCuda, BFloat16ThroughAStagedGroup) {
  COHORT_REQUIRE_TORCH_CUDA();
  run_job("5,3", "bf16", "staged");
}

TEST(SyncBatchNormCuda, BFloat16ThroughAHostGroup) {
  COHORT_REQUIRE_TORCH_CUDA();
  run_job("5,3", "bf16");
}

// A world of one over NCCL: the group takes device buffers, and the layer is torch's BatchNorm.
TEST(SyncBatchNormCuda, OneRankOverNccl) {
  COHORT_REQUIRE_TORCH_CUDA();
  testing::with_nccl_groups(1, [](int, Group& nccl) {
    EXPECT_TRUE(nccl.takes_device_buffers());
    const torch::Device gpu(torch::kCUDA, 0);
    // with_nccl_groups lends the group: a non-owning shared_ptr for the layer's lifetime.
    std::shared_ptr<Group> group(&nccl, [](Group*) {});
    nn::SyncBatchNorm layer(torch::nn::BatchNormOptions(4), group);
    torch::nn::BatchNorm2d plain(4);
    layer->to(gpu);
    plain->to(gpu);
    const torch::Tensor x = torch::randn({8, 4, 3, 3}, gpu);
    expect_close(layer->forward(x), plain->forward(x), "output", 1e-5);
    expect_close(layer->running_mean, plain->running_mean, "running_mean", 1e-5);
  });
}

}  // namespace sync_batch_norm_cuda_test
}  // namespace cohort

#endif  // COHORT_TEST_WITH_TORCH
