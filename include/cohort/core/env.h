// Reading knobs from the environment. Each knob is declared next to the code that reads it
// (docs/architecture.md, "Conventions") and listed in docs/env.md; these helpers only parse and validate.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace cohort {

// The variable's value, or nullopt when it is unset or empty.
std::optional<std::string> env_string(const char* name);
// Parsed values; a malformed value throws ConfigError naming the variable and what was expected.
std::optional<int64_t> env_int(const char* name);
std::optional<double> env_double(const char* name);

}  // namespace cohort
