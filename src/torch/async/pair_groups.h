// The two-rank groups between every parameter server and every client that talks to it.
#pragma once

#include <memory>
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

}  // namespace cohort::ps
