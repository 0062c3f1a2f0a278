// A timeline of what each rank did when: spans (forward, backward, each bucket's allreduce,
// the optimizer step, waits) written as one Chrome trace / Perfetto file for all ranks, so that
// the overlap of communication with computation can be seen (docs/timeline.md).
//
//   auto timeline = cohort::Timeline::from_env();   // null unless COHORT_TIMELINE=trace.json
//   { auto span = cohort::trace(timeline.get(), "forward"); out = model->forward(x); }
//   ...
//   if (timeline) timeline->write(*group);            // collective: rank 0 writes the file
//
// Spans are recorded with the steady clock, which every process of one machine shares, so the
// ranks of one machine line up; ranks on other machines are shifted by their clock's offset.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cohort/core/deadline.h"

namespace cohort {

class Group;

class Timeline {
 public:
  // One span. `track` is the row it is drawn on inside its rank ("main", "comm", ...).
  struct Span {
    std::string name;
    std::string category;
    std::string track;
    Clock::time_point start;
    Clock::time_point end;
  };

  // `path`: where write() puts the file.
  explicit Timeline(std::string path);
  // A timeline writing to $COHORT_TIMELINE, or null when it is unset.
  static std::shared_ptr<Timeline> from_env();

  // Thread-safe.
  void record(Span span);
  std::vector<Span> spans() const;
  const std::string& path() const { return path_; }

  // Collective over `group`: every rank sends its spans to rank 0, which writes them all to
  // path() as a Chrome trace (one process per rank, one thread per track), times in
  // microseconds since the earliest span. Throws Error when the file cannot be written (on
  // rank 0; the others return).
  void write(Group& group) const;
  // The Chrome trace JSON of spans of several ranks (spans_of_rank[r] are rank r's).
  static std::string chrome_trace(const std::vector<std::vector<Span>>& spans_of_rank);

 private:
  std::string path_;
  mutable std::mutex mutex_;
  std::vector<Span> spans_;
};

// Records the time from its construction to its destruction on `timeline` (nothing when the
// timeline is null, so code can trace unconditionally).
class TraceSpan {
 public:
  TraceSpan(Timeline* timeline, std::string name, std::string category = "compute",
            std::string track = "main");
  ~TraceSpan();
  TraceSpan(TraceSpan&& other) noexcept;
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;
  TraceSpan& operator=(TraceSpan&&) = delete;

 private:
  Timeline* timeline_;
  Timeline::Span span_;
};

inline TraceSpan trace(Timeline* timeline, std::string name, std::string category = "compute",
                       std::string track = "main") {
  return TraceSpan(timeline, std::move(name), std::move(category), std::move(track));
}

}  // namespace cohort
