#include "cohort/torch/compress/powersgd.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>

#include "call_sites.h"
#include "cohort/core/error.h"
#include "cohort/torch/tensor_buffer.h"

namespace cohort {

// A compressed tensor: the n x m matrix at `offset` in the bucket, where its P and Q lie in the
// two rounds' buffers, and its Q (m x r), the same on every rank (drawn from a shared seed,
// then the average of the ranks' Q).
struct PowerSgdHook::Matrix {
  int64_t offset = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t rank = 0;  // r, at most min(rows, cols)
  int64_t p_offset = 0;
  int64_t q_offset = 0;
  torch::Tensor q;
};

// One bucket's split into compressed matrices and tensors sent whole (as [offset, numel]).
// Round 1's buffer holds every P back to back, then the whole tensors; round 2's every Q.
struct PowerSgdHook::BucketPlan {
  int64_t numel = 0;
  std::vector<const void*> layout;  // CompressionHook::layout_of the bucket planned
  std::vector<Matrix> matrices;
  std::vector<std::pair<int64_t, int64_t>> whole;
  int64_t p_numel = 0;
  int64_t q_numel = 0;
  int64_t whole_numel = 0;
};

namespace {

using Plan = PowerSgdHook::BucketPlan;
using Matrix = PowerSgdHook::Matrix;

CollectiveOptions sum_options(const torch::Tensor& like) {
  CollectiveOptions options;
  options.op = ReduceOp::kSum;
  options.site = call_sites::kDdpGradients;
  options.stream = current_stream(like);
  return options;
}

torch::Generator shared_generator(const PowerSgdOptions& options, int64_t iteration,
                                  size_t bucket) {
  return at::make_generator<at::CPUGeneratorImpl>(mix_seed(options.seed, iteration, bucket, 0));
}

// Fresh random Q for every matrix of the plan, alike on every rank.
void draw_q(Plan& plan, torch::Generator generator, const torch::TensorOptions& options) {
  for (auto& matrix : plan.matrices) {
    matrix.q = torch::randn({matrix.cols, matrix.rank}, generator, torch::kFloat32).to(options);
  }
}

torch::Tensor matrix_in(const torch::Tensor& flat, const Matrix& matrix) {
  return flat.narrow(0, matrix.offset, matrix.rows * matrix.cols).view({matrix.rows, matrix.cols});
}
torch::Tensor p_in(const torch::Tensor& round1, const Matrix& matrix) {
  return round1.narrow(0, matrix.p_offset, matrix.rows * matrix.rank)
      .view({matrix.rows, matrix.rank});
}
torch::Tensor q_in(const torch::Tensor& round2, const Matrix& matrix) {
  return round2.narrow(0, matrix.q_offset, matrix.cols * matrix.rank)
      .view({matrix.cols, matrix.rank});
}

void fill_round_one(const Plan& plan, const torch::Tensor& compensated, torch::Tensor& round1) {
  for (const auto& matrix : plan.matrices) {
    auto p = p_in(round1, matrix);
    torch::mm_out(p, matrix_in(compensated, matrix), matrix.q);
  }
  int64_t at = plan.p_numel;
  for (const auto& [offset, numel] : plan.whole) {
    round1.narrow(0, at, numel).copy_(compensated.narrow(0, offset, numel));
    at += numel;
  }
}

// What this rank sent, decompressed: its own P Q^T before Q is averaged, and the whole tensors.
torch::Tensor sent_by_this_rank(const Plan& plan, const torch::Tensor& compensated,
                                const std::vector<torch::Tensor>& orthogonal_p,
                                const torch::Tensor& round2) {
  auto sent = compensated.clone();
  for (size_t i = 0; i < plan.matrices.size(); ++i) {
    const Matrix& matrix = plan.matrices[i];
    matrix_in(sent, matrix).copy_(torch::mm(orthogonal_p[i], q_in(round2, matrix).t()));
  }
  return sent;
}

// The bucket becomes P Q^T with the averaged Q, and the average of the whole tensors.
void write_average(const Plan& plan, const std::vector<torch::Tensor>& orthogonal_p,
                   const torch::Tensor& round1, const torch::Tensor& round2, int world,
                   torch::Tensor& bucket) {
  for (size_t i = 0; i < plan.matrices.size(); ++i) {
    auto average = matrix_in(bucket, plan.matrices[i]);
    torch::mm_out(average, orthogonal_p[i], q_in(round2, plan.matrices[i]).t());
  }
  int64_t at = plan.p_numel;
  for (const auto& [offset, numel] : plan.whole) {
    bucket.narrow(0, offset, numel).copy_(round1.narrow(0, at, numel)).div_(world);
    at += numel;
  }
}

}  // namespace

PowerSgdHook::PowerSgdHook(PowerSgdOptions options) : options_(options) {
  if (options_.rank < 1) {
    throw InvalidArgument("powersgd hook: rank must be at least 1 (got " +
                          std::to_string(options_.rank) + "); 1 to 4 is usual");
  }
  if (options_.start_iter < 0 || options_.min_compression_rate < 0) {
    throw InvalidArgument(
        "powersgd hook: start_iter and min_compression_rate must not be negative (got " +
        std::to_string(options_.start_iter) + " and " +
        std::to_string(options_.min_compression_rate) + ")");
  }
}

std::shared_ptr<PowerSgdHook::BucketPlan> PowerSgdHook::plan_for(const GradBucket& bucket) {
  if (plans_.size() <= bucket.index) plans_.resize(bucket.index + 1);
  auto& plan = plans_[bucket.index];
  auto layout = layout_of(bucket);
  if (plan && plan->numel == bucket.buffer.numel() && plan->layout == layout) return plan;
  // First use, or the bucket was rebuilt (GradBucket::iteration): plan it again.
  plan = std::make_shared<BucketPlan>();
  plan->numel = bucket.buffer.numel();
  plan->layout = std::move(layout);
  if (bucket.gradients.empty())
    fail(bucket, "the bucket lists no gradients to shape matrices from");
  for (const auto& gradient : bucket.gradients) {
    const int64_t offset = gradient.storage_offset() - bucket.buffer.storage_offset();
    const int64_t numel = gradient.numel();
    if (numel == 0) continue;
    const int64_t rows = gradient.dim() >= 2 ? gradient.size(0) : 1;
    const int64_t cols = numel / rows;
    const int64_t rank = gradient.dim() >= 2 ? powersgd_matrix_rank(rows, cols, options_) : 0;
    if (rank > 0) {
      plan->matrices.push_back(Matrix{offset, rows, cols, rank, plan->p_numel, plan->q_numel, {}});
      plan->p_numel += rows * rank;
      plan->q_numel += cols * rank;
    } else {
      plan->whole.emplace_back(offset, numel);
      plan->whole_numel += numel;
    }
  }
  draw_q(*plan, shared_generator(options_, 0, bucket.index), bucket.buffer.options());
  return plan;
}

PendingReduction PowerSgdHook::start(Group& group, GradBucket& bucket) {
  require_float32(bucket);
  if (bucket.iteration < options_.start_iter) return allreduce_->start(group, bucket);
  auto plan = plan_for(bucket);
  if (!options_.warm_start) {
    draw_q(*plan, shared_generator(options_, bucket.iteration, bucket.index),
           bucket.buffer.options());
  }
  auto compensated_gradient = options_.error_feedback ? compensated(bucket) : bucket.buffer.clone();
  auto round1 = torch::empty({plan->p_numel + plan->whole_numel}, bucket.buffer.options());
  fill_round_one(*plan, compensated_gradient, round1);
  auto work = group.allreduce_async(tensor_buffer(round1), sum_options(round1));

  Group* reducing_group = &group;
  GradBucket target = bucket;
  auto finish = [this, plan, compensated_gradient, round1, reducing_group, target]() mutable {
    finish_round_two(*reducing_group, *plan, target, compensated_gradient, round1);
  };
  const auto wire_bytes = static_cast<size_t>(round1.nbytes() + plan->q_numel * sizeof(float));
  return {std::move(work), std::move(finish), round1, wire_bytes};
}

// Steps 2 and 3 of the header's comment, when round 1's sum of P has arrived.
void PowerSgdHook::finish_round_two(Group& group, BucketPlan& plan, GradBucket& bucket,
                                    const torch::Tensor& compensated_gradient,
                                    const torch::Tensor& round1) {
  auto round2 = torch::empty({plan.q_numel}, round1.options());
  std::vector<torch::Tensor> orthogonal_p;
  for (const auto& matrix : plan.matrices) {
    orthogonal_p.push_back(std::get<0>(torch::linalg_qr(p_in(round1, matrix))));
    auto q = q_in(round2, matrix);
    torch::mm_out(q, matrix_in(compensated_gradient, matrix).t(), orthogonal_p.back());
  }
  if (options_.error_feedback) {
    keep_residual(bucket, compensated_gradient,
                  sent_by_this_rank(plan, compensated_gradient, orthogonal_p, round2));
  }
  if (plan.q_numel > 0) group.allreduce(tensor_buffer(round2), sum_options(round2));
  round2.div_(group.size());
  write_average(plan, orthogonal_p, round1, round2, group.size(), bucket.buffer);
  if (!options_.warm_start) return;
  for (auto& matrix : plan.matrices) matrix.q = q_in(round2, matrix).clone();
}

std::shared_ptr<PowerSgdHook> powersgd_hook(PowerSgdOptions options) {
  return std::make_shared<PowerSgdHook>(options);
}

int64_t powersgd_matrix_rank(int64_t rows, int64_t cols, const PowerSgdOptions& options) {
  const int64_t rank = std::min<int64_t>({options.rank, rows, cols});
  const bool gains = static_cast<double>(rows) * static_cast<double>(cols) >=
                     options.min_compression_rate * static_cast<double>(rank * (rows + cols));
  return gains ? rank : 0;
}

}  // namespace cohort
