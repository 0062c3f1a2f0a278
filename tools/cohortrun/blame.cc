#include "blame.h"

#include <algorithm>
#include <regex>

namespace cohort::run {

namespace {

// How cohort's PeerError messages name the failed rank (src/comm/transport/*).
const std::regex& peer_pattern() {
  static const std::regex pattern(
      R"(rank (\d+) (?:\(pid \d+\) died|has closed its group|closed its group|at \S+ refused|)"
      R"(\([^)]*\) broke the protocol)|connection to rank (\d+))");
  return pattern;
}

// A TimeoutError's list of the ranks that never started the collective (Group::Impl).
const std::regex& never_joined_pattern() {
  static const std::regex pattern(R"(ranks that never joined it: ((?:\d+ \([^)]*\)(?:, )?)+))");
  return pattern;
}

const std::regex& listed_rank_pattern() {
  static const std::regex pattern(R"((\d+) \()");
  return pattern;
}

void add(std::vector<int>& ranks, const std::string& text, int self, int world_size) {
  const int rank = std::stoi(text);
  if (rank == self || rank < 0 || rank >= world_size) return;
  if (std::find(ranks.begin(), ranks.end(), rank) == ranks.end()) ranks.push_back(rank);
}

// std::regex matches recursively: a very long line could exhaust the stack, and error
// messages are short.
constexpr size_t kLongestLine = 4096;

}  // namespace

std::vector<int> ranks_blamed_by(const std::vector<std::string>& lines, int self, int world_size) {
  std::vector<int> ranks;
  for (const std::string& whole : lines) {
    if (whole.find("rank") == std::string::npos) continue;
    const std::string line = whole.substr(0, kLongestLine);
    for (std::sregex_iterator it(line.begin(), line.end(), never_joined_pattern()), end; it != end;
         ++it) {
      const std::string list = (*it)[1];
      for (std::sregex_iterator r(list.begin(), list.end(), listed_rank_pattern()); r != end; ++r) {
        add(ranks, (*r)[1], self, world_size);
      }
    }
    for (std::sregex_iterator it(line.begin(), line.end(), peer_pattern()), end; it != end; ++it) {
      add(ranks, (*it)[1].matched ? (*it)[1] : (*it)[2], self, world_size);
    }
  }
  return ranks;
}

}  // namespace cohort::run
