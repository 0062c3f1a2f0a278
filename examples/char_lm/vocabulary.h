// The characters a character-level model reads and writes: the distinct bytes of its text,
// each given a token id (in byte order). Bytes, not Unicode code points: the fortunes are
// nearly all ASCII, and the few UTF-8 letters become two or three tokens.
#pragma once

#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace char_lm {

class Vocabulary {
 public:
  Vocabulary() = default;
  // The bytes that occur in any of `texts`.
  explicit Vocabulary(const std::vector<const std::string*>& texts);

  int64_t size() const { return static_cast<int64_t>(bytes_.size()); }
  // int64 [text.size()]. Throws std::invalid_argument for a byte outside the vocabulary.
  torch::Tensor encode(const std::string& text) const;
  std::string decode(const torch::Tensor& tokens) const;

 private:
  std::vector<unsigned char> bytes_;  // by token id
  std::array<int64_t, 256> id_of_{};  // by byte; -1: not in the vocabulary
};

// Entropy, in nats, of the token frequencies of `tokens` (int64, ids below `vocab`): the loss
// per character of the best model that ignores context, the baseline a language model must beat.
double unigram_entropy(const torch::Tensor& tokens, int64_t vocab);

}  // namespace char_lm
