#include "vocabulary.h"

#include <stdexcept>

namespace char_lm {

Vocabulary::Vocabulary(const std::vector<const std::string*>& texts) {
  std::array<bool, 256> seen{};
  for (const std::string* text : texts) {
    for (char c : *text) seen[static_cast<unsigned char>(c)] = true;
  }
  id_of_.fill(-1);
  for (int b = 0; b < 256; ++b) {
    if (!seen[b]) continue;
    id_of_[b] = static_cast<int64_t>(bytes_.size());
    bytes_.push_back(static_cast<unsigned char>(b));
  }
}

torch::Tensor Vocabulary::encode(const std::string& text) const {
  torch::Tensor tokens = torch::empty({static_cast<int64_t>(text.size())}, torch::kInt64);
  int64_t* out = tokens.data_ptr<int64_t>();
  for (char c : text) {
    const int64_t id = id_of_[static_cast<unsigned char>(c)];
    if (id < 0) {
      throw std::invalid_argument("the byte " + std::to_string(static_cast<unsigned char>(c)) +
                                  " is not in the vocabulary");
    }
    *out++ = id;
  }
  return tokens;
}

std::string Vocabulary::decode(const torch::Tensor& tokens) const {
  const torch::Tensor ids = tokens.to(torch::kInt64).contiguous();
  std::string text;
  for (int64_t i = 0; i < ids.numel(); ++i)
    text.push_back(static_cast<char>(bytes_.at(static_cast<size_t>(ids.data_ptr<int64_t>()[i]))));
  return text;
}

double unigram_entropy(const torch::Tensor& tokens, int64_t vocab) {
  const torch::Tensor counts = torch::bincount(tokens, {}, vocab).to(torch::kFloat64);
  const torch::Tensor p = counts.masked_select(counts > 0) / counts.sum();
  return -(p * p.log()).sum().item<double>();
}

}  // namespace char_lm
