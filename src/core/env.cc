#include "cohort/core/env.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "cohort/core/error.h"

namespace cohort {

std::optional<std::string> env_string(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

std::optional<int64_t> env_int(const char* name) {
  auto text = env_string(name);
  if (!text) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text->c_str(), &end, 10);
  if (errno != 0 || end == text->c_str() || *end != '\0') {
    throw ConfigError(std::string("environment variable ") + name + "='" + *text +
                      "' is not an integer");
  }
  return static_cast<int64_t>(v);
}

std::optional<double> env_double(const char* name) {
  auto text = env_string(name);
  if (!text) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text->c_str(), &end);
  if (errno != 0 || end == text->c_str() || *end != '\0' || !std::isfinite(v)) {
    throw ConfigError(std::string("environment variable ") + name + "='" + *text +
                      "' is not a number");
  }
  return v;
}

}  // namespace cohort
