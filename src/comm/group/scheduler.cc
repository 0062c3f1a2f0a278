#include "group/scheduler.h"

namespace cohort {

Scheduler::~Scheduler() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  if (worker_.joinable()) worker_.join();  // queued operations finish by their deadlines
}

uint64_t Scheduler::sequence_number() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return next_sequence_;
}

std::exception_ptr Scheduler::failure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failure_;
}

bool Scheduler::fail(std::exception_ptr error) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (failure_) return false;
  failure_ = std::move(error);
  return true;
}

std::shared_ptr<Work> Scheduler::enqueue_locked(Operation op) {
  op.work = std::make_shared<Work>(op.describe());
  std::shared_ptr<Work> work = op.work;
  queue_.push_back(std::move(op));
  if (!worker_.joinable()) worker_ = std::thread([this] { worker_loop(); });
  return work;
}

std::shared_ptr<Work> Scheduler::submit(Operation op) {
  std::shared_ptr<Work> work;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    op.sequence = next_sequence_++;
    work = enqueue_locked(std::move(op));
  }
  queue_cv_.notify_all();
  return work;
}

void Scheduler::number_p2p_locked(Operation& op, P2PBody body) {
  auto& counters = op.signature.kind == CollectiveKind::kSend ? p2p_send_index_ : p2p_recv_index_;
  const uint64_t index = counters[{op.signature.peer, op.channel}]++;
  op.body = [body = std::move(body), index](algo::Context& ctx) { body(ctx, index); };
}

std::shared_ptr<Work> Scheduler::submit_p2p(Operation op, P2PBody body) {
  std::shared_ptr<Work> work;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    number_p2p_locked(op, std::move(body));
    work = enqueue_locked(std::move(op));
  }
  queue_cv_.notify_all();
  return work;
}

void Scheduler::run_p2p_blocking(Operation op, P2PBody body) {
  std::unique_lock<std::mutex> lock(mutex_);
  number_p2p_locked(op, std::move(body));
  run_now_or_after_queue(op, lock);
}

void Scheduler::run_blocking(Operation op) {
  std::unique_lock<std::mutex> lock(mutex_);
  op.sequence = next_sequence_++;
  run_now_or_after_queue(op, lock);
}

void Scheduler::run_now_or_after_queue(Operation& op, std::unique_lock<std::mutex>& lock) {
  if (queue_.empty() && !busy_) return run_inline(op, lock);  // Note [Worker on demand]
  const std::shared_ptr<Work> work = enqueue_locked(std::move(op));
  lock.unlock();
  queue_cv_.notify_all();
  work->wait();
}

void Scheduler::run_inline(Operation& op, std::unique_lock<std::mutex>& lock) {
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

void Scheduler::worker_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    queue_cv_.wait(lock,
                   [&] { return (!queue_.empty() && !busy_) || (stopping_ && queue_.empty()); });
    if (queue_.empty()) return;  // stopping
    Operation op = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    op.work->mark_started();
    op.work->mark_done(run(op));
    lock.lock();
    busy_ = false;
    queue_cv_.notify_all();
  }
}

std::exception_ptr Scheduler::run(Operation& op) noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failure_) return failure_;
  }
  return execute_(op);
}

}  // namespace cohort
