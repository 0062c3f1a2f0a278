// optimizer_state_bytes (cohort/torch/ddp/ddp.h): libtorch's optimizer states have no common way
// to list their tensors, so each known state type is asked for its own.
#include <torch/torch.h>

#include "cohort/torch/ddp/ddp.h"
#include "cohort/torch/optim/lamb.h"
#include "cohort/torch/optim/lars.h"

namespace cohort {
namespace {

size_t bytes_of(const torch::Tensor& tensor) {
  return tensor.defined() ? static_cast<size_t>(tensor.nbytes()) : 0;
}

size_t state_bytes(const torch::optim::OptimizerParamState& state) {
  using namespace torch::optim;
  if (const auto* s = dynamic_cast<const SGDParamState*>(&state)) {
    return bytes_of(s->momentum_buffer());
  }
  if (const auto* s = dynamic_cast<const AdamParamState*>(&state)) {
    return bytes_of(s->exp_avg()) + bytes_of(s->exp_avg_sq()) + bytes_of(s->max_exp_avg_sq());
  }
  if (const auto* s = dynamic_cast<const AdamWParamState*>(&state)) {
    return bytes_of(s->exp_avg()) + bytes_of(s->exp_avg_sq()) + bytes_of(s->max_exp_avg_sq());
  }
  if (const auto* s = dynamic_cast<const AdagradParamState*>(&state)) {
    return bytes_of(s->sum());
  }
  if (const auto* s = dynamic_cast<const RMSpropParamState*>(&state)) {
    return bytes_of(s->square_avg()) + bytes_of(s->momentum_buffer()) + bytes_of(s->grad_avg());
  }
  if (const auto* s = dynamic_cast<const cohort::optim::LarsParamState*>(&state)) {
    return bytes_of(s->momentum_buffer());
  }
  if (const auto* s = dynamic_cast<const cohort::optim::LambParamState*>(&state)) {
    return bytes_of(s->exp_avg()) + bytes_of(s->exp_avg_sq());
  }
  return 0;
}

}  // namespace

size_t optimizer_state_bytes(const torch::optim::Optimizer& optimizer) {
  size_t bytes = 0;
  for (const auto& entry : optimizer.state()) bytes += state_bytes(*entry.second);
  return bytes;
}

}  // namespace cohort
