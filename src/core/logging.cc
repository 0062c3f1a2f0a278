#include "cohort/core/logging.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <mutex>

#include "cohort/core/env.h"

namespace cohort {

namespace {

constexpr int kUnset = -1;
std::atomic<int> g_level{kUnset};  // a LogLevel once read from the environment or set

// Knob read here (docs/env.md):
//   COHORT_LOG_LEVEL   debug, info, warn (default) or error, in any case
LogLevel level_from_env() {
  auto text = env_string("COHORT_LOG_LEVEL");
  if (!text || text->empty()) return LogLevel::kWarn;
  std::transform(text->begin(), text->end(), text->begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (*text == "debug") return LogLevel::kDebug;
  if (*text == "info") return LogLevel::kInfo;
  if (*text == "warn" || *text == "warning") return LogLevel::kWarn;
  if (*text == "error") return LogLevel::kError;
  // Logging cannot throw from wherever it is first used: say so once and go on at warn.
  std::fprintf(stderr,
               "[cohort warn pid %d] COHORT_LOG_LEVEL='%s' is not debug, info, warn or error; "
               "logging at warn\n",
               static_cast<int>(getpid()), text->c_str());
  return LogLevel::kWarn;
}

LogLevel configured_level() {
  int level = g_level.load(std::memory_order_relaxed);
  if (level == kUnset) {
    int expected = kUnset;
    const int from_env = static_cast<int>(level_from_env());
    // A set_log_level that ran meanwhile wins.
    level = g_level.compare_exchange_strong(expected, from_env) ? from_env : expected;
  }
  return static_cast<LogLevel>(level);
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

std::mutex& sink_mutex() {
  static std::mutex mutex;
  return mutex;
}

LogSink& sink() {
  static LogSink instance;
  return instance;
}

}  // namespace

bool log_enabled(LogLevel level) {
  return level >= configured_level();
}

void log_message(LogLevel level, const std::string& message) {
  std::lock_guard<std::mutex> lock(sink_mutex());
  if (sink()) {
    sink()(level, message);
    return;
  }
  // One fprintf per line so lines from threads do not interleave mid-line.
  std::fprintf(stderr, "[cohort %s pid %d] %s\n", level_name(level), static_cast<int>(getpid()),
               message.c_str());
}

LogSink set_log_sink(LogSink new_sink) {
  std::lock_guard<std::mutex> lock(sink_mutex());
  LogSink old = std::move(sink());
  sink() = std::move(new_sink);
  return old;
}

LogLevel set_log_level(LogLevel level) {
  const LogLevel old = configured_level();
  g_level.store(static_cast<int>(level));
  return old;
}

}  // namespace cohort
