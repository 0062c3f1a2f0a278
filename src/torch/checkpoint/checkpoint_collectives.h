// The collectives of the group checkpoints (checkpoint.cc, sharded_checkpoint.cc), by
// which every rank reaches the same outcome at the same point (Note [Checkpoint collectives]
// in checkpoint.cc). Each has the group's deadline.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_state.h"
#include "cohort/comm/group.h"

namespace cohort::detail {

// What a rank found: sent ahead of its bytes (a payload, or an error message).
enum CheckpointStatus : int64_t { kStatusOk = 0, kStatusMissing = 1, kStatusFailed = 2 };

// The verified payload of the checkpoint file at `path` (kStatusOk), kStatusMissing, or
// kStatusFailed and the error's message: what a root broadcasts.
void read_file_outcome(const std::string& path, int64_t& status, std::string& bytes);

// `root`'s status and bytes land on every rank.
void broadcast_outcome(Group& group, int64_t& status, std::string& bytes, int root = 0,
                       CallSite site = CallSite::kUser);

// Point to point: `status` then `bytes` from this rank to `peer`, and their receipt.
void send_outcome(Group& group, int peer, int64_t status, const std::string& bytes, CallSite site);
void recv_outcome(Group& group, int peer, int64_t& status, std::string& bytes, CallSite site);

// Rank 0's JobCheck on every rank.
JobCheck broadcast_job_check(Group& group, const JobCheck& mine, CallSite site = CallSite::kUser);

// Every rank's default CPU generator state, in rank order. Throws CheckpointError naming
// `path` on every rank when their sizes differ.
std::vector<torch::Tensor> gather_generator_states(const std::string& path, Group& group,
                                                   CallSite site = CallSite::kUser);

// Each rank passes what it caught (null: nothing). When any rank caught something, returns on
// every rank the error of the lowest such rank: an InvalidArgument as an InvalidArgument,
// anything else as a CheckpointError, with that rank's message; else null. Collective.
std::exception_ptr first_failure_on_any_rank(Group& group, std::exception_ptr error, CallSite site);
// The same, thrown.
void rethrow_on_every_rank(Group& group, std::exception_ptr error, CallSite site);

}  // namespace cohort::detail
