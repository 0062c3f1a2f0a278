// Where a collective's backend and algorithm are chosen (Note [Backends]): once per call, on
// the caller's thread, before it is queued. docs/architecture.md, "The life of one allreduce".
#include "group/dispatcher.h"

#include "backends/collective_engine.h"
#include "cohort/core/check.h"
#include "cohort/core/logging.h"
#include "kernels/reduce_kernels.h"

namespace cohort {

namespace {

// The size the choice goes by: the larger buffer of the call (the output of an all-gather,
// the input of a reduce-scatter).
size_t bytes_for_choice(const CollectiveCall& call, int size) {
  const bool per_rank_block =
      call.kind == CollectiveKind::kAllgather || call.kind == CollectiveKind::kReduceScatter;
  return per_rank_block ? call.bytes() * static_cast<size_t>(size) : call.bytes();
}

}  // namespace

Dispatcher::Dispatcher(int size, std::string transport_name, const GroupOptions& options)
    : size_(size),
      transport_name_(std::move(transport_name)),
      default_algorithm_(options.algorithm),
      default_timeout_(options.timeout),
      nodes_(size) {}  // one rank per node until the set-up says otherwise

void Dispatcher::attach_engine(std::shared_ptr<CollectiveEngine> engine) {
  COHORT_INTERNAL_ASSERT(engine_ == nullptr, "a group's engine is attached once");
  engine_ = std::move(engine);
  forget_choices();
}

void Dispatcher::attach_staging(std::shared_ptr<DeviceStaging> staging) {
  COHORT_INTERNAL_ASSERT(staging_ == nullptr, "a group's staging is attached once");
  staging_ = std::make_unique<StagingBackend>(std::move(staging), native_, engine_.get());
  forget_choices();
}

bool Dispatcher::takes_device_buffers() const {
  return staging_ != nullptr || (engine_ != nullptr && engine_->handles_device_memory());
}

void Dispatcher::set_layout(const Topology& topology, bool shared_memory_everywhere,
                            const CostModel& cost_model) {
  nodes_ = topology.num_nodes();
  local_size_ = topology.uniform_local_size();
  shared_memory_everywhere_ = shared_memory_everywhere;
  cost_model_ = cost_model;
  forget_choices();
}

Milliseconds Dispatcher::timeout_for(const CollectiveOptions& opts) const {
  return opts.timeout.count() > 0 ? opts.timeout : default_timeout_;
}

// Note [Remembered choices]: the choice depends only on (kind, requested, bytes) once the
// group's shape and cost model are set, and weighing the cost model is a good part of a small
// collective's time. A slot holds bytes, kind, request and choice in one atomic word, so that
// concurrent callers read either a whole entry or another key.
Algorithm Dispatcher::algorithm_for(CollectiveKind kind, size_t bytes,
                                    const CollectiveOptions& opts) const {
  const Algorithm requested =
      opts.algorithm != Algorithm::kAuto ? opts.algorithm : default_algorithm_;
  constexpr int kKeyShift = 16;
  const bool fits = bytes < (uint64_t{1} << (64 - kKeyShift - 1));
  const uint64_t key = (uint64_t{bytes} << kKeyShift) | (static_cast<uint64_t>(kind) << 8) |
                       (static_cast<uint64_t>(requested) << 4) | uint64_t{1} << 63;
  static_assert(static_cast<int>(Algorithm::kEngine) < 16, "an algorithm fits 4 bits of a slot");
  static_assert(std::tuple_size<decltype(choices_)>::value == 64, "slots are picked by 6 bits");
  // Fibonacci hashing: the top bits of the product depend on every bit of the key.
  std::atomic<uint64_t>& slot =
      choices_[((key & ~(uint64_t{1} << 63)) * 0x9E3779B97F4A7C15ull) >> 58];
  const uint64_t seen = slot.load(std::memory_order_relaxed);
  if (fits && (seen & ~uint64_t{0xF}) == key) return static_cast<Algorithm>(seen & 0xF);
  const Algorithm chosen = choose_algorithm(kind, requested, bytes, shape(), cost_model_);
  if (fits) slot.store(key | static_cast<uint64_t>(chosen), std::memory_order_relaxed);
  return chosen;
}

void Dispatcher::forget_choices() {
  for (auto& slot : choices_) slot.store(0, std::memory_order_relaxed);
}

GroupShape Dispatcher::shape() const {
  GroupShape shape;
  shape.world = size_;
  shape.nodes = nodes_;
  shape.local_size = local_size_;
  shape.shared_memory = shared_memory_everywhere_;
  // Algorithm::kEngine is a choice for host buffers: only an engine of host memory offers it.
  shape.engine = engine_ != nullptr && engine_->handles_host_memory();
  return shape;
}

bool Dispatcher::on_device_engine(const CollectiveCall& call) const {
  if (engine_ == nullptr || !engine_->handles_device_memory()) return false;
  if (call.device != kHostMemory) return true;
  // A barrier of an NCCL group waits for the work queued on the device before it.
  return call.kind == CollectiveKind::kBarrier && !engine_->handles_host_memory();
}

Dispatcher::Dispatch Dispatcher::dispatch(const CollectiveCall& call,
                                          const CollectiveOptions& opts) const {
  if (on_device_engine(call)) {
    COHORT_CHECK(engine_->supports(call.kind, call.dtype, call.op, call.count),
                 engine_->engine_name(), " cannot run ", call.describe());
    check_device(call, *engine_);
    return {engine_.get(), Plan{Algorithm::kEngine, Algorithm::kRing}};
  }
  const bool staged = call.device != kHostMemory && staging_ != nullptr;
  size_t bytes = bytes_for_choice(call, size_);
  if (staged) bytes = staging_->bytes_for_choice(call, bytes);
  Algorithm algorithm = algorithm_for(call.kind, bytes, opts);
  CollectiveBackend* backend = &native_;
  if (staged) {
    // Note [Staged device buffers]: the staging runs the plan on host copies, on the engine
    // where the plan says kEngine.
    backend = staging_.get();
  } else if (algorithm == Algorithm::kEngine) {  // only offered by an engine of host memory (MPI)
    if (engine_->supports(call.kind, call.dtype, kernels::combine_op(call.op), call.count)) {
      backend = engine_.get();
    } else {
      // The engine lacks it (MPI has no float16): cohort's algorithms run it over the same
      // transport. Every rank passes the same call, so every rank falls back alike.
      algorithm = choose_algorithm(call.kind, Algorithm::kAuto, bytes, shape(), cost_model_);
      note_engine_fallback(call, algorithm);
    }
  }
  check_device(call, *backend);
  const Algorithm across =
      algorithm == Algorithm::kHierarchical ? algorithm_across_nodes(bytes) : Algorithm::kRing;
  return {backend, Plan{algorithm, across}};
}

// Note [Device buffers]: only an engine that handles device memory (NCCL), or a group that
// stages device buffers through host memory (Note [Staged device buffers]), takes buffers on a
// CUDA device. cohort's own algorithms read and write buffers with the CPU (memcpy, reduce
// kernels), which would fault on device pointers, so other groups refuse them up front.
void Dispatcher::check_device(const CollectiveCall& call, const CollectiveBackend& backend) const {
  if (call.device == kHostMemory) return;
  const char* what = collective_name(call.kind);
  COHORT_CHECK(call.device >= 0, what, ": buffer device ", call.device,
               " is neither kHostMemory (-1) nor a CUDA device index");
  if (&backend == staging_.get()) {
    staging_->staging().check_device(call.device, what);
    return;
  }
  const bool engine_takes_it = &backend == engine_.get() && engine_->handles_device_memory();
  COHORT_CHECK(engine_takes_it, what, ": the buffer is on ", place_name(call.device),
               ", but this group moves host memory only (",
               engine_ != nullptr ? engine_->engine_name() : "cohort's own algorithms",
               "): run it on an NCCL group (cohort::create_nccl_group, cohort/comm/nccl.h), on "
               "a group that stages device buffers (cohort::create_cuda_staged_group, "
               "cohort/comm/cuda_staging.h), or copy the data to the host first");
  engine_->check_device(call.device, what);
}

// Not silent: the user asked for the engine's collectives (COHORT_ALGO=engine,
// COHORT_MPI_COLLECTIVES=mpi). Said once per collective and dtype.
void Dispatcher::note_engine_fallback(const CollectiveCall& call, Algorithm algorithm) const {
  std::lock_guard<std::mutex> lock(fallbacks_mutex_);
  if (!engine_fallbacks_noted_.insert({call.kind, call.dtype}).second) return;
  COHORT_LOG(kInfo, engine_->engine_name(), " has no ", collective_name(call.kind), " of ",
             dtype_name(call.dtype), " (", call.describe(), "): cohort's ",
             algorithm_name(algorithm), " runs it over ", transport_name_, " point-to-point");
}

Operation Dispatcher::collective_operation(const CollectiveCall& call,
                                           const CollectiveOptions& opts) const {
  const Dispatch chosen = dispatch(call, opts);
  Operation op;
  op.signature = {call.kind, call.count, call.dtype, call.op, call.root};
  op.signature.site = opts.site;
  op.timeout = timeout_for(opts);
  op.body = [call, chosen](algo::Context& ctx) { chosen.backend->run(call, chosen.plan, ctx); };
  return op;
}

// Point-to-point: host buffers over the transport with the message's index in its (peer, tag)
// stream; device buffers on the engine (NCCL), which has no tags and matches in issue order.
Scheduler::P2PBody Dispatcher::point_to_point_body(const CollectiveCall& call, int peer) const {
  CollectiveEngine* engine = engine_.get();
  const bool on_engine = on_device_engine(call);
  const bool staged = !on_engine && call.device != kHostMemory && staging_ != nullptr;
  const CollectiveBackend& backend = on_engine ? static_cast<const CollectiveBackend&>(*engine)
                                     : staged  ? static_cast<const CollectiveBackend&>(*staging_)
                                               : native_;
  check_device(call, backend);
  const bool sending = call.kind == CollectiveKind::kSend;
  Scheduler::P2PBody body;
  if (staged) {
    body = [call, peer, staging = staging_.get(), sending](algo::Context& ctx, uint64_t index) {
      if (sending) {
        staging->send(call, peer, index, ctx);
      } else {
        staging->recv(call, peer, index, ctx);
      }
    };
  } else if (on_engine) {
    body = [call, peer, engine, sending](algo::Context& ctx, uint64_t) {
      const EngineCall on{ctx.deadline(), call.device, call.stream};
      if (sending) {
        engine->send(call.in, call.count, call.dtype, peer, on);
      } else {
        engine->recv(call.out, call.count, call.dtype, peer, on);
      }
    };
  } else {
    body = [call, peer, sending](algo::Context& ctx, uint64_t index) {
      if (sending) {
        ctx.send_message(peer, index, call.in, call.bytes());
      } else {
        ctx.recv_message(peer, index, call.out, call.bytes());
      }
    };
  }
  return body;
}

}  // namespace cohort
