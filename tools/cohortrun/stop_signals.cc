#include "stop_signals.h"

#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <initializer_list>

namespace cohort::run {

namespace {

volatile sig_atomic_t g_stop_signal = 0;  // written only by the handler
volatile sig_atomic_t g_exit_on_stop_signal = 0;

void on_stop_signal(int signal) {
  if (g_exit_on_stop_signal) ::_exit(128 + signal);
  g_stop_signal = signal;
}

}  // namespace

void catch_stop_signals() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  for (int signal : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(signal, &action, nullptr);
  ::signal(SIGPIPE, SIG_IGN);  // a closed terminal must not kill us before we stop the ranks
}

void exit_on_stop_signal(bool on) {
  g_exit_on_stop_signal = on ? 1 : 0;
}

int received_stop_signal() {
  return g_stop_signal;
}

std::string signal_name(int signal) {
  const char* abbreviation = sigabbrev_np(signal);
  return abbreviation != nullptr ? std::string("SIG") + abbreviation
                                 : "signal " + std::to_string(signal);
}

}  // namespace cohort::run
