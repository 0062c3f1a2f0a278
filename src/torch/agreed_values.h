// Values every rank must hold alike (clip_grad_norm's max_norm, a GradScaler's scale and
// options), checked on a small allreduce the caller makes anyway: Note [Values that ride along].
#pragma once

#include <vector>

namespace cohort {

struct AgreedValue {
  const char* name;  // "clip_grad_norm's max_norm": what the error names (a literal: no
                     // allocation on the step's path)
  double value = 0;
};

// Note [Values that ride along]: ranks that disagree on such a value train apart with their
// collectives in step (issue 35). Each value rides on an allreduce the caller already makes, at
// no extra collective: as (v, -v) under a max, whose two results agree only if every v does
// (and then say the range), and as (v, v^2) under a sum, where W * sum(v^2) = sum(v)^2 only if
// every v is the same (Cauchy-Schwarz). Every rank sees the same results, so all decide alike.

// Appends the two entries of each value to `message` (under a max when `max`, else a sum).
void append_agreed(std::vector<double>& message, const std::vector<AgreedValue>& agreed, bool max);

// After the allreduce: throws ConfigError on every rank, naming the first value that differs,
// when one does. `at`: where append_agreed put the first entry; `world`: the group's size.
void check_agreed(const std::vector<double>& reduced, size_t at,
                  const std::vector<AgreedValue>& agreed, bool max, int world);

}  // namespace cohort
