#include "transport/tcp/tcp_connection.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "cohort/core/logging.h"
#include "kernels/reduce_kernels.h"
#include "transport/call_stamp.h"
#include "transport/wire_error.h"

namespace cohort::tcp {

constexpr uint32_t kRead = EPOLLIN;
constexpr uint32_t kWrite = EPOLLOUT;

// Note [Claimed receives]: the reading event loop reads a payload straight into the buffer of the
// receive it matched, without holding the lock, so that large messages are not copied twice.
// From the header until the last byte the receive is "claimed": its waiter must not return
// (the caller would free or reuse the buffer under the loop's feet). Frames are written whole,
// so a claimed receive completes soon (or its peer dies) even when the transport has failed
// meanwhile; only a waiter that hits its deadline shuts the socket down, which makes the
// loop's next read see end of stream and let go (Connection::end_reading), and then waits for
// that. Shutting down earlier would also keep this rank's abort message from reaching that peer.

class Connection::RecvRequest final : public Request {
 public:
  RecvRequest(Connection& connection, Tag tag, std::shared_ptr<Pending> pending, Deadline deadline)
      : connection_(connection), tag_(tag), pending_(std::move(pending)), deadline_(deadline) {}

  void wait() override {
    auto& c = connection_;
    std::unique_lock<std::mutex> lock(c.mutex_);
    for (;;) {
      if (pending_->done) {
        if (pending_->error) std::rethrow_exception(pending_->error);
        return;
      }
      // A claimed receive is being filled: frames are written whole, so it completes (or the
      // peer dies) soon, even when the transport has failed meanwhile. Only the deadline
      // justifies cutting it off.
      if (!pending_->claimed && c.error_) {
        c.remove_posted(tag_, pending_);
        std::rethrow_exception(c.error_);
      }
      if (deadline_.expired()) {
        if (!pending_->claimed) {
          c.remove_posted(tag_, pending_);
          throw TimeoutError("receive from rank " + std::to_string(c.peer_) + " timed out (" +
                             std::to_string(pending_->bytes) + " bytes expected)");
        }
        cut_off(lock);
        throw TimeoutError("receive of " + std::to_string(pending_->bytes) + " bytes from rank " +
                           std::to_string(c.peer_) + " timed out midway");
      }
      c.changed_.wait_until(lock, deadline_.at());
    }
  }

  // A request dropped without wait() (an error unwound past it) must not leave its buffer
  // posted: a message arriving later would be written into memory the caller has freed.
  ~RecvRequest() override {
    auto& c = connection_;
    std::unique_lock<std::mutex> lock(c.mutex_);
    if (!pending_->claimed) {
      if (!pending_->done) c.remove_posted(tag_, pending_);
      return;
    }
    c.changed_.wait_until(lock, deadline_.at(), [&] { return pending_->done; });
    if (!pending_->done) cut_off(lock);
  }

 private:
  // Makes the loop give the buffer back now: its next read sees end of stream once the socket
  // is shut down (or stop() fails the receive, when the connection is taken off the loop).
  void cut_off(std::unique_lock<std::mutex>& lock) {
    connection_.socket_.shutdown();
    connection_.changed_.wait(lock, [&] { return pending_->done; });
  }

  Connection& connection_;
  Tag tag_;
  std::shared_ptr<Pending> pending_;
  Deadline deadline_;
};

// Note [Outbox]: a send first writes on the caller's thread as much as the socket takes
// without blocking (a small message goes out at once, with no thread hand-off). Whatever is
// left waits in the outbox, and the connection asks the writing event loop to tell it when
// the socket is writable again; that loop then writes the outbox in order, so that isend returns at
// once and an algorithm can receive and reduce while its large sends stream out. Frames leave in
// the order they were queued; inline writes only happen on an empty outbox. All writes happen
// under send_mutex_ and never block. A send request, like a receive (Note [Claimed receives]),
// never returns while the loop may still read the caller's buffer: it takes a frame nobody
// started back out of the outbox; a frame partly on the wire it waits for until its deadline,
// and past it the connection's sending breaks (half a frame cannot be taken back).

class Connection::SendRequest final : public Request {
 public:
  SendRequest(Connection& connection, std::shared_ptr<Outgoing> frame)
      : connection_(connection), frame_(std::move(frame)) {}

  void wait() override {
    auto& c = connection_;
    std::unique_lock<std::mutex> lock(c.send_mutex_);
    c.send_changed_.wait_until(lock, frame_->deadline.at(), [&] { return frame_->done; });
    if (!frame_->done) {
      abandon(lock);
      throw TimeoutError("send of " + std::to_string(frame_->header.bytes) + " bytes to rank " +
                         std::to_string(c.peer_) + " timed out: it is not reading");
    }
    if (frame_->error) std::rethrow_exception(frame_->error);
  }

  ~SendRequest() override {
    auto& c = connection_;
    std::unique_lock<std::mutex> lock(c.send_mutex_);
    if (frame_->done) return;
    if (frame_->started()) {
      // The peer is probably reading: let the loop finish the frame, as wait() would have.
      c.send_changed_.wait_until(lock, frame_->deadline.at(), [&] { return frame_->done; });
    }
    if (!frame_->done) abandon(lock);
  }

 private:
  // Takes the frame back from the loop (which writes only under send_mutex_, held here).
  void abandon(std::unique_lock<std::mutex>& lock) {
    auto& c = connection_;
    const bool started = frame_->started();
    c.drop_from_outbox(frame_);
    if (!started) return;
    auto error = std::make_exception_ptr(TimeoutError(
        "send of " + std::to_string(frame_->header.bytes) + " bytes to rank " +
        std::to_string(c.peer_) + " timed out midway: the connection cannot be used any more"));
    const bool first = c.break_sending(error);
    lock.unlock();
    c.send_changed_.notify_all();
    if (first) c.sink_.on_connection_failed(c.peer_, error);
    lock.lock();
  }

  Connection& connection_;
  std::shared_ptr<Outgoing> frame_;
};

Connection::Connection(net::Socket socket, int local_rank, int peer_rank, FailureSink& sink,
                       std::shared_ptr<net::EventLoop> in_loop,
                       std::shared_ptr<net::EventLoop> out_loop)
    : socket_(std::move(socket)),
      rank_(local_rank),
      peer_(peer_rank),
      peer_address_(socket_.peer_name()),
      sink_(sink),
      in_loop_(std::move(in_loop)),
      out_loop_(std::move(out_loop)) {
  // A dead process closes its sockets (the loop sees it at once); a vanished host does not,
  // so probe: an idle connection to one is declared dead after about 5 + 3 x 2 = 11 s.
  socket_.enable_keepalive(/*idle_s=*/5, /*interval_s=*/2, /*probes=*/3);
}

Connection::~Connection() {
  stop();
}

void Connection::start() {
  std::lock_guard<std::mutex> lock(send_mutex_);
  if (in_id_ != 0 || closing_) return;
  watching_in_ = kRead;
  in_id_ = in_loop_->add(socket_.fd(), watching_in_, [this](uint32_t e) { on_readable(e); });
  watching_out_ = outbox_.empty() ? 0 : kWrite;
  out_id_ = out_loop_->add(socket_.fd(), watching_out_, [this](uint32_t e) { on_writable(e); });
}

void Connection::stop() noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  uint64_t in_id = 0;
  uint64_t out_id = 0;
  {
    std::lock_guard<std::mutex> lock(send_mutex_);
    closing_ = true;
    std::swap(in_id, in_id_);
    std::swap(out_id, out_id_);
  }
  // No lock held: a handler may be waiting for one of ours.
  if (in_id != 0) in_loop_->remove(in_id);
  if (out_id != 0) out_loop_->remove(out_id);
  socket_.shutdown();
  // Off the loop, nothing will finish what is still pending: fail it.
  auto error = std::make_exception_ptr(
      PeerError(peer_, "the connection to rank " + std::to_string(peer_) + " was closed"));
  if (in_.pending) {
    finish(in_.pending, error);
    in_.pending.reset();
  }
  {
    std::lock_guard<std::mutex> lock(send_mutex_);
    break_sending(error);
  }
  send_changed_.notify_all();
}

// ---------------------------------------------------------------- sending

std::unique_ptr<Request> Connection::send(Tag tag, const void* data, size_t bytes,
                                          Deadline deadline) {
  {
    std::lock_guard<std::mutex> state(mutex_);
    if (error_) std::rethrow_exception(error_);
    note_local_call(tag);
  }
  auto frame = std::make_shared<Outgoing>();
  frame->header =
      FrameHeader{kFrameMagic, kData, {0, 0, 0}, tag.channel, tag.step, bytes, stamp_of(tag)};
  frame->parts[1] = {const_cast<void*>(data), bytes};
  frame->deadline = deadline;
  return enqueue(std::move(frame), /*control=*/false);
}

void Connection::send_control(FrameType type, const std::string& payload,
                              Deadline deadline) noexcept {
  try {
    auto frame = std::make_shared<Outgoing>();
    frame->header = FrameHeader{kFrameMagic, type, {0, 0, 0}, 0, 0, payload.size(), {}};
    frame->payload = payload;
    frame->parts[1] = {frame->payload.data(), frame->payload.size()};
    frame->deadline = deadline;
    enqueue(std::move(frame), /*control=*/true)->wait();
  } catch (...) {
    // Best effort: the peer notices the closed connection instead.
  }
}

std::unique_ptr<Request> Connection::enqueue(std::shared_ptr<Outgoing> frame, bool control) {
  frame->parts[0] = {&frame->header, sizeof frame->header};
  std::unique_lock<std::mutex> lock(send_mutex_);
  if (send_error_) std::rethrow_exception(send_error_);
  if (!control && closing_) throw PeerError(peer_, "the connection is closing");
  if (outbox_.empty()) {
    try {
      if (socket_.write_available(frame->next, frame->left)) {
        return std::make_unique<CompletedRequest>();
      }
    } catch (const net::NetError& e) {
      auto error = lost_while_sending(e.what());
      const bool first = break_sending(error);
      lock.unlock();
      if (first) sink_.on_connection_failed(peer_, error);
      std::rethrow_exception(error);
    }
  }
  outbox_.push_back(frame);
  watch_locked();
  return std::make_unique<SendRequest>(*this, std::move(frame));
}

// The loop's half of Note [Outbox]: writes queued frames until the socket would block.
void Connection::write_outbox() noexcept {
  std::unique_lock<std::mutex> lock(send_mutex_);
  bool finished_any = false;
  std::exception_ptr error;
  while (!outbox_.empty() && !error) {
    const auto& frame = outbox_.front();
    try {
      if (!socket_.write_available(frame->next, frame->left)) break;
    } catch (const net::NetError& e) {
      error = lost_while_sending(e.what());
      break;
    }
    frame->done = true;
    outbox_.pop_front();
    finished_any = true;
  }
  const bool first = error && break_sending(error);
  watch_locked();
  lock.unlock();
  if (finished_any || error) send_changed_.notify_all();
  if (first) sink_.on_connection_failed(peer_, error);
}

bool Connection::break_sending(std::exception_ptr error) {
  for (auto& queued : outbox_) {
    queued->done = true;
    queued->error = error;
  }
  outbox_.clear();
  if (send_error_) return false;
  send_error_ = error;
  return true;
}

void Connection::watch_locked() {
  const uint32_t in = reading_.load(std::memory_order_relaxed) ? kRead : 0;
  if (in_id_ != 0 && in != watching_in_) {
    watching_in_ = in;
    in_loop_->modify(in_id_, in);
  }
  const uint32_t out = outbox_.empty() ? 0 : kWrite;
  if (out_id_ != 0 && out != watching_out_) {
    watching_out_ = out;
    out_loop_->modify(out_id_, out);
  }
}

void Connection::drop_from_outbox(const std::shared_ptr<Outgoing>& frame) {
  for (auto it = outbox_.begin(); it != outbox_.end(); ++it) {
    if (*it == frame) {
      outbox_.erase(it);
      break;
    }
  }
  frame->done = true;
  watch_locked();
}

std::exception_ptr Connection::lost_while_sending(const std::string& reason) const {
  return std::make_exception_ptr(PeerError(
      peer_, "lost the connection to rank " + std::to_string(peer_) + " (" + peer_address_ +
                 ") while sending: " + reason + "; its process probably died"));
}

// ---------------------------------------------------------------- the loops' handlers

void Connection::on_readable(uint32_t events) noexcept {
  // Not under send_mutex_: a caller holds it while its send runs the loopback path, and the
  // loop must not queue behind that for every frame it reads.
  if (reading_.load(std::memory_order_relaxed)) {
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) read_incoming();
    return;
  }
  if (!(events & (EPOLLHUP | EPOLLERR))) return;
  // Reading ended and the socket hung up: a level-triggered hang-up would call us forever.
  // Off the loop (stop() removes again with the same id, which waits until we returned).
  std::unique_lock<std::mutex> lock(send_mutex_);
  const uint64_t id = in_id_;
  lock.unlock();
  if (id != 0) in_loop_->remove(id);
}

void Connection::on_writable(uint32_t events) noexcept {
  if (events & EPOLLOUT) write_outbox();
  if (!(events & (EPOLLHUP | EPOLLERR))) return;
  // Hung up: nothing more can be written, and a level-triggered hang-up would call us forever.
  // The reading side tells the sink what the transport needs to know (a peer that said
  // goodbye is no failure), so this only fails what waits to be sent.
  std::unique_lock<std::mutex> lock(send_mutex_);
  break_sending(lost_while_sending("the connection hung up"));
  const uint64_t id = out_id_;
  lock.unlock();
  if (id != 0) out_loop_->remove(id);
  send_changed_.notify_all();
}

// ---------------------------------------------------------------- receiving

// Note [Reduce on receive]: a receive that combines (irecv_reduce) is read from the socket in
// cache-sized pieces into a bounce buffer, and each piece is combined into the destination at
// once, on the event loop's thread. The message never exists in memory as a whole: no scratch
// buffer of the message's size, one pass over the destination, and the reduction runs beside the
// caller's thread instead of after it.
constexpr size_t kBounceBytes = 64 * 1024;  // a multiple of every element size

std::unique_ptr<Request> Connection::post_recv(Tag tag, void* data, size_t bytes,
                                               Deadline deadline) {
  auto pending = std::make_shared<Pending>();
  pending->data = data;
  pending->bytes = bytes;
  return post(tag, std::move(pending), deadline);
}

std::unique_ptr<Request> Connection::post_recv_reduce(Tag tag, void* accumulate, size_t count,
                                                      DType dtype, ReduceOp op, Deadline deadline) {
  auto pending = std::make_shared<Pending>();
  pending->data = accumulate;
  pending->bytes = count * dtype_size(dtype);
  pending->reduce = true;
  pending->dtype = dtype;
  pending->op = kernels::combine_op(op);
  return post(tag, std::move(pending), deadline);
}

std::unique_ptr<Request> Connection::post(Tag tag, std::shared_ptr<Pending> pending,
                                          Deadline deadline) {
  std::lock_guard<std::mutex> lock(mutex_);
  note_local_call(tag);
  auto it = unexpected_.find(tag);
  if (it != unexpected_.end()) {
    Unexpected message = std::move(it->second.front());
    it->second.pop_front();
    if (it->second.empty()) unexpected_.erase(it);
    if (message.bytes != pending->bytes) {
      std::rethrow_exception(size_mismatch(tag, message.bytes, pending->bytes));
    }
    land(*pending, message.data.get());
    return std::make_unique<CompletedRequest>();
  }
  if (error_) std::rethrow_exception(error_);
  if (peer_left_) {
    throw PeerError(peer_, "rank " + std::to_string(peer_) +
                               " has closed its group; it will send nothing more");
  }
  posted_[tag].push_back(pending);
  return std::make_unique<RecvRequest>(*this, tag, std::move(pending), deadline);
}

// Puts a whole received message where the receive wants it.
void Connection::land(Pending& pending, const uint8_t* bytes) {
  if (pending.bytes == 0) return;
  if (pending.reduce) {
    kernels::reduce_into(pending.data, bytes, pending.bytes / dtype_size(pending.dtype),
                         pending.dtype, pending.op);
  } else {
    std::memcpy(pending.data, bytes, pending.bytes);
  }
}

void Connection::remove_posted(const Tag& tag, const std::shared_ptr<Pending>& pending) {
  auto it = posted_.find(tag);
  if (it == posted_.end()) return;
  auto& queue = it->second;
  for (auto q = queue.begin(); q != queue.end(); ++q) {
    if (*q == pending) {
      queue.erase(q);
      break;
    }
  }
  if (queue.empty()) posted_.erase(it);
}

void Connection::fail(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_) error_ = error;
  }
  changed_.notify_all();
}

// Note [Call stamps]: a message must come from the same call as this rank's own messages and
// receives of that collective (channel), whichever steps they are for: algorithms chosen for
// different calls number their messages differently, and a rank may only send in a collective
// (a broadcast root), so matching (channel, step) pairs alone would miss most mismatches. A
// rank that only sends can leave the collective before the peer's message shows the mismatch:
// its next call on the group then throws.
void Connection::note_local_call(const Tag& tag) {
  const CallStamp stamp = stamp_of(tag);
  if (!stamp.stamped()) return;
  for (auto it = unexpected_.lower_bound(Tag{tag.channel, 0});
       it != unexpected_.end() && it->first.channel == tag.channel; ++it) {
    for (const auto& message : it->second) check_same_call(tag.channel, stamp, message.stamp);
  }
  for (const auto& call : recent_calls_) {
    if (call.channel == tag.channel) return;  // one call per collective
  }
  recent_calls_[next_recent_call_++ % recent_calls_.size()] = {tag.channel, stamp};
}

void Connection::check_against_local_calls(const Tag& message) const {
  const CallStamp stamp = stamp_of(message);
  if (!stamp.stamped()) return;
  for (const auto& call : recent_calls_) {
    if (call.channel == message.channel) check_same_call(message.channel, call.stamp, stamp);
  }
}

void Connection::check_same_call(uint64_t channel, const CallStamp& mine,
                                 const CallStamp& theirs) const {
  if (!mine.stamped() || !theirs.stamped() || mine.same_call(theirs)) return;
  throw call_mismatch(channel, rank_, mine, channel, peer_, theirs);
}

std::exception_ptr Connection::size_mismatch(const Tag& tag, size_t sent, size_t expected) const {
  return std::make_exception_ptr(ProtocolError(
      "rank " + std::to_string(peer_) + " sent " + std::to_string(sent) + " bytes where rank " +
      std::to_string(rank_) + " expected " + std::to_string(expected) + " (message " +
      std::to_string(tag.channel) + "/" + std::to_string(tag.step) +
      "): the ranks are running different collectives or counts; COHORT_DEBUG=detail names them"));
}

// Note [Incoming stream]: the loop reads each connection's stream as far as it has arrived
// and remembers where it stopped (in_): a frame header, then its payload, which goes into the
// claimed receive (Note [Claimed receives]), through the bounce buffer into a reducing one
// (Note [Reduce on receive]), into a buffer of its own when nobody waits for it yet, or into an
// abort message. Small pieces (headers, small payloads) are read into a staging buffer with
// one recv, which often holds a whole frame or several; a large remainder of a payload is read
// straight to where it goes. A recv that returns less than asked has drained the socket, so
// the handler returns without another one (level triggering calls it again when more comes).
// One call reads at most kReadBudget bytes from the socket, so that one peer's large message
// does not keep the loop from the other sockets. Whatever ends reading (end of stream, a
// broken or out-of-step frame) goes through end_reading, which gives a claimed receive back:
// then the PeerError naming the peer reaches every pending and later request of the transport
// through the sink.
constexpr size_t kReadBudget = 1 << 20;
constexpr size_t kStagingBytes = 16 * 1024;
constexpr size_t kDirectReadBytes = 8 * 1024;  // larger pieces bypass the staging buffer

void Connection::read_incoming() noexcept {
  try {
    for (size_t budget = kReadBudget;;) {
      while (in_.staged_begin < in_.staged_end) consume_staged();
      if (budget == 0) return;
      size_t asked = 0;
      const size_t n = read_socket(budget, &asked);
      budget -= std::min(n, budget);
      if (n < asked) {
        while (in_.staged_begin < in_.staged_end) consume_staged();
        return;  // drained
      }
    }
  } catch (const net::NetError& e) {
    end_reading();
    on_disconnect(e.what());
  } catch (const MismatchError& e) {
    // The peer is in another collective (Note [Call stamps]): the stream is out of step and
    // the transport fails with the error as it is, to be relayed to every rank.
    end_reading();
    auto error = std::make_exception_ptr(e);
    fail(error);
    sink_.on_connection_failed(peer_, error);
  } catch (const ProtocolError& e) {
    end_reading();
    auto error = std::make_exception_ptr(PeerError(peer_, "rank " + std::to_string(peer_) + " (" +
                                                              peer_address_ +
                                                              ") broke the protocol: " + e.what()));
    COHORT_LOG(kWarn, "rank ", rank_, ": ", e.what(), " from ", peer_address_);
    fail(error);
    sink_.on_connection_failed(peer_, error);
  } catch (const std::exception& e) {
    end_reading();
    auto error = std::make_exception_ptr(PeerError(
        peer_,
        std::string("connection to rank ") + std::to_string(peer_) + " failed: " + e.what()));
    fail(error);
    sink_.on_connection_failed(peer_, error);
  }
}

// Where the next bytes of the stream go, and how many the current stage still wants.
uint8_t* Connection::stage_target(size_t* want) {
  switch (in_.stage) {
    case Stage::kHeader:
      *want = sizeof in_.header - in_.got;
      return reinterpret_cast<uint8_t*>(&in_.header) + in_.got;
    case Stage::kPayload: {
      Pending& pending = *in_.pending;
      if (!pending.reduce) {
        *want = pending.bytes - in_.got;
        return static_cast<uint8_t*>(pending.data) + in_.got;
      }
      // in_.got counts the bytes combined into the target; bounce_fill those read beyond.
      bounce_.resize(kBounceBytes);
      *want = std::min(kBounceBytes, pending.bytes - in_.got) - in_.bounce_fill;
      return bounce_.data() + in_.bounce_fill;
    }
    case Stage::kBuffered: *want = in_.header.bytes - in_.got; return in_.buffer.get() + in_.got;
    case Stage::kAbort:
      *want = in_.abort.size() - in_.got;
      return reinterpret_cast<uint8_t*>(&in_.abort[0]) + in_.got;
  }
  *want = 0;
  return nullptr;
}

// Reads from the socket into the staging buffer, or straight to the current stage's target
// when it wants a large piece. Returns the bytes read; *asked says how many it asked for.
size_t Connection::read_socket(size_t budget, size_t* asked) {
  size_t want = 0;
  uint8_t* target = stage_target(&want);
  if (want >= kDirectReadBytes) {
    *asked = std::min(want, budget);
    const size_t n = socket_.read_available(target, *asked);
    stage_advance(n);
    return n;
  }
  in_.staging.resize(kStagingBytes);
  *asked = kStagingBytes;
  const size_t n = socket_.read_available(in_.staging.data(), kStagingBytes);
  in_.staged_begin = 0;
  in_.staged_end = n;
  return n;
}

// Moves staged bytes to the current stage's target.
void Connection::consume_staged() {
  size_t want = 0;
  uint8_t* target = stage_target(&want);
  const size_t n = std::min(want, in_.staged_end - in_.staged_begin);
  std::memcpy(target, in_.staging.data() + in_.staged_begin, n);
  in_.staged_begin += n;
  stage_advance(n);
}

// Counts `n` more bytes for the current stage and acts on it once complete.
void Connection::stage_advance(size_t n) {
  switch (in_.stage) {
    case Stage::kHeader:
      in_.got += n;
      if (in_.got < sizeof in_.header) return;
      in_.got = 0;
      on_header();
      return;
    case Stage::kPayload: {
      Pending& pending = *in_.pending;
      if (!pending.reduce) {
        in_.got += n;
      } else {
        in_.bounce_fill += n;
        const size_t piece = std::min(kBounceBytes, pending.bytes - in_.got);
        if (in_.bounce_fill < piece) return;
        kernels::reduce_into(static_cast<uint8_t*>(pending.data) + in_.got, bounce_.data(),
                             piece / dtype_size(pending.dtype), pending.dtype, pending.op);
        in_.got += piece;
        in_.bounce_fill = 0;
      }
      if (in_.got < pending.bytes) return;
      in_.stage = Stage::kHeader;
      in_.got = 0;
      auto done = std::move(in_.pending);
      finish(done, nullptr);
      return;
    }
    case Stage::kBuffered: {
      in_.got += n;
      if (in_.got < in_.header.bytes) return;
      in_.stage = Stage::kHeader;
      in_.got = 0;
      Unexpected message;
      message.bytes = in_.header.bytes;
      message.stamp = in_.header.stamp;
      message.data = std::move(in_.buffer);
      deliver_buffered(Tag{in_.header.channel, in_.header.step, in_.header.stamp.wire()},
                       std::move(message));
      return;
    }
    case Stage::kAbort: {
      in_.got += n;
      if (in_.got < in_.abort.size()) return;
      in_.stage = Stage::kHeader;
      in_.got = 0;
      const WireError wire = WireError::decode(in_.abort);
      sink_.on_connection_failed(peer_, wire.as_exception(peer_));
      return;
    }
  }
}

void Connection::end_reading() noexcept {
  if (in_.pending) {
    finish(in_.pending,
           std::make_exception_ptr(PeerError(peer_, "connection to rank " + std::to_string(peer_) +
                                                        " broke while receiving a message")));
    in_.pending.reset();
  }
  std::lock_guard<std::mutex> lock(send_mutex_);
  reading_.store(false, std::memory_order_relaxed);
  watch_locked();
}

void Connection::on_header() {
  const FrameHeader& header = in_.header;
  if (header.magic != kFrameMagic) {
    throw ProtocolError("bad frame magic 0x" + std::to_string(header.magic));
  }
  switch (header.type) {
    case kData:
      if (header.bytes > kMaxMessageBytes) {
        throw ProtocolError("frame announces " + std::to_string(header.bytes) +
                            " bytes, more than the limit");
      }
      on_data_header(Tag{header.channel, header.step, header.stamp.wire()},
                     static_cast<size_t>(header.bytes));
      return;
    case kAbort:
      if (header.bytes > kMaxAbortBytes) throw ProtocolError("oversized abort frame");
      in_.abort.assign(header.bytes, '\0');
      in_.stage = Stage::kAbort;
      if (header.bytes == 0) stage_advance(0);  // an empty payload is complete already
      return;
    case kGoodbye: on_goodbye(); return;
    default: throw ProtocolError("unknown frame type " + std::to_string(header.type));
  }
}

void Connection::on_goodbye() {
  std::lock_guard<std::mutex> lock(mutex_);
  peer_left_ = true;
  // A failure already recorded explains more than the goodbye that follows it.
  if (error_) return;
  auto error = std::make_exception_ptr(
      PeerError(peer_, "rank " + std::to_string(peer_) +
                           " closed its group while this rank still waited for a message from it"));
  for (auto& [tag, queue] : posted_) {
    for (auto& p : queue) {
      p->done = true;
      p->error = error;
    }
  }
  posted_.clear();
  changed_.notify_all();
}

void Connection::on_data_header(const Tag& tag, size_t bytes) {
  std::shared_ptr<Pending> pending;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    check_against_local_calls(tag);
    pending = claim_posted(tag);
  }
  if (pending) {
    if (pending->bytes != bytes) {
      auto error = size_mismatch(tag, bytes, pending->bytes);
      finish(pending, error);
      std::rethrow_exception(error);  // the stream is out of step: the connection is done
    }
    if (bytes == 0) {
      finish(pending, nullptr);
      return;
    }
    in_.pending = std::move(pending);
    in_.bounce_fill = 0;
    in_.stage = Stage::kPayload;
    return;
  }
  // Nobody waits for it yet: buffer it. The buffer is not zero-filled, so a bogus size costs
  // address space only until the bytes actually arrive.
  in_.buffer.reset(new (std::nothrow) uint8_t[bytes > 0 ? bytes : 1]);
  if (!in_.buffer) {
    throw ProtocolError("cannot buffer a " + std::to_string(bytes) + "-byte message");
  }
  in_.stage = Stage::kBuffered;
  if (bytes == 0) stage_advance(0);  // complete already
}

std::shared_ptr<Connection::Pending> Connection::claim_posted(const Tag& tag) {
  auto it = posted_.find(tag);
  if (it == posted_.end()) return nullptr;
  auto pending = it->second.front();
  it->second.pop_front();
  if (it->second.empty()) posted_.erase(it);
  pending->claimed = true;
  return pending;
}

void Connection::finish(const std::shared_ptr<Pending>& pending, std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending->claimed = false;
    pending->done = true;
    pending->error = error;
  }
  changed_.notify_all();
}

void Connection::deliver_buffered(const Tag& tag, Unexpected message) {
  std::shared_ptr<Pending> pending;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // A send or receive of this collective may have been posted while we read, after the
    // header was checked: check again before the message meets it (Note [Call stamps]).
    check_against_local_calls(tag);
    pending = claim_posted(tag);
    if (!pending) {
      unexpected_[tag].push_back(std::move(message));
      return;
    }
  }
  if (pending->bytes != message.bytes) {
    finish(pending, size_mismatch(tag, message.bytes, pending->bytes));
    return;
  }
  land(*pending, message.data.get());
  finish(pending, nullptr);
}

void Connection::on_disconnect(const std::string& reason) {
  std::exception_ptr error;
  bool left;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;  // we closed it ourselves
    left = peer_left_;
    if (left) {
      error = std::make_exception_ptr(
          PeerError(peer_, "rank " + std::to_string(peer_) + " has closed its group"));
    } else {
      error = std::make_exception_ptr(PeerError(
          peer_, "lost the connection to rank " + std::to_string(peer_) + " (" + peer_address_ +
                     "): its process exited or was killed (" + reason + ")"));
    }
  }
  fail(error);
  if (!left) sink_.on_connection_failed(peer_, error);  // a peer that said goodbye is no failure
}

}  // namespace cohort::tcp
