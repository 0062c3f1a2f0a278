// Which rank a failed rank's error blames. When one rank stops (killed, stopped, hung), the
// others fail too, each with an error that names it: a PeerError names the rank that died or
// broke its connection, a collective's TimeoutError the ranks that never joined it. cohortrun
// reads those names from the last lines a failed rank printed (Note [Who failed first] in
// local_attempt.cc), so that its summary leads with the cause, not with the first rank to exit.
#pragma once

#include <string>
#include <vector>

namespace cohort::run {

// The ranks (other than `self`, below `world_size`, each once, in the order found) that
// `lines` name as the cause of an error, as cohort's error messages word it:
//   "... ranks that never joined it: 0 (last started #3), 2 (last started none)"
//   "rank 1 (pid 4242) died", "lost the connection to rank 1 (...)", "connection to rank 1
//   failed", "rank 1 has closed its group", "rank 1 (host:port) broke the protocol", ...
// A rank named only as the one that reports ("... failed on rank 2", "rank 2 aborted the
// group") is not blamed.
std::vector<int> ranks_blamed_by(const std::vector<std::string>& lines, int self, int world_size);

}  // namespace cohort::run
