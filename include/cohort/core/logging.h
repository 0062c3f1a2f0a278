// Minimal leveled logging to stderr. COHORT_LOG_LEVEL=debug|info|warn|error (default warn).
#pragma once

#include <string>

#include "cohort/core/check.h"

namespace cohort {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

bool log_enabled(LogLevel level);
void log_message(LogLevel level, const std::string& message);

}  // namespace cohort

#define COHORT_LOG(level, ...)                                                        \
  do {                                                                                \
    if (::cohort::log_enabled(::cohort::LogLevel::level)) {                           \
      ::cohort::log_message(::cohort::LogLevel::level, ::cohort::detail::concat(__VA_ARGS__)); \
    }                                                                                 \
  } while (0)
