// The char_lm data: the fortunes as one stream of character tokens for training and one for
// validation, and a torch::data data set of (input, target) windows over a stream.
#pragma once

#include <torch/torch.h>

#include <string>

#include "vocabulary.h"

namespace char_lm {

// Every kValidationEvery-th entry (the 20th, 40th, ...) is held out for validation: 5% of the
// text, spread over every file, the same split on every rank and in every run.
inline constexpr int64_t kValidationEvery = 20;

struct CharData {
  Vocabulary vocabulary;       // of both streams, so validation has no unknown character
  torch::Tensor train;         // int64 token ids, the entries in order, each ending in "%\n"
  torch::Tensor validation;    // the same, for the held-out entries
  double unigram_entropy = 0;  // of the training stream's characters, in nats
};

// Reads the fortune files of `dir` (fortune_files.h). Throws DataError naming the path when
// they are missing, or when there is too little text for one window of `context` characters.
CharData load_char_data(const std::string& dir, int64_t context);

// Windows of `context` tokens cut from a stream end to end (window i starts at i * context):
// the input is tokens [s, s + context) and the target the same shifted by one, [s + 1, s +
// context + 1), so each position is trained to predict the next character.
class TextWindows
    : public torch::data::datasets::BatchDataset<TextWindows, torch::data::Example<>> {
 public:
  TextWindows(torch::Tensor tokens, int64_t context);
  // data and target: int64 [indices.size(), context]
  torch::data::Example<> get_batch(c10::ArrayRef<size_t> indices) override;
  torch::optional<size_t> size() const override { return static_cast<size_t>(windows_); }
  // Windows [begin, end) in order, for evaluation.
  torch::data::Example<> range(int64_t begin, int64_t end) const;

 private:
  torch::data::Example<> windows_at(const torch::Tensor& starts) const;

  torch::Tensor tokens_;
  int64_t context_;
  int64_t windows_;
};

}  // namespace char_lm
