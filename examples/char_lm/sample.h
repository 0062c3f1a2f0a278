// Text written by the model, one character at a time: what a reader can judge at a glance
// (does it look like English? like a fortune?), beside the loss figures.
#pragma once

#include <cstdint>
#include <string>

#include "gpt.h"
#include "vocabulary.h"

namespace char_lm {

// The sample both trainers print at the end: it starts a new fortune ("%\n" ends the one before
// it in the text), at a temperature that keeps it readable.
inline const char* const kSamplePrompt = "%\n";
inline constexpr double kSampleTemperature = 0.8;

// `characters` characters that follow `prompt` (whose characters must be in `vocabulary`),
// drawn from the model's next-character distribution sharpened by `temperature` (< 1: likelier
// characters more often). Deterministic for a `seed`; leaves torch's default generator alone.
std::string generate_text(Gpt& model, const Vocabulary& vocabulary, const std::string& prompt,
                          int64_t characters, double temperature, uint64_t seed);

}  // namespace char_lm
