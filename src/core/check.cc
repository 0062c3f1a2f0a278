#include "cohort/core/check.h"

namespace cohort::detail {

namespace {
const char* base_name(const char* path) {
  const char* base = path;
  for (const char* p = path; *p != '\0'; ++p) {
    if (*p == '/') base = p + 1;
  }
  return base;
}
}  // namespace

void throw_check_failure(const char* file, int line, const std::string& condition,
                         const std::string& message) {
  throw InvalidArgument(concat(message, " [check failed: ", condition, " at ", base_name(file),
                               ":", line, "]"));
}

void throw_internal_failure(const char* file, int line, const char* condition,
                            const std::string& message) {
  throw Error(concat("internal error in cohort (this is a bug, please report it): ", message,
                     " [", condition, " at ", base_name(file), ":", line, "]"));
}

}  // namespace cohort::detail
