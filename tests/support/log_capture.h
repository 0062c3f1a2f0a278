// Captures cohort's log lines in a test: sets the level (info by default) and a sink for the
// capture's lifetime, then puts back what was there.
#pragma once

#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "cohort/core/logging.h"

namespace cohort::testing {

class LogCapture {
 public:
  explicit LogCapture(LogLevel level = LogLevel::kInfo)
      : old_level_(set_log_level(level)),
        old_sink_(set_log_sink([this](LogLevel line_level, const std::string& line) {
          std::lock_guard<std::mutex> lock(mutex_);
          lines_.emplace_back(line_level, line);
        })) {}
  ~LogCapture() {
    set_log_sink(std::move(old_sink_));
    set_log_level(old_level_);
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  // The info lines so far that start with `prefix`.
  std::vector<std::string> info_lines(const std::string& prefix) const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::string> out;
    for (const auto& [level, line] : lines_) {
      if (level == LogLevel::kInfo && line.rfind(prefix, 0) == 0) out.push_back(line);
    }
    return out;
  }

  // The lines so far at `level` that contain `text`.
  std::vector<std::string> lines_containing(LogLevel level, const std::string& text) const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::string> out;
    for (const auto& [line_level, line] : lines_) {
      if (line_level == level && line.find(text) != std::string::npos) out.push_back(line);
    }
    return out;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::pair<LogLevel, std::string>> lines_;
  LogLevel old_level_;
  LogSink old_sink_;
};

}  // namespace cohort::testing
