#include "cohort/core/logging.h"

#include <unistd.h>

#include <cstdio>

#include "cohort/core/env.h"

namespace cohort {

namespace {
// COHORT_LOG_LEVEL: debug, info, warn (default) or error.
LogLevel configured_level() {
  static const LogLevel level = [] {
    const auto text = env_string("COHORT_LOG_LEVEL");
    if (!text || *text == "warn") return LogLevel::kWarn;
    if (*text == "debug") return LogLevel::kDebug;
    if (*text == "info") return LogLevel::kInfo;
    if (*text == "error") return LogLevel::kError;
    return LogLevel::kWarn;
  }();
  return level;
}

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kError: return "error";
  }
  return "?";
}
}  // namespace

bool log_enabled(LogLevel level) { return level >= configured_level(); }

void log_message(LogLevel level, const std::string& message) {
  // One fprintf per line so lines from threads do not interleave mid-line.
  std::fprintf(stderr, "[cohort %s pid %d] %s\n", level_name(level), static_cast<int>(getpid()),
               message.c_str());
}

}  // namespace cohort
