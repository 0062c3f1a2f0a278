// The two-rank groups between every parameter server and every client that talks to it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cohort/comm/group.h"

namespace cohort::ps {

// Collective over `group`. For each pair of a server (group rank servers[i]) and a client
// (clients[j]), a group of the two: the server is its rank 0, the client its rank 1. Returns
// this rank's pairs: on a server one per client (in `clients` order), on a client one per
// server (in `servers` order), on any other rank none.
//
// A pair is a group of its own, with its own connection, so that a client that dies breaks
// only its pairs: the server goes on with the others (Note [Parameter server protocol]).
std::vector<std::shared_ptr<Group>> connect_pairs(Group& group, const std::vector<int>& servers,
                                                  const std::vector<int>& clients);

// A pair's transport names the ranks of the pair in its errors ("on rank 1", "connection to
// rank 0": 0 is the server, 1 the client); this names them by their ranks in the whole group
// instead, so that a reader (and cohortrun's blame) sees which process failed.
std::string with_group_ranks(const std::string& pair_message, int server_rank, int client_rank);

}  // namespace cohort::ps
