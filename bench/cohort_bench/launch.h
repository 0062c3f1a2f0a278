// Starting the ranks of a TCP run as local processes: this process hosts the rendezvous store
// on 127.0.0.1 (a free port), starts `config.ranks` children of its own executable with the
// launcher environment (ranks.h, docs/bench.md) and the same arguments, and watches them.
// Rank 0 prints the table on the shared stdout.
//
// Supervision: a child that exits non-zero or dies makes the run fail; the others must exit
// within the watchdog window after the first one exits (they see the failure within seconds
// through the group, or hit their own deadline), else they are killed. Children die with this
// process (PR_SET_PDEATHSIG), so nothing is left behind when it is interrupted.
#pragma once

#include "bench_config.h"

namespace cohort::bench {

// Returns the exit code of the whole run (the most serious of the children's).
// `argv` is main()'s, null-terminated; the children get the same arguments.
int launch_local_ranks(const BenchConfig& config, char** argv);

}  // namespace cohort::bench
