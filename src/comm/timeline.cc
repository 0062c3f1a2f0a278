#include "cohort/comm/timeline.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "cohort/comm/buffer.h"
#include "cohort/comm/group.h"
#include "cohort/core/env.h"
#include "cohort/core/error.h"

namespace cohort {

namespace {

using nlohmann::json;

int64_t nanoseconds(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

Clock::time_point from_nanoseconds(int64_t ns) {
  return Clock::time_point(
      std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(ns)));
}

// What a rank sends to rank 0: its spans as compact JSON.
std::string encode(const std::vector<Timeline::Span>& spans) {
  json out = json::array();
  for (const auto& s : spans) {
    out.push_back({s.name, s.category, s.track, nanoseconds(s.start), nanoseconds(s.end)});
  }
  return out.dump();
}

std::vector<Timeline::Span> decode(const std::string& text) {
  std::vector<Timeline::Span> spans;
  for (const json& s : json::parse(text)) {
    spans.push_back({s[0].get<std::string>(), s[1].get<std::string>(), s[2].get<std::string>(),
                     from_nanoseconds(s[3].get<int64_t>()), from_nanoseconds(s[4].get<int64_t>())});
  }
  return spans;
}

// Every rank's encoded spans on rank 0 (others get an empty vector): the lengths first, then
// the texts padded to the longest.
std::vector<std::string> gather_texts(Group& group, const std::string& mine) {
  const int world = group.size();
  int64_t length = static_cast<int64_t>(mine.size());
  std::vector<int64_t> lengths(static_cast<size_t>(world));
  group.allgather(make_buffer(&length, 1), make_buffer(lengths));
  const size_t longest = static_cast<size_t>(*std::max_element(lengths.begin(), lengths.end()));
  std::vector<uint8_t> padded(longest, ' ');
  std::copy(mine.begin(), mine.end(), padded.begin());
  std::vector<uint8_t> all(group.rank() == 0 ? longest * static_cast<size_t>(world) : 0);
  group.gather(make_buffer(padded), make_buffer(all));
  std::vector<std::string> texts;
  if (group.rank() != 0) return texts;
  for (int r = 0; r < world; ++r) {
    const auto begin = all.begin() + static_cast<std::ptrdiff_t>(longest * static_cast<size_t>(r));
    texts.emplace_back(begin, begin + lengths[static_cast<size_t>(r)]);
  }
  return texts;
}

}  // namespace

Timeline::Timeline(std::string path) : path_(std::move(path)) {}

std::shared_ptr<Timeline> Timeline::from_env() {
  // COHORT_TIMELINE: write a Chrome trace of every rank's spans there (docs/timeline.md).
  const auto path = env_string("COHORT_TIMELINE");
  return path ? std::make_shared<Timeline>(*path) : nullptr;
}

void Timeline::record(Span span) {
  std::lock_guard<std::mutex> lock(mutex_);
  spans_.push_back(std::move(span));
}

std::vector<Timeline::Span> Timeline::spans() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return spans_;
}

std::string Timeline::chrome_trace(const std::vector<std::vector<Span>>& spans_of_rank) {
  Clock::time_point origin = Clock::time_point::max();
  for (const auto& spans : spans_of_rank) {
    for (const auto& s : spans) origin = std::min(origin, s.start);
  }
  auto micros = [&](Clock::time_point t) {
    return std::chrono::duration<double, std::micro>(t - origin).count();
  };
  json events = json::array();
  for (size_t rank = 0; rank < spans_of_rank.size(); ++rank) {
    events.push_back({{"name", "process_name"},
                      {"ph", "M"},
                      {"pid", rank},
                      {"args", {{"name", "rank " + std::to_string(rank)}}}});
    std::map<std::string, int> track_ids;
    for (const auto& s : spans_of_rank[rank]) {
      const auto [it, added] = track_ids.emplace(s.track, static_cast<int>(track_ids.size()));
      if (added) {
        events.push_back({{"name", "thread_name"},
                          {"ph", "M"},
                          {"pid", rank},
                          {"tid", it->second},
                          {"args", {{"name", s.track}}}});
      }
      events.push_back({{"name", s.name},
                        {"cat", s.category},
                        {"ph", "X"},
                        {"pid", rank},
                        {"tid", it->second},
                        {"ts", micros(s.start)},
                        {"dur", micros(s.end) - micros(s.start)}});
    }
  }
  return json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump(1);
}

void Timeline::write(Group& group) const {
  const std::vector<std::string> texts = gather_texts(group, encode(spans()));
  if (group.rank() != 0) return;
  std::vector<std::vector<Span>> spans_of_rank;
  for (const std::string& text : texts) spans_of_rank.push_back(decode(text));
  std::ofstream out(path_);
  out << chrome_trace(spans_of_rank) << '\n';
  out.close();
  if (!out) {
    throw Error("cannot write the timeline to '" + path_ +
                "' (COHORT_TIMELINE): check that its directory exists and is writable");
  }
}

TraceSpan::TraceSpan(Timeline* timeline, std::string name, std::string category, std::string track)
    : timeline_(timeline) {
  if (timeline_ == nullptr) return;
  span_.name = std::move(name);
  span_.category = std::move(category);
  span_.track = std::move(track);
  span_.start = Clock::now();
}

TraceSpan::TraceSpan(TraceSpan&& other) noexcept
    : timeline_(other.timeline_), span_(std::move(other.span_)) {
  other.timeline_ = nullptr;
}

TraceSpan::~TraceSpan() {
  if (timeline_ == nullptr) return;
  span_.end = Clock::now();
  try {
    timeline_->record(std::move(span_));
  } catch (...) {
    // Out of memory while tracing: lose the span, not the training run.
  }
}

}  // namespace cohort
