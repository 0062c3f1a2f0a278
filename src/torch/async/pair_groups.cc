#include "async/pair_groups.h"

#include <algorithm>
#include <regex>

namespace cohort::ps {
namespace {

int index_in(const std::vector<int>& ranks, int rank) {
  const auto it = std::find(ranks.begin(), ranks.end(), rank);
  return it == ranks.end() ? -1 : static_cast<int>(it - ranks.begin());
}

}  // namespace

// A split gives each rank one subgroup, so the pairs are made in rounds, as in a round-robin
// tournament between the two sides: in round r, client j meets server (j + r) mod n, n being
// the larger side. Each server meets at most one client per round, and after n rounds every
// client has met every server.
std::vector<std::shared_ptr<Group>> connect_pairs(Group& group, const std::vector<int>& servers,
                                                  const std::vector<int>& clients) {
  const int num_servers = static_cast<int>(servers.size());
  const int num_clients = static_cast<int>(clients.size());
  const int n = std::max(num_servers, num_clients);
  const int server = index_in(servers, group.rank());
  const int client = index_in(clients, group.rank());
  std::vector<std::shared_ptr<Group>> pairs(server >= 0   ? num_clients
                                            : client >= 0 ? num_servers
                                                          : 0);
  for (int round = 0; round < n; ++round) {
    int color = -1;
    int key = 0;
    int slot = -1;
    if (server >= 0) {
      const int j = ((server - round) % n + n) % n;
      if (j < num_clients) {
        color = server * num_clients + j;
        slot = j;
      }
    } else if (client >= 0) {
      const int i = (client + round) % n;
      if (i < num_servers) {
        color = i * num_clients + client;
        key = 1;
        slot = i;
      }
    }
    auto pair = group.split(color, key);
    if (slot >= 0) pairs[slot] = std::move(pair);
  }
  return pairs;
}

std::string with_group_ranks(const std::string& pair_message, int server_rank, int client_rank) {
  // Only where the pair's transports name a peer: "failed on rank 1", "connection to rank 0",
  // "from rank 0", "rank 0 aborted the group", "rank 1 (pid 12) died". Other ranks in the text
  // (relayed messages) are already the group's.
  static const std::regex pair_rank(
      R"(\b(on|to|from) rank ([01])\b|\brank ([01])(?= aborted the group| \(pid ))");
  const auto group_rank = [&](const std::string& pair) {
    return std::to_string(pair == "0" ? server_rank : client_rank);
  };
  std::string out;
  auto last = pair_message.cbegin();
  for (std::sregex_iterator it(pair_message.begin(), pair_message.end(), pair_rank), end; it != end;
       ++it) {
    const std::smatch& match = *it;
    out.append(last, match[0].first);
    out += match[2].matched ? match[1].str() + " rank " + group_rank(match[2].str())
                            : "rank " + group_rank(match[3].str());
    last = match[0].second;
  }
  out.append(last, pair_message.cend());
  return out;
}

}  // namespace cohort::ps
