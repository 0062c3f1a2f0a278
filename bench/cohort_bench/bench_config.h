// What one cohort-bench run measures: the collective, the ranks and transport, the element
// type and reduce op, the message sizes and the timing loop. Parsed once from the command line
// (main.cc); every rank of the run parses the same arguments and so holds the same config.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cohort/comm/options.h"
#include "cohort/core/deadline.h"
#include "cohort/core/dtype.h"

namespace cohort::bench {

enum class Collective : uint8_t {
  kAllreduce,
  kBroadcast,
  kReduce,
  kAllgather,
  kReduceScatter,
  kAllToAll,
  kRingShift,
  kBarrier
};

enum class TransportKind : uint8_t { kTcp, kInproc, kMpi };

// Exit codes of the tool (docs/bench.md). A run that has several failures reports the most
// serious: kFailure over kUsage over kWrong.
inline constexpr int kExitOk = 0;
inline constexpr int kExitWrong = 1;    // some collective produced wrong elements
inline constexpr int kExitUsage = 2;    // bad arguments or environment
inline constexpr int kExitFailure = 3;  // a rank died, timed out or threw

struct BenchConfig {
  Collective collective = Collective::kAllreduce;
  int ranks = 2;
  TransportKind transport = TransportKind::kTcp;
  Algorithm algorithm = Algorithm::kAuto;
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  size_t min_bytes = size_t{4} << 10;
  size_t max_bytes = size_t{64} << 20;
  int iters = 20;
  int warmup = 5;
  int trials = 1;
  // --registered: buffers from Group::allocate_registered, which the shared-memory algorithms
  // work on in place (the data of allreduce, broadcast and reduce, the input of allgather and
  // reduce_scatter).
  bool registered = false;
  double timeout_s = 60;    // deadline of every collective, and the watchdog's base
  std::string json_path;    // empty: no JSON
  std::string command_line; // recorded in the JSON
  bool calibrate = false;         // --calibrate: measure the cost model instead (calibrate.h)
  std::string calibrate_path;     // where to write it; empty: CostModel::default_path()
};

const char* collective_name(Collective collective);
// Accepts the names nccl-tests and torch.distributed use ("all_reduce", "alltoall", ...).
Collective parse_collective(const std::string& name);
const char* transport_name(TransportKind transport);
TransportKind parse_transport(const std::string& name);

// "4096", "4K", "4KB", "4KiB", "1M", "2G" (binary multiples); throws InvalidArgument.
size_t parse_size(const std::string& text);

// Whether the collective reduces (and so has a meaningful --op).
bool reduces(Collective collective);
// nccl-tests' bus bandwidth factor: busbw = algbw * factor.
double busbw_factor(Collective collective, int ranks);

// The message sizes to measure: min, 2 min, 4 min, ... up to max (one 0-byte row for barrier).
std::vector<size_t> size_ladder(const BenchConfig& config);

// Throws InvalidArgument when the values cannot be run or checked.
void validate(const BenchConfig& config);

Milliseconds collective_timeout(const BenchConfig& config);

}  // namespace cohort::bench
