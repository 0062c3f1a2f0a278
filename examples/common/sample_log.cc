#include "sample_log.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "cohort/core/error.h"

namespace cohort_examples {

SampleLog::SampleLog(const std::string& dir) {
  if (dir.empty()) return;
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  const std::string path = dir + "/samples." + std::to_string(::getpid()) + ".log";
  file_.reset(error ? nullptr : std::fopen(path.c_str(), "a"));
  if (!file_) {
    throw cohort::ConfigError("--sample-log " + dir + ": cannot write " + path + " (" +
                              (error ? error.message() : std::strerror(errno)) + ")");
  }
}

void SampleLog::hold(const cohort::ElasticStep& step) {
  if (!file_) return;
  held_ = std::to_string(step.step) + " " + std::to_string(step.epoch) + " " +
          std::to_string(step.generation) + " " + std::to_string(step.rank) + " " +
          std::to_string(step.world_size);
  for (size_t index : step.indices) held_ += " " + std::to_string(index);
  held_ += "\n";
}

void SampleLog::write_held() {
  if (!file_ || held_.empty()) return;
  std::fputs(held_.c_str(), file_.get());
  std::fflush(file_.get());
  held_.clear();
}

}  // namespace cohort_examples
