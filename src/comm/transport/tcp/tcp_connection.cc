#include "transport/tcp/tcp_connection.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "call_stamp.h"
#include "cohort/core/logging.h"
#include "kernels/reduce_kernels.h"

namespace cohort::tcp {

// Note [Claimed receives]: the reader thread reads a payload straight into the buffer of the
// receive it matched, without holding the lock, so that large messages are not copied twice.
// While it does, the receive is "claimed": its waiter must not return (the caller would free or
// reuse the buffer under the reader's feet). Frames are written whole, so a claimed receive
// completes soon (or its peer dies) even when the transport has failed meanwhile; only a waiter
// that hits its deadline shuts the socket down, which makes the reader's read fail at once,
// and then waits for the reader to let go. Shutting down earlier would also keep this rank's
// abort message from reaching that peer.

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
  // Makes the reader give the buffer back now: its read fails once the socket is shut down.
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
// left waits in the outbox, which the sender thread writes in order, so that isend returns
// at once and an algorithm can receive and reduce while its large sends stream out. Frames
// leave in the order they were queued, inline writes only happen on an empty outbox.
// A send request, like a receive (Note [Claimed receives]), never returns while the sender
// thread may still read the caller's buffer.

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
    std::unique_lock<std::mutex> lock(connection_.send_mutex_);
    if (!frame_->done) abandon(lock);
  }

 private:
  // Takes the frame back from the sender thread: out of the outbox if it has not started;
  // otherwise waits for the write, which ends by the frame's deadline at the latest (half a
  // frame on the wire cannot be taken back).
  void abandon(std::unique_lock<std::mutex>& lock) {
    auto& c = connection_;
    if (!frame_->writing) {
      c.drop_from_outbox(frame_);
      return;
    }
    c.send_changed_.wait(lock, [&] { return frame_->done; });
  }

  Connection& connection_;
  std::shared_ptr<Outgoing> frame_;
};

Connection::Connection(net::Socket socket, int local_rank, int peer_rank, FailureSink& sink)
    : socket_(std::move(socket)), rank_(local_rank), peer_(peer_rank),
      peer_address_(socket_.peer_name()), sink_(sink) {
  // A dead process closes its sockets (the reader sees it at once); a vanished host does not,
  // so probe: an idle connection to one is declared dead after about 5 + 3 x 2 = 11 s.
  socket_.enable_keepalive(/*idle_s=*/5, /*interval_s=*/2, /*probes=*/3);
}

Connection::~Connection() { stop(); }

void Connection::stop() noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  {
    std::lock_guard<std::mutex> lock(send_mutex_);
    sender_stop_ = true;
  }
  send_changed_.notify_all();
  socket_.shutdown();
  if (sender_.joinable()) sender_.join();
  if (reader_.joinable()) reader_.join();
}

void Connection::start() {
  reader_ = std::thread([this] { reader_loop(); });
  sender_ = std::thread([this] { sender_loop(); });
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
      FrameHeader{kFrameMagic, kData, {0, 0, 0}, tag.channel, tag.step, bytes, tag.stamp};
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
  if (!control && sender_stop_) throw PeerError(peer_, "the connection is closing");
  if (outbox_.empty()) {
    try {
      if (socket_.write_available(frame->next, frame->left)) return std::make_unique<CompletedRequest>();
    } catch (const net::NetError& e) {
      send_error_ = lost_while_sending(e.what());
      lock.unlock();
      sink_.on_connection_failed(peer_, send_error_);
      std::rethrow_exception(send_error_);
    }
  }
  outbox_.push_back(frame);
  send_changed_.notify_all();
  return std::make_unique<SendRequest>(*this, std::move(frame));
}

void Connection::sender_loop() noexcept {
  std::unique_lock<std::mutex> lock(send_mutex_);
  for (;;) {
    send_changed_.wait(lock, [&] { return !outbox_.empty() || sender_stop_; });
    if (outbox_.empty()) return;  // stopping, nothing left
    auto frame = outbox_.front();
    frame->writing = true;
    lock.unlock();
    std::exception_ptr error;
    try {
      socket_.write_all(frame->next, frame->left, frame->deadline);
    } catch (const net::NetError& e) {
      error = lost_while_sending(e.what());
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    finish_send(frame, error);
    if (error && !send_error_) {
      // A half-written frame leaves the stream out of step: nothing more can go out.
      send_error_ = error;
      for (auto& queued : outbox_) {
        queued->done = true;
        queued->error = error;
      }
      outbox_.clear();
      lock.unlock();
      sink_.on_connection_failed(peer_, error);
      lock.lock();
    }
    send_changed_.notify_all();
  }
}

void Connection::finish_send(const std::shared_ptr<Outgoing>& frame, std::exception_ptr error) {
  if (!outbox_.empty() && outbox_.front() == frame) outbox_.pop_front();
  frame->writing = false;
  frame->done = true;
  frame->error = error;
}

void Connection::drop_from_outbox(const std::shared_ptr<Outgoing>& frame) {
  for (auto it = outbox_.begin(); it != outbox_.end(); ++it) {
    if (*it == frame) {
      outbox_.erase(it);
      break;
    }
  }
  frame->done = true;
}

std::exception_ptr Connection::lost_while_sending(const std::string& reason) const {
  return std::make_exception_ptr(PeerError(
      peer_, "lost the connection to rank " + std::to_string(peer_) + " (" + peer_address_ +
                 ") while sending: " + reason + "; its process probably died"));
}

// ---------------------------------------------------------------- receiving

// Note [Reduce on receive]: a receive that combines (irecv_reduce) is read from the socket in
// cache-sized pieces into a bounce buffer, and each piece is combined into the destination at
// once, on the reader thread. The message never exists in memory as a whole: no scratch buffer
// of the message's size, one pass over the destination, and the reduction runs beside the
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
                                                      DType dtype, ReduceOp op,
                                                      Deadline deadline) {
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

// Reads a payload straight into a claimed receive (Note [Claimed receives]).
void Connection::read_payload(Pending& pending) {
  if (!pending.reduce) {
    socket_.read_all(pending.data, pending.bytes, Deadline::never());
    return;
  }
  bounce_.resize(kBounceBytes);
  const size_t esize = dtype_size(pending.dtype);
  auto* target = static_cast<uint8_t*>(pending.data);
  for (size_t done = 0; done < pending.bytes;) {
    const size_t piece = std::min(kBounceBytes, pending.bytes - done);
    socket_.read_all(bounce_.data(), piece, Deadline::never());
    kernels::reduce_into(target + done, bounce_.data(), piece / esize, pending.dtype, pending.op);
    done += piece;
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
  if (!tag.stamp.stamped()) return;
  for (auto it = unexpected_.lower_bound(Tag{tag.channel, 0});
       it != unexpected_.end() && it->first.channel == tag.channel; ++it) {
    for (const auto& message : it->second) check_same_call(tag.channel, tag.stamp, message.stamp);
  }
  for (const auto& call : recent_calls_) {
    if (call.channel == tag.channel) return;  // one call per collective
  }
  recent_calls_[next_recent_call_++ % recent_calls_.size()] = {tag.channel, tag.stamp};
}

void Connection::check_against_local_calls(const Tag& message) const {
  if (!message.stamp.stamped()) return;
  for (const auto& call : recent_calls_) {
    if (call.channel == message.channel)
      check_same_call(message.channel, call.stamp, message.stamp);
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

void Connection::reader_loop() noexcept {
  try {
    for (;;) read_frame();
  } catch (const net::NetError& e) {
    on_disconnect(e.what());
  } catch (const MismatchError& e) {
    // The peer is in another collective (Note [Call stamps]): the stream is out of step and
    // the transport fails with the error as it is, to be relayed to every rank.
    auto error = std::make_exception_ptr(e);
    fail(error);
    sink_.on_connection_failed(peer_, error);
  } catch (const ProtocolError& e) {
    auto error = std::make_exception_ptr(
        PeerError(peer_, "rank " + std::to_string(peer_) + " (" + peer_address_ +
                             ") broke the protocol: " + e.what()));
    COHORT_LOG(kWarn, "rank ", rank_, ": ", e.what(), " from ", peer_address_);
    fail(error);
    sink_.on_connection_failed(peer_, error);
  } catch (const std::exception& e) {
    auto error = std::make_exception_ptr(PeerError(peer_, std::string("connection to rank ") +
                                                              std::to_string(peer_) + " failed: " + e.what()));
    fail(error);
    sink_.on_connection_failed(peer_, error);
  }
}

void Connection::read_frame() {
  FrameHeader header{};
  socket_.read_all(&header, sizeof header, Deadline::never());
  if (header.magic != kFrameMagic) {
    throw ProtocolError("bad frame magic 0x" + std::to_string(header.magic));
  }
  switch (header.type) {
    case kData:
      if (header.bytes > kMaxMessageBytes) {
        throw ProtocolError("frame announces " + std::to_string(header.bytes) +
                            " bytes, more than the limit");
      }
      receive_data(header);
      return;
    case kAbort: {
      if (header.bytes > kMaxAbortBytes) throw ProtocolError("oversized abort frame");
      std::string payload(header.bytes, '\0');
      socket_.read_all(payload.data(), payload.size(), Deadline::after(Milliseconds(10'000)));
      const WireError wire = WireError::decode(payload);
      sink_.on_connection_failed(peer_, wire.as_exception(peer_));
      return;
    }
    case kGoodbye: {
      std::lock_guard<std::mutex> lock(mutex_);
      peer_left_ = true;
      // A failure already recorded explains more than the goodbye that follows it.
      if (error_) return;
      auto error = std::make_exception_ptr(PeerError(
          peer_, "rank " + std::to_string(peer_) +
                     " closed its group while this rank still waited for a message from it"));
      for (auto& [tag, queue] : posted_) {
        for (auto& p : queue) {
          p->done = true;
          p->error = error;
        }
      }
      posted_.clear();
      changed_.notify_all();
      return;
    }
    default:
      throw ProtocolError("unknown frame type " + std::to_string(header.type));
  }
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

void Connection::receive_data(const FrameHeader& header) {
  const Tag tag{header.channel, header.step, header.stamp};
  const size_t bytes = static_cast<size_t>(header.bytes);
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
    try {
      read_payload(*pending);
    } catch (...) {
      finish(pending, std::make_exception_ptr(PeerError(
                          peer_, "connection to rank " + std::to_string(peer_) +
                                     " broke while receiving a message")));
      throw;
    }
    finish(pending, nullptr);
    return;
  }
  // Nobody waits for it yet: buffer it. The buffer is not zero-filled, so a bogus size costs
  // address space only until the bytes actually arrive.
  Unexpected message;
  message.bytes = bytes;
  message.stamp = tag.stamp;
  message.data.reset(new (std::nothrow) uint8_t[bytes > 0 ? bytes : 1]);
  if (!message.data) {
    throw ProtocolError("cannot buffer a " + std::to_string(bytes) + "-byte message");
  }
  socket_.read_all(message.data.get(), bytes, Deadline::never());
  deliver_buffered(tag, std::move(message));
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
      error = std::make_exception_ptr(PeerError(
          peer_, "rank " + std::to_string(peer_) + " has closed its group"));
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
