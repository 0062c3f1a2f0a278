// The Fashion-MNIST example (examples/fashion_mnist) for a few steps at 1 and 2 ranks under
// cohortrun: its metrics file and its timeline must be well formed and consistent (every
// rank present, every bucket's allreduce inside a step of its rank), and bad data must be a
// clear error.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/process.h"

namespace cohort {
namespace {

using nlohmann::json;

constexpr std::chrono::seconds kDeadline{240};
constexpr int kSteps = 12;

struct ExampleRun {
  testing::ShellResult result;
  std::string dir;  // holds steps.jsonl, trace.json and the checkpoint
};

ExampleRun run_example(int ranks, const std::string& extra = "") {
  const std::string dir = testing::fresh_temp_dir("fmnist_" + std::to_string(ranks));
  const std::string command = COHORTRUN " --nproc-per-node " + std::to_string(ranks) +
                              " " FASHION_MNIST " --max-steps " + std::to_string(kSteps) +
                              " --bucket-cap-mb 1 --log-every 4 --checkpoint " + dir +
                              "/ck --metrics " + dir + "/steps.jsonl " + extra;
  return {testing::run_shell(
              command, {"COHORT_TIMELINE=" + dir + "/trace.json", "OMP_NUM_THREADS=1"}, kDeadline),
          dir};
}

std::vector<json> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
  return lines;
}

void expect_metrics_consistent(const std::vector<json>& steps, int ranks) {
  ASSERT_EQ(steps.size(), size_t(kSteps));
  for (size_t i = 0; i < steps.size(); ++i) {
    const json& s = steps[i];
    EXPECT_EQ(s["step"].get<int>(), int(i) + 1);
    EXPECT_EQ(s["samples"].get<int>(), 64);
    const double step_ms = s["step_ms"], exposed = s["exposed_comm_ms"];
    EXPECT_GT(step_ms, 0);
    EXPECT_GE(step_ms + 1e-6, s["data_ms"].get<double>() + s["forward_ms"].get<double>() +
                                  s["backward_ms"].get<double>());
    EXPECT_LE(exposed, s["backward_ms"].get<double>() + 1e-6);
    EXPECT_NEAR(s["compute_ms"].get<double>() + exposed, step_ms, 1e-6);
    EXPECT_NEAR(s["comm_fraction"].get<double>(), exposed / step_ms, 1e-9);
    EXPECT_EQ(s["bucket_latency_ms"].empty(), ranks == 1) << s.dump();
  }
}

struct Interval {
  double start, end;
  bool contains(const Interval& other) const {
    return other.start >= start - 1e-3 && other.end <= end + 1e-3;
  }
};

// Spans by rank and by the first word of their name ("step", "bucket", "forward", ...).
std::map<int, std::map<std::string, std::vector<Interval>>> spans_of(const json& trace) {
  std::map<int, std::map<std::string, std::vector<Interval>>> spans;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const std::string name = e["name"];
    const double ts = e["ts"], dur = e["dur"];
    EXPECT_GE(dur, 0) << e.dump();
    spans[e["pid"].get<int>()][name.substr(0, name.find(' '))].push_back({ts, ts + dur});
  }
  return spans;
}

void expect_inside_steps(const std::vector<Interval>& inner, const std::vector<Interval>& steps,
                         const std::string& what, int rank) {
  for (const Interval& span : inner) {
    bool inside = false;
    for (const Interval& step : steps) inside = inside || step.contains(span);
    EXPECT_TRUE(inside) << what << " span [" << span.start << ", " << span.end << "] of rank "
                        << rank << " is inside no step";
  }
}

void expect_timeline_consistent(const std::string& path, int ranks) {
  std::ifstream in(path);
  ASSERT_TRUE(in) << "no timeline at " << path;
  const auto spans = spans_of(json::parse(in));
  ASSERT_EQ(spans.size(), size_t(ranks)) << "every rank must be in the timeline";
  for (const auto& [rank, by_name] : spans) {
    ASSERT_EQ(by_name.count("step"), 1u);
    const auto& steps = by_name.at("step");
    EXPECT_EQ(steps.size(), size_t(kSteps)) << "rank " << rank;
    for (const char* part : {"forward", "backward", "optimizer"}) {
      ASSERT_EQ(by_name.count(part), 1u) << part << " missing on rank " << rank;
      EXPECT_EQ(by_name.at(part).size(), size_t(kSteps));
      expect_inside_steps(by_name.at(part), steps, part, rank);
    }
    if (ranks == 1) continue;
    ASSERT_EQ(by_name.count("bucket"), 1u) << "no bucket allreduce on rank " << rank;
    EXPECT_GE(by_name.at("bucket").size(), size_t(kSteps));
    expect_inside_steps(by_name.at("bucket"), steps, "bucket allreduce", rank);
  }
}

class FashionMnistExample : public ::testing::TestWithParam<int> {};

TEST_P(FashionMnistExample, MetricsAndTimelineAreWellFormedAndConsistent) {
  const int ranks = GetParam();
  const ExampleRun run = run_example(ranks);
  ASSERT_EQ(run.result.exit_code, 0) << run.result.output;
  EXPECT_NE(run.result.output.find("test accuracy"), std::string::npos) << run.result.output;
  EXPECT_NE(run.result.output.find("on " + std::to_string(ranks) + " rank(s)"), std::string::npos)
      << run.result.output;
  expect_metrics_consistent(read_lines(run.dir + "/steps.jsonl"), ranks);
  expect_timeline_consistent(run.dir + "/trace.json", ranks);
}

INSTANTIATE_TEST_SUITE_P(Ranks, FashionMnistExample, ::testing::Values(1, 2));

TEST(FashionMnistExampleErrors, AMissingDataSetNamesTheFileAndTheFix) {
  const ExampleRun run = run_example(1, "--data /nonexistent");
  EXPECT_EQ(run.result.exit_code, 2) << run.result.output;
  EXPECT_NE(run.result.output.find("'/nonexistent/t10k-images-idx3-ubyte.gz' cannot be opened"),
            std::string::npos)
      << run.result.output;
  EXPECT_NE(run.result.output.find("dataset-fashion-mnist"), std::string::npos)
      << run.result.output;
}

TEST(FashionMnistExampleErrors, AMalformedFileIsAClearError) {
  const std::string dir = testing::fresh_temp_dir("fmnist_bad");
  const std::string source = "/usr/share/datasets/fashion-mnist";
  ASSERT_EQ(std::system(("cp " + source + "/*.gz '" + dir + "' && head -c 1000 " + source +
                         "/t10k-images-idx3-ubyte.gz > '" + dir + "/t10k-images-idx3-ubyte.gz'")
                            .c_str()),
            0);
  const ExampleRun run = run_example(1, "--data " + dir);
  EXPECT_EQ(run.result.exit_code, 2) << run.result.output;
  EXPECT_NE(run.result.output.find("t10k-images-idx3-ubyte.gz' is cut short"), std::string::npos)
      << run.result.output;
}

}  // namespace
}  // namespace cohort
