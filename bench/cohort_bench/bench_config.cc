#include "bench_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

#include "cohort/core/error.h"
#include "values.h"

namespace cohort::bench {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// "K" -> 2^10, "MiB" -> 2^20, "" -> 1; 0 when the suffix is not understood.
size_t suffix_multiplier(const std::string& suffix) {
  const std::string s = lower(suffix);
  const std::string unit = s.empty() ? "" : s.substr(0, 1);
  const std::string rest = s.empty() ? "" : s.substr(1);
  if (s.empty() || s == "b") return 1;
  if (rest != "" && rest != "b" && rest != "ib") return 0;
  if (unit == "k") return size_t{1} << 10;
  if (unit == "m") return size_t{1} << 20;
  if (unit == "g") return size_t{1} << 30;
  return 0;
}

}  // namespace

const char* collective_name(Collective collective) {
  switch (collective) {
    case Collective::kAllreduce: return "allreduce";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kReduce: return "reduce";
    case Collective::kAllgather: return "allgather";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllToAll: return "all_to_all";
    case Collective::kRingShift: return "ring_shift";
    case Collective::kBarrier: return "barrier";
  }
  return "unknown-collective";
}

Collective parse_collective(const std::string& name) {
  std::string n = lower(name);
  n.erase(std::remove(n.begin(), n.end(), '_'), n.end());
  if (n == "allreduce") return Collective::kAllreduce;
  if (n == "broadcast" || n == "bcast") return Collective::kBroadcast;
  if (n == "reduce") return Collective::kReduce;
  if (n == "allgather") return Collective::kAllgather;
  if (n == "reducescatter") return Collective::kReduceScatter;
  if (n == "alltoall") return Collective::kAllToAll;
  if (n == "ringshift") return Collective::kRingShift;
  if (n == "barrier") return Collective::kBarrier;
  throw InvalidArgument("unknown collective '" + name +
                        "': use allreduce, broadcast, reduce, allgather, reduce_scatter, "
                        "all_to_all, ring_shift or barrier");
}

const char* transport_name(TransportKind transport) {
  switch (transport) {
    case TransportKind::kTcp: return "tcp";
    case TransportKind::kInproc: return "inproc";
    case TransportKind::kMpi: return "mpi";
  }
  return "unknown";
}

TransportKind parse_transport(const std::string& name) {
  const std::string n = lower(name);
  if (n == "tcp") return TransportKind::kTcp;
  if (n == "inproc") return TransportKind::kInproc;
  if (n == "mpi") return TransportKind::kMpi;
  throw InvalidArgument("unknown transport '" + name + "': use tcp, inproc or mpi");
}

size_t parse_size(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  const size_t multiplier = suffix_multiplier(text.substr(digits));
  if (digits == 0 || multiplier == 0) {
    throw InvalidArgument("cannot read size '" + text +
                          "': use a byte count with an optional K, M or G suffix (4K, 1M)");
  }
  const std::string number = text.substr(0, digits);
  // Reject what would overflow before multiplying: 20 digits already exceed 2^64 - 1 / 2^30.
  if (digits > 15) throw InvalidArgument("size '" + text + "' is too large");
  const size_t value = std::stoull(number);
  if (value > std::numeric_limits<size_t>::max() / multiplier) {
    throw InvalidArgument("size '" + text + "' is too large");
  }
  return value * multiplier;
}

bool reduces(Collective collective) {
  return collective == Collective::kAllreduce || collective == Collective::kReduce ||
         collective == Collective::kReduceScatter;
}

double busbw_factor(Collective collective, int ranks) {
  const double n = ranks;
  switch (collective) {
    case Collective::kAllreduce: return 2.0 * (n - 1) / n;
    case Collective::kAllgather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll: return (n - 1) / n;
    case Collective::kBroadcast:
    case Collective::kReduce:
    case Collective::kRingShift: return 1.0;
    case Collective::kBarrier: return 0.0;
  }
  return 0.0;
}

std::vector<size_t> size_ladder(const BenchConfig& config) {
  if (config.collective == Collective::kBarrier) return {0};
  std::vector<size_t> sizes;
  for (size_t bytes = config.min_bytes; bytes <= config.max_bytes; bytes *= 2) {
    sizes.push_back(bytes);
    if (bytes > config.max_bytes / 2) break;  // the next doubling would pass max (or overflow)
  }
  return sizes;
}

void validate(const BenchConfig& c) {
  auto require = [](bool ok, const std::string& message) {
    if (!ok) throw InvalidArgument(message);
  };
  require(c.ranks >= 1, "--ranks must be at least 1, got " + std::to_string(c.ranks));
  require(c.ranks <= 1024, "--ranks " + std::to_string(c.ranks) + " is more than 1024");
  require(c.iters >= 1, "--iters must be at least 1, got " + std::to_string(c.iters));
  require(c.warmup >= 0, "--warmup must not be negative, got " + std::to_string(c.warmup));
  require(c.trials >= 1, "--trials must be at least 1, got " + std::to_string(c.trials));
  require(std::isfinite(c.timeout_s) && c.timeout_s > 0 && c.timeout_s <= 86400 * 7,
          "--timeout must be a positive number of seconds, at most a week");
  require(c.min_bytes >= 1, "--min-bytes must be at least 1");
  require(c.min_bytes <= c.max_bytes, "--min-bytes (" + std::to_string(c.min_bytes) +
                                          ") is larger than --max-bytes (" +
                                          std::to_string(c.max_bytes) + ")");
  // Sums are checked exactly, so they must not overflow the element type (docs/bench.md).
  if (reduces(c.collective) && (c.op == ReduceOp::kSum || c.op == ReduceOp::kAvg)) {
    require(static_cast<double>(c.ranks) <= largest_exact_integer(c.dtype),
            std::string("a ") + reduce_op_name(c.op) + " of " + std::to_string(c.ranks) +
                " ranks overflows " + dtype_name(c.dtype) + ": use fewer ranks or a wider type");
  }
}

Milliseconds collective_timeout(const BenchConfig& config) {
  return Milliseconds(static_cast<int64_t>(std::ceil(config.timeout_s * 1000.0)));
}

}  // namespace cohort::bench
