#include "cohort/comm/agreement.h"

#include <algorithm>
#include <cstdint>
#include <sstream>

#include "cohort/core/check.h"

namespace cohort {
namespace {

std::string join_lines(const std::vector<std::string>& entries) {
  std::string joined;
  for (const auto& entry : entries) joined += entry + '\n';
  return joined;
}

std::vector<std::string> split_lines(const std::string& joined) {
  std::vector<std::string> lines;
  std::istringstream in(joined);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

int64_t fnv1a(const std::string& text) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
  return static_cast<int64_t>(hash);
}

// Every rank's joined entries. Only called once a mismatch is known: costs two allgathers.
std::vector<std::string> gather_all(Group& group, const std::string& mine,
                                    const CollectiveOptions& options) {
  const int world = group.size();
  std::vector<int64_t> lengths(world);
  int64_t my_length = static_cast<int64_t>(mine.size());
  group.allgather(ConstBuffer(&my_length, 1, DType::kInt64), make_buffer(lengths), options);
  const size_t longest = static_cast<size_t>(*std::max_element(lengths.begin(), lengths.end()));
  std::vector<uint8_t> padded(longest, 0), all(longest * world);
  std::copy(mine.begin(), mine.end(), padded.begin());
  group.allgather(ConstBuffer(padded.data(), longest, DType::kUInt8),
                  Buffer{all.data(), all.size(), DType::kUInt8}, options);
  std::vector<std::string> texts;
  for (int r = 0; r < world; ++r) {
    const auto* begin = reinterpret_cast<const char*>(all.data() + r * longest);
    texts.emplace_back(begin, static_cast<size_t>(lengths[r]));
  }
  return texts;
}

std::string describe_difference(const std::vector<std::string>& reference, int other_rank,
                                const std::vector<std::string>& other, const std::string& what) {
  const size_t common = std::min(reference.size(), other.size());
  for (size_t i = 0; i < common; ++i) {
    if (reference[i] != other[i]) {
      return detail::concat(what, " #", i, " is '", reference[i], "' on rank 0 but '", other[i],
                            "' on rank ", other_rank);
    }
  }
  return detail::concat("rank 0 has ", reference.size(), " ", what, "s but rank ", other_rank,
                        " has ", other.size(), "; the first one only one of them has is '",
                        reference.size() > other.size() ? reference[common] : other[common], "'");
}

}  // namespace

std::string first_disagreement(Group& group, const std::vector<std::string>& lines,
                               const std::string& what, const CollectiveOptions& options) {
  const std::string mine = join_lines(lines);
  const int64_t summary[2] = {static_cast<int64_t>(lines.size()), fnv1a(mine)};
  std::vector<int64_t> summaries(2 * group.size());
  group.allgather(ConstBuffer(summary, 2, DType::kInt64), make_buffer(summaries), options);
  int differing = -1;
  for (int r = 1; r < group.size() && differing < 0; ++r) {
    if (summaries[2 * r] != summaries[0] || summaries[2 * r + 1] != summaries[1]) differing = r;
  }
  if (differing < 0) return "";
  const auto texts = gather_all(group, mine, options);
  return describe_difference(split_lines(texts[0]), differing, split_lines(texts[differing]),
                             what);
}

}  // namespace cohort
