#include "group/group_impl.h"

#include "backends/collective_engine.h"
#include "call_stamp.h"
#include "cohort/core/check.h"
#include "cohort/core/error.h"
#include "cohort/core/logging.h"
#include "transport/wire_error.h"

namespace cohort {

std::string Signature::describe() const {
  std::string text = describe_call(stamp());
  if (peer >= 0) text.insert(text.size() - 1, ", peer=" + std::to_string(peer));
  return text;
}

CallStamp Signature::stamp() const {
  return make_stamp(kind, count, dtype, op, root, site);
}

std::string Operation::describe() const {
  if (!collective) return signature.describe();
  return std::string(collective_name(signature.kind)) + " #" + std::to_string(sequence) + " " +
         signature.describe();
}

Group::Impl::Impl(std::shared_ptr<Transport> transport, std::shared_ptr<Store> store,
                  GroupOptions options)
    : transport_(std::move(transport)),
      store_(std::move(store)),
      options_(std::move(options)),
      topology_(Topology::one_rank_per_node(transport_->rank(), transport_->size())) {
  // Without a store (the MPI backend) there is nowhere to report stalls.
  if (store_) {
    stalls_ = std::make_unique<StallReporter>(store_, rank(), size(), options_.timeout);
  }
  // No worker yet: Note [Worker on demand].
}

void Group::Impl::attach_engine(std::shared_ptr<CollectiveEngine> engine) {
  COHORT_INTERNAL_ASSERT(engine_ == nullptr, "a group's engine is attached once");
  engine_ = std::move(engine);
  forget_choices();
}

void Group::Impl::attach_staging(std::shared_ptr<DeviceStaging> staging) {
  COHORT_INTERNAL_ASSERT(staging_ == nullptr, "a group's staging is attached once");
  staging_ = std::make_unique<StagingBackend>(std::move(staging), native_, engine_.get());
  forget_choices();
}

bool Group::Impl::takes_device_buffers() const {
  return staging_ != nullptr || (engine_ != nullptr && engine_->handles_device_memory());
}

Group::Impl::~Impl() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  if (worker_.joinable()) worker_.join();  // queued operations finish by their deadlines
}

Milliseconds Group::Impl::timeout_for(const CollectiveOptions& opts) const {
  return opts.timeout.count() > 0 ? opts.timeout : options_.timeout;
}

// Note [Remembered choices]: the choice depends only on (kind, requested, bytes) once the
// group's shape and cost model are set, and weighing the cost model is a good part of a small
// collective's time. A slot holds bytes, kind, request and choice in one atomic word, so that
// concurrent callers read either a whole entry or another key.
Algorithm Group::Impl::algorithm_for(CollectiveKind kind, size_t bytes,
                                     const CollectiveOptions& opts) const {
  const Algorithm requested =
      opts.algorithm != Algorithm::kAuto ? opts.algorithm : options_.algorithm;
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

void Group::Impl::forget_choices() {
  for (auto& slot : choices_) slot.store(0, std::memory_order_relaxed);
}

GroupShape Group::Impl::shape() const {
  GroupShape shape;
  shape.world = size();
  shape.nodes = topology_.num_nodes();
  shape.local_size = topology_.uniform_local_size();
  shape.shared_memory = shared_memory_everywhere_;
  // Algorithm::kEngine is a choice for host buffers: only an engine of host memory offers it.
  shape.engine = engine_ != nullptr && engine_->handles_host_memory();
  return shape;
}

uint64_t Group::Impl::sequence_number() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return next_sequence_;
}

// Note [Worker on demand]: a group starts its worker thread with its first queued operation.
// Blocking calls (collectives and point-to-point alike) run on the caller's thread whenever
// nothing is queued ahead of them, so a group used only that way (a parameter server's pair
// groups on the server side, a group that only agrees on flags) never starts one: a server of
// 63 workers would otherwise hold 63 idle threads.
void Group::Impl::enqueue_locked(Operation op) {
  op.work = std::make_shared<Work>(op.describe());
  queue_.push_back(std::move(op));
  if (!worker_.joinable()) worker_ = std::thread([this] { worker_loop(); });
}

std::shared_ptr<Work> Group::Impl::submit(Operation op) {
  std::shared_ptr<Work> work;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    op.sequence = next_sequence_++;
    enqueue_locked(std::move(op));
    work = queue_.back().work;
  }
  queue_cv_.notify_all();
  return work;
}

Operation Group::Impl::p2p_operation(CollectiveKind kind, size_t count, DType dtype, int peer,
                                     const CollectiveOptions& opts) const {
  Operation op;
  op.collective = false;
  op.signature = {kind, count, dtype, opts.op, 0, peer};
  op.channel = kP2PChannelBit | opts.tag;
  op.timeout = timeout_for(opts);
  return op;
}

void Group::Impl::number_p2p_locked(Operation& op, P2PBody body) {
  auto& counters = op.signature.kind == CollectiveKind::kSend ? p2p_send_index_ : p2p_recv_index_;
  const uint64_t index = counters[{op.signature.peer, op.channel}]++;
  op.body = [body = std::move(body), index](algo::Context& ctx) { body(ctx, index); };
}

std::shared_ptr<Work> Group::Impl::submit_p2p(CollectiveKind kind, size_t count, DType dtype,
                                              int peer, const CollectiveOptions& opts,
                                              P2PBody body) {
  Operation op = p2p_operation(kind, count, dtype, peer, opts);
  std::shared_ptr<Work> work;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    number_p2p_locked(op, std::move(body));
    enqueue_locked(std::move(op));
    work = queue_.back().work;
  }
  queue_cv_.notify_all();
  return work;
}

void Group::Impl::run_p2p_blocking(CollectiveKind kind, size_t count, DType dtype, int peer,
                                   const CollectiveOptions& opts, P2PBody body) {
  Operation op = p2p_operation(kind, count, dtype, peer, opts);
  std::unique_lock<std::mutex> lock(mutex_);
  number_p2p_locked(op, std::move(body));
  if (!queue_.empty() || busy_) {
    enqueue_locked(std::move(op));
    const std::shared_ptr<Work> work = queue_.back().work;
    lock.unlock();
    queue_cv_.notify_all();
    work->wait();
    return;
  }
  run_inline(op, lock);  // as run_blocking (Note [Worker on demand])
}

void Group::Impl::run_blocking(Operation op) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!queue_.empty() || busy_) {
    lock.unlock();
    submit(std::move(op))->wait();
    return;
  }
  op.sequence = next_sequence_++;
  run_inline(op, lock);
}

void Group::Impl::run_inline(Operation& op, std::unique_lock<std::mutex>& lock) {
  // Nothing ahead of us: run on this thread and save the hand-off to the worker (tens of
  // microseconds on a loaded machine, more than a small allreduce takes).
  // No Work either: nobody else can wait on this operation, so its error comes straight back.
  busy_ = true;
  lock.unlock();
  const std::exception_ptr error = run(op);
  lock.lock();
  busy_ = false;
  // Only the worker waits on queue_cv_, and only for queued work: waking it for nothing costs
  // a futex call and a context switch per collective.
  const bool queued = !queue_.empty();
  lock.unlock();
  if (queued) queue_cv_.notify_all();
  if (error) std::rethrow_exception(error);
}

void Group::Impl::worker_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    queue_cv_.wait(lock,
                   [&] { return (!queue_.empty() && !busy_) || (stopping_ && queue_.empty()); });
    if (queue_.empty()) return;  // stopping
    Operation op = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    execute(op);
    lock.lock();
    busy_ = false;
    queue_cv_.notify_all();
  }
}

void Group::Impl::execute(Operation& op) noexcept {
  op.work->mark_started();
  op.work->mark_done(run(op));
}

std::exception_ptr Group::Impl::run(Operation& op) noexcept {
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    error = failure_;
  }
  if (!error) {
    try {
      const Deadline deadline = Deadline::after(op.timeout);
      if (op.collective) {
        if (stalls_) stalls_->started(op.sequence);
        if (options_.debug_checks) check_signatures(op, deadline);
        const CallStamp stamp = options_.check_calls ? op.signature.stamp() : CallStamp{};
        if (stamp.stamped() && checks_calls_through_engine()) {
          check_call_through_engine(op.sequence, stamp, deadline);
        }
        algo::Context ctx(*transport_, op.sequence, deadline, scratch_, shm_.get(), &topology_,
                          stamp);
        op.body(ctx);
        if (stalls_) stalls_->finished(op.sequence);
      } else {
        algo::Context ctx(*transport_, op.channel, deadline, scratch_);
        op.body(ctx);
      }
    } catch (...) {
      error = explain_failure(op, std::current_exception());
      abort(error);
    }
  }
  return error;
}

void Group::Impl::abort(std::exception_ptr error) noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failure_) return;
    failure_ = error;
  }
  transport_->abort(error);
  // Idempotent where the engine is the transport (MPI).
  if (engine_) engine_->abort(error);
  if (shm_) shm_->abort(error);
}

// A local timeout becomes a TimeoutError that names the collective, its sequence number and
// the ranks that never started it. Errors relayed from other ranks already say all that.
std::exception_ptr Group::Impl::explain_failure(const Operation& op, std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const TimeoutError& e) {
    if (WireError::is_relayed(e.what())) return error;
    std::string text = op.describe() + " timed out after " + std::to_string(op.timeout.count()) +
                       " ms on rank " + std::to_string(rank()) + " (" + e.what() + ")";
    if (op.collective) {
      text += "; " + (stalls_ ? stalls_->ranks_behind(op.sequence)
                              : "this group has no store to tell which ranks joined it (MPI "
                                "backend)");
    }
    return std::make_exception_ptr(TimeoutError(text));
  } catch (const PeerError& e) {
    if (WireError::is_relayed(e.what())) return error;
    return std::make_exception_ptr(
        PeerError(e.failed_rank(),
                  op.describe() + " failed on rank " + std::to_string(rank()) + ": " + e.what()));
  } catch (...) {
    return error;
  }
}

}  // namespace cohort
