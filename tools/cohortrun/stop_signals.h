// SIGINT, SIGTERM and SIGHUP sent to cohortrun are caught, not obeyed at once: cohortrun
// forwards them to every rank and reaps them all before it exits (docs/launch.md).
#pragma once

#include <string>

namespace cohort::run {

// Installs the handlers (without SA_RESTART, so a signal ends a poll() early).
void catch_stop_signals();
// While on, a stop signal ends cohortrun at once (exit 128 + signal): for waits that cannot
// look at received_stop_signal(), like connecting to node 0, when no rank runs yet.
void exit_on_stop_signal(bool on);
// The last stop signal received, or 0.
int received_stop_signal();
// "SIGTERM".
std::string signal_name(int signal);

}  // namespace cohort::run
