// Where a collective's backend and algorithm are chosen (Note [Backends]): once per call, on
// the caller's thread, before it is queued. docs/architecture.md, "The life of one allreduce".
#include "backends/collective_engine.h"
#include "cohort/core/check.h"
#include "cohort/core/logging.h"
#include "group/group_impl.h"
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

bool Group::Impl::on_device_engine(const CollectiveCall& call) const {
  if (engine_ == nullptr || !engine_->handles_device_memory()) return false;
  if (call.device != kHostMemory) return true;
  // A barrier of an NCCL group waits for the work queued on the device before it.
  return call.kind == CollectiveKind::kBarrier && !engine_->handles_host_memory();
}

Group::Impl::Dispatch Group::Impl::dispatch(const CollectiveCall& call,
                                            const CollectiveOptions& opts) const {
  if (on_device_engine(call)) {
    COHORT_CHECK(engine_->supports(call.kind, call.dtype, call.op, call.count),
                 engine_->engine_name(), " cannot run ", call.describe());
    check_device(call, *engine_);
    return {engine_.get(), Plan{Algorithm::kEngine, Algorithm::kRing}};
  }
  const bool staged = call.device != kHostMemory && staging_ != nullptr;
  size_t bytes = bytes_for_choice(call, size());
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
void Group::Impl::check_device(const CollectiveCall& call, const CollectiveBackend& backend) const {
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
void Group::Impl::note_engine_fallback(const CollectiveCall& call, Algorithm algorithm) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!engine_fallbacks_noted_.insert({call.kind, call.dtype}).second) return;
  COHORT_LOG(kInfo, engine_->engine_name(), " has no ", collective_name(call.kind), " of ",
             dtype_name(call.dtype), " (", call.describe(), "): cohort's ",
             algorithm_name(algorithm), " runs it over ", transport_->name(), " point-to-point");
}

Operation Group::Impl::collective_operation(const CollectiveCall& call,
                                            const CollectiveOptions& opts) const {
  const Dispatch chosen = dispatch(call, opts);
  Operation op;
  op.signature = {call.kind, call.count, call.dtype, call.op, call.root};
  op.signature.site = opts.site;
  op.timeout = timeout_for(opts);
  op.body = [call, chosen](algo::Context& ctx) { chosen.backend->run(call, chosen.plan, ctx); };
  return op;
}

}  // namespace cohort

namespace cohort {

// Point-to-point: host buffers over the transport with the message's index in its (peer, tag)
// stream; device buffers on the engine (NCCL), which has no tags and matches in issue order.
std::shared_ptr<Work> Group::Impl::point_to_point(const CollectiveCall& call, int peer,
                                                  const CollectiveOptions& opts, bool blocking) {
  CollectiveEngine* engine = engine_.get();
  const bool on_engine = on_device_engine(call);
  const bool staged = !on_engine && call.device != kHostMemory && staging_ != nullptr;
  const CollectiveBackend& backend = on_engine ? static_cast<const CollectiveBackend&>(*engine)
                                     : staged  ? static_cast<const CollectiveBackend&>(*staging_)
                                               : native_;
  check_device(call, backend);
  const bool sending = call.kind == CollectiveKind::kSend;
  std::function<void(algo::Context&, uint64_t)> body;
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
  if (blocking) {
    run_p2p_blocking(call.kind, call.count, call.dtype, peer, opts, std::move(body));
    return nullptr;
  }
  return submit_p2p(call.kind, call.count, call.dtype, peer, opts, std::move(body));
}

}  // namespace cohort
