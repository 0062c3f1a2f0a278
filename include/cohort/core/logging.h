// Minimal leveled logging to stderr. COHORT_LOG_LEVEL=debug|info|warn|error (default warn; any
// case). At info, cohort says what it chose: each group's backend, transports, topology and
// cost model when it is made, DDP's buckets when it is built (docs/env.md).
#pragma once

#include <functional>
#include <string>

#include "cohort/core/check.h"

namespace cohort {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

bool log_enabled(LogLevel level);
void log_message(LogLevel level, const std::string& message);

// Receives every line that is logged instead of stderr (tests capture cohort's lines with it).
// Called under a lock, one line at a time: it must not log itself.
using LogSink = std::function<void(LogLevel, const std::string&)>;
// Installs `sink` (empty: stderr again) and returns the one it replaces. Lines of other threads
// may still reach the old sink while this runs, never after it returns.
LogSink set_log_sink(LogSink sink);
// Sets the level for the rest of the process, over COHORT_LOG_LEVEL; returns the previous one.
LogLevel set_log_level(LogLevel level);

}  // namespace cohort

#define COHORT_LOG(level, ...)                                                                 \
  do {                                                                                         \
    if (::cohort::log_enabled(::cohort::LogLevel::level)) {                                    \
      ::cohort::log_message(::cohort::LogLevel::level, ::cohort::detail::concat(__VA_ARGS__)); \
    }                                                                                          \
  } while (0)
