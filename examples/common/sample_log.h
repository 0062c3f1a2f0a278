// --sample-log DIR under --elastic: what each member trained in each committed step, so that a
// benchmark can check from outside that a run with failures trained every sample of an epoch
// exactly once (bench/chaos.sh). Each process appends to DIR/samples.<pid>.log one line per
// committed step: "<step> <epoch> <generation> <rank> <world size> <data set index>...", the
// step numbered as ElasticStep::step (committed steps before it). A step that is not committed
// (a member was lost during it) writes nothing: its samples are handed out again.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include "cohort/torch/elastic/elastic_trainer.h"

namespace cohort_examples {

class SampleLog {
 public:
  // `dir` empty: off. Creates the directory; throws cohort::ConfigError when it cannot.
  explicit SampleLog(const std::string& dir);

  // Inside the step: remembers what this member trains in it.
  void hold(const cohort::ElasticStep& step);
  // After the step committed: writes what hold() remembered, and flushes it, so that a member
  // killed later loses none of its committed steps' lines.
  void write_held();

 private:
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, Closer> file_;
  std::string held_;
};

}  // namespace cohort_examples
