// How many gradients the sparsifying hooks send (sparse_count, public in sparsification.h) and
// the check of their ratio, shared by Top-K and Random-K.
#pragma once

#include <string>

namespace cohort {

// Throws InvalidArgument naming `hook` unless 0 < ratio <= 1.
void require_ratio(const std::string& hook, double ratio);

}  // namespace cohort
