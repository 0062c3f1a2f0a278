// The validation loss both char_lm trainers report (docs/char_lm.md): the same number for the
// same model, whichever trainer ran and at whatever world size.
#pragma once

#include <torch/torch.h>

#include <functional>

#include "cohort/comm/group.h"
#include "dataset.h"

namespace char_lm {

// A batch's cross-entropy of the next character, summed over its characters.
using SummedLoss = std::function<torch::Tensor(const torch::data::Example<>&)>;

// Nats per character over the validation windows, split evenly over the ranks of `group` (the
// few windows left after an even split are not counted): collective. Runs without gradients;
// the caller puts the model in eval mode.
double validation_loss(cohort::Group& group, const TextWindows& validation,
                       const SummedLoss& summed_loss);

}  // namespace char_lm
