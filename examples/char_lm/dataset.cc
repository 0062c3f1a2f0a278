#include "dataset.h"

#include <vector>

#include "fortune_files.h"

namespace char_lm {

namespace {

// The entries end to end, each followed by the "%\n" that separates them in the files: the
// model learns where a fortune ends.
std::string join_entries(const std::vector<std::string>& entries, bool validation) {
  std::string text;
  for (size_t i = 0; i < entries.size(); ++i) {
    const bool held_out = (static_cast<int64_t>(i) + 1) % kValidationEvery == 0;
    if (held_out == validation) text += entries[i] + "%\n";
  }
  return text;
}

void check_long_enough(const std::string& dir, const std::string& text, const char* split,
                       int64_t context) {
  if (static_cast<int64_t>(text.size()) > context) return;
  throw DataError("the fortune files in '" + dir + "' give " + std::to_string(text.size()) +
                  " characters of " + split + " text, too few for one window of --context " +
                  std::to_string(context) + ": give more text or a shorter context");
}

}  // namespace

CharData load_char_data(const std::string& dir, int64_t context) {
  const std::vector<std::string> entries = read_fortune_entries(dir);
  const std::string train_text = join_entries(entries, false);
  const std::string validation_text = join_entries(entries, true);
  check_long_enough(dir, train_text, "training", context);
  check_long_enough(dir, validation_text, "validation", context);
  CharData data;
  data.vocabulary = Vocabulary({&train_text, &validation_text});
  data.train = data.vocabulary.encode(train_text);
  data.validation = data.vocabulary.encode(validation_text);
  data.unigram_entropy = unigram_entropy(data.train, data.vocabulary.size());
  return data;
}

// The last window needs one token after it for its last target.
TextWindows::TextWindows(torch::Tensor tokens, int64_t context)
    : tokens_(std::move(tokens)), context_(context), windows_((tokens_.numel() - 1) / context) {}

torch::data::Example<> TextWindows::windows_at(const torch::Tensor& starts) const {
  const torch::Tensor offsets = torch::arange(context_, torch::kInt64);
  const torch::Tensor positions = starts.unsqueeze(1) + offsets.unsqueeze(0);
  return {tokens_.index({positions}), tokens_.index({positions + 1})};
}

torch::data::Example<> TextWindows::get_batch(c10::ArrayRef<size_t> indices) {
  std::vector<int64_t> starts;
  starts.reserve(indices.size());
  for (size_t i : indices) starts.push_back(static_cast<int64_t>(i) * context_);
  return windows_at(torch::tensor(starts, torch::kInt64));
}

torch::data::Example<> TextWindows::range(int64_t begin, int64_t end) const {
  return windows_at(torch::arange(begin, end, torch::kInt64) * context_);
}

}  // namespace char_lm
