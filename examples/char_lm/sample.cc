#include "sample.h"

#include <ATen/CPUGeneratorImpl.h>

namespace char_lm {

std::string generate_text(Gpt& model, const Vocabulary& vocabulary, const std::string& prompt,
                          int64_t characters, double temperature, uint64_t seed) {
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  torch::Tensor tokens = vocabulary.encode(prompt).unsqueeze(0);
  const int64_t context = model->config().context;
  for (int64_t i = 0; i < characters; ++i) {
    const int64_t seen = std::min(context, tokens.size(1));
    const torch::Tensor logits =
        model->forward(tokens.slice(1, tokens.size(1) - seen)).select(1, -1);
    const torch::Tensor p = torch::softmax(logits / temperature, -1);
    tokens = torch::cat({tokens, torch::multinomial(p, 1, false, generator)}, 1);
  }
  model->train(was_training);
  return vocabulary.decode(tokens.squeeze(0).slice(0, static_cast<int64_t>(prompt.size())));
}

}  // namespace char_lm
