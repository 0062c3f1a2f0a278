// Checks that turn user mistakes into InvalidArgument with both values named, and internal
// invariants into a loud Error that says it is a bug.
#pragma once

#include <sstream>
#include <string>

#include "cohort/core/error.h"

namespace cohort::detail {

template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

[[noreturn]] void throw_check_failure(const std::string& message);
[[noreturn]] void throw_internal_failure(const char* file, int line, const char* condition,
                                         const std::string& message);

}  // namespace cohort::detail

// COHORT_CHECK(cond, "message", more...) -> InvalidArgument("message more..."): a message that
// tells the user what was wrong and what to do.
#define COHORT_CHECK(cond, ...)                                                     \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      ::cohort::detail::throw_check_failure(::cohort::detail::concat(__VA_ARGS__)); \
    }                                                                               \
  } while (0)

// COHORT_CHECK_EQ(a, b, "message") -> InvalidArgument("message (A vs B)"), naming both values.
#define COHORT_CHECK_EQ(a, b, ...)                                            \
  do {                                                                        \
    const auto& cohort_check_a_ = (a);                                        \
    const auto& cohort_check_b_ = (b);                                        \
    if (!(cohort_check_a_ == cohort_check_b_)) {                              \
      ::cohort::detail::throw_check_failure(::cohort::detail::concat(         \
          __VA_ARGS__, " (", cohort_check_a_, " vs ", cohort_check_b_, ")")); \
    }                                                                         \
  } while (0)

// Marks a condition that only a bug in cohort can break.
#define COHORT_INTERNAL_ASSERT(cond, ...)                                              \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      ::cohort::detail::throw_internal_failure(__FILE__, __LINE__, #cond,              \
                                               ::cohort::detail::concat(__VA_ARGS__)); \
    }                                                                                  \
  } while (0)
