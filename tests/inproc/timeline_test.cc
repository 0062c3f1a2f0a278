// cohort::Timeline: spans from every rank end up in one Chrome trace on rank 0, one process per
// rank and one thread per track, with times relative to the earliest span.
#include "cohort/comm/timeline.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace cohort {
namespace {

using nlohmann::json;

Timeline::Span span_at(const std::string& name, const std::string& track, int start_ms,
                       int end_ms) {
  const Clock::time_point zero{};
  return {name, "compute", track, zero + Milliseconds(start_ms), zero + Milliseconds(end_ms)};
}

TEST(Timeline, ChromeTraceHasAProcessPerRankAndAThreadPerTrack) {
  const std::vector<std::vector<Timeline::Span>> spans = {
      {span_at("forward", "main", 10, 15), span_at("bucket 0 allreduce", "comm", 12, 20)},
      {span_at("forward", "main", 11, 16)}};
  const json trace = json::parse(Timeline::chrome_trace(spans));
  int complete = 0;
  std::set<std::pair<int, std::string>> threads;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") {
      threads.insert({e["pid"].get<int>(), e["args"]["name"].get<std::string>()});
    }
    if (e["ph"] != "X") continue;
    ++complete;
    if (e["name"] == "bucket 0 allreduce") {
      EXPECT_EQ(e["pid"], 0);
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 2000.0);  // microseconds after the first span
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 8000.0);
    }
  }
  EXPECT_EQ(complete, 3);
  EXPECT_EQ(threads,
            (std::set<std::pair<int, std::string>>{{0, "main"}, {0, "comm"}, {1, "main"}}));
}

TEST(Timeline, WriteGathersEveryRanksSpansOnRankZero) {
  const std::string path = ::testing::TempDir() + "cohort_timeline_test.json";
  const int world = 3;
  auto groups = testing::make_inproc_groups(world, testing::quick_options());
  testing::run_ranks(world, [&](int rank) {
    Timeline timeline(path);
    for (int i = 0; i <= rank; ++i) {  // rank r records r + 1 spans
      auto span = trace(&timeline, "step " + std::to_string(i), "step", "steps");
    }
    timeline.write(*groups[rank]);
  });
  std::ifstream in(path);
  const json trace = json::parse(in);
  std::map<int, int> spans_of_rank;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "X") ++spans_of_rank[e["pid"].get<int>()];
  }
  EXPECT_EQ(spans_of_rank, (std::map<int, int>{{0, 1}, {1, 2}, {2, 3}}));
}

// Code traces unconditionally: a span on a null timeline is inert (no crash, and it lands in no
// timeline), while a span on a real one, open at the same time, is recorded once it closes.
TEST(Timeline, ANullTimelineRecordsNothing) {
  Timeline timeline("unused.json");
  {
    auto ignored = trace(nullptr, "forward");
    auto recorded = trace(&timeline, "backward");
    EXPECT_TRUE(timeline.spans().empty()) << "a span is recorded when it closes";
  }
  const auto spans = timeline.spans();
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].name, "backward");
  EXPECT_LE(spans[0].start, spans[0].end);
}

}  // namespace
}  // namespace cohort
