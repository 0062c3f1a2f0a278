// Copies the ranks' stdout and stderr to cohortrun's, a line at a time, each line prefixed with
// its rank ("[2] loss 0.31") so that interleaved output stays readable, and keeps each rank's
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
  // Keeps the last `tail_lines` lines of each rank for tail().
  OutputRelay(bool prefix, size_t tail_lines);
  ~OutputRelay();
  OutputRelay(const OutputRelay&) = delete;
  OutputRelay& operator=(const OutputRelay&) = delete;

  // Relays `fd` (taken: closed at its end) of `rank` to `sink`.
  void add(int rank, int fd, std::FILE* sink);
  // Waits up to `timeout` for output and relays what arrived. Returns early when a signal
  // interrupts the wait.
  void pump(Milliseconds timeout);
  // Relays until every stream has ended or the deadline passes (a rank's own children may
  // keep its pipes open), then flushes partial lines.
  void drain(Deadline deadline);
  // Relays `rank`'s streams until they end (it has exited) or the deadline passes, so that
  // its last lines are in tail().
  void finish(int rank, Deadline deadline);
  // The last (at most `lines`) lines of `rank`'s output, both streams, oldest first.
  std::vector<std::string> tail(int rank, size_t lines) const;

 private:
  struct Stream {
    int rank;
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
