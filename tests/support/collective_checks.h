// The per-case checks of the collective sweeps, shared by every suite that runs them on a Group
// of its own (the inproc sweeps, the MPI suite). Each one fills the inputs with closed-form
// values (sweep_value for reductions, movement_value for data movement; test_support.h), runs
// one collective on this rank and checks the result, including sentinels past the end of
// separate outputs and inputs left as they were where the collective must not touch them.
#pragma once

#include <cstddef>
#include <string>

#include "cohort/comm/group.h"

namespace cohort::testing {

// Where a check's buffers live. kRegistered: Group::allocate_registered (collective), which
// takes the in-place shared-memory path on a node with a window: the buffer of allreduce and
// broadcast, the input of allgather (in place: its output) and reduce_scatter.
enum class Memory { kPrivate, kRegistered };

// One case of a collective sweep on this rank: fills the inputs with the sweep's closed-form
// values, runs the collective with `algorithm`, and returns "" or what was wrong. Every rank
// of the group calls it with the same arguments.
std::string check_allreduce(Group& group, size_t count, DType dtype, ReduceOp op,
                            Algorithm algorithm, Memory memory = Memory::kPrivate);  // in place
std::string check_broadcast(Group& group, size_t count, DType dtype, int root, Algorithm algorithm,
                            Memory memory = Memory::kPrivate);
std::string check_reduce(Group& group, size_t count, DType dtype, ReduceOp op, int root,
                         Algorithm algorithm);
std::string check_allgather(Group& group, size_t count, DType dtype, Algorithm algorithm,
                            bool in_place, Memory memory = Memory::kPrivate);
std::string check_reduce_scatter(Group& group, size_t count, DType dtype, ReduceOp op,
                                 Algorithm algorithm, Memory memory = Memory::kPrivate);
// In place: the output is the rank's own block of the input (ZeRO-1 reduces into its bucket).
std::string check_reduce_scatter_in_place(Group& group, size_t count, DType dtype, ReduceOp op,
                                          Algorithm algorithm, Memory memory = Memory::kPrivate);
std::string check_gather(Group& group, size_t count, DType dtype, int root, Algorithm algorithm);
std::string check_scatter(Group& group, size_t count, DType dtype, int root, Algorithm algorithm);
std::string check_all_to_all(Group& group, size_t count, DType dtype,
                             Algorithm algorithm);  // count = elements per block
// The input in `memory` (registered: read in place by the successor), the output private.
std::string check_ring_shift(Group& group, size_t count, DType dtype, Algorithm algorithm,
                             Memory memory = Memory::kPrivate);

}  // namespace cohort::testing
