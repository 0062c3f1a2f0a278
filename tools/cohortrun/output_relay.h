// Copies the ranks' stdout and stderr to cohortrun's, a line at a time, each line prefixed with
// a label ("[2] loss 0.31": the rank; "[slot 2] ..." in elastic mode, where the launch slot is
// not the rank in the job) so that interleaved output stays readable, and keeps each process's
// last lines for the failure summary.
#pragma once

#include <cstdio>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "cohort/core/deadline.h"

namespace cohort::run {

class OutputRelay {
 public:
  // Keeps the last `tail_lines` lines of each source for tail().
  OutputRelay(bool prefix, size_t tail_lines);
  ~OutputRelay();
  OutputRelay(const OutputRelay&) = delete;
  OutputRelay& operator=(const OutputRelay&) = delete;

  // Relays `fd` (taken: closed at its end) to `sink`, each line prefixed with "[label] ".
  // `source` names one process for finish() and tail(): not its slot, which a restarted
  // process shares with its predecessors, whose lines are not its own.
  void add(int source, const std::string& label, int fd, std::FILE* sink);
  // Waits up to `timeout` for output and relays what arrived. Returns early when a signal
  // interrupts the wait.
  void pump(Milliseconds timeout);
  // Relays until every stream has ended or the deadline passes (a rank's own children may
  // keep its pipes open), then flushes partial lines.
  void drain(Deadline deadline);
  // Relays `source`'s streams until they end (it has exited) or the deadline passes, so that
  // its last lines are in tail().
  void finish(int source, Deadline deadline);
  // The last (at most `lines`) lines of `source`'s output, both streams, oldest first.
  std::vector<std::string> tail(int source, size_t lines) const;

 private:
  struct Stream {
    int source;
    std::string prefix;  // "[label] ", or empty without prefixes
    int fd;
    std::FILE* sink;
    std::string partial;  // a line still without its '\n'
  };
  void read_from(Stream& stream);
  void emit(Stream& stream, const std::string& line);
  void close(Stream& stream);

  bool prefix_;
  size_t tail_lines_;
  std::vector<Stream> streams_;
  std::map<int, std::deque<std::string>> tails_;
};

}  // namespace cohort::run
