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

// The message is written for the user: the condition and cohort's source line would only
// distract from it (issue 35), so they are left out. Bugs go through throw_internal_failure.
void throw_check_failure(const std::string& message) {
  throw InvalidArgument(message);
}

void throw_internal_failure(const char* file, int line, const char* condition,
                            const std::string& message) {
  throw Error(concat("internal error in cohort (this is a bug, please report it): ", message, " [",
                     condition, " at ", base_name(file), ":", line, "]"));
}

}  // namespace cohort::detail
