#include "transport/tcp/tcp_connection.h"

#include <cstring>
#include <new>

#include "cohort/core/logging.h"

namespace cohort::tcp {

// Note [Claimed receives]: the reader thread reads a payload straight into the buffer of the
// receive it matched, without holding the lock, so that large messages are not copied twice.
// While it does, the receive is "claimed": its waiter must not return (the caller would free or
// reuse the buffer under the reader's feet). A waiter that hits its deadline or a transport
// failure while its receive is claimed shuts the socket down, which makes the reader's read
// fail at once, and then waits for the reader to let go.

class Connection::RecvRequest final : public Request {
 public:
  RecvRequest(Connection& connection, Tag tag, std::shared_ptr<Pending> pending, Deadline deadline)
      : connection_(connection), tag_(tag), pending_(std::move(pending)), deadline_(deadline) {}

  // A request dropped without wait() (an error unwound past it) must not leave its buffer
  // posted: a message arriving later would be written into memory the caller has freed.
  ~RecvRequest() override {
    auto& c = connection_;
    std::unique_lock<std::mutex> lock(c.mutex_);
    if (pending_->done) return;
    if (pending_->claimed) {
      c.socket_.shutdown();
      c.changed_.wait(lock, [&] { return pending_->done; });
      return;
    }
    c.remove_posted(tag_, pending_);
  }

  void wait() override {
    auto& c = connection_;
    std::unique_lock<std::mutex> lock(c.mutex_);
    for (;;) {
      if (pending_->done) {
        if (pending_->error) std::rethrow_exception(pending_->error);
        return;
      }
      const bool expired = deadline_.expired();
      if (pending_->claimed && (expired || c.error_)) {
        c.socket_.shutdown();  // the reader fails its read, releases the buffer, marks us done
        c.changed_.wait(lock, [&] { return pending_->done; });
        if (!expired && pending_->error) std::rethrow_exception(pending_->error);
        throw TimeoutError("receive of " + std::to_string(pending_->bytes) + " bytes from rank " +
                           std::to_string(c.peer_) + " timed out midway");
      }
      if (!pending_->claimed && c.error_) {
        c.remove_posted(tag_, pending_);
        std::rethrow_exception(c.error_);
      }
      if (expired) {
        c.remove_posted(tag_, pending_);
        throw TimeoutError("receive from rank " + std::to_string(c.peer_) + " timed out (" +
                           std::to_string(pending_->bytes) + " bytes expected)");
      }
      c.changed_.wait_until(lock, deadline_.at());
    }
  }

 private:
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
  // Takes the frame back from the sender thread: out of the outbox if it has not started,
  // otherwise by breaking the connection (half a frame on the wire cannot be taken back).
  void abandon(std::unique_lock<std::mutex>& lock) {
    auto& c = connection_;
    if (!frame_->writing) {
      c.drop_from_outbox(frame_);
      return;
    }
    c.socket_.shutdown();
    c.send_changed_.wait(lock, [&] { return frame_->done; });
  }

  Connection& connection_;
  std::shared_ptr<Outgoing> frame_;
};

Connection::Connection(net::Socket socket, int local_rank, int peer_rank, FailureSink& sink)
    : socket_(std::move(socket)), rank_(local_rank), peer_(peer_rank),
      peer_address_(socket_.peer_name()), sink_(sink) {}

Connection::~Connection() {
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
  }
  auto frame = std::make_shared<Outgoing>();
  frame->header = FrameHeader{kFrameMagic, kData, {0, 0, 0}, tag.channel, tag.step, bytes};
  frame->parts[1] = {const_cast<void*>(data), bytes};
  frame->deadline = deadline;
  return enqueue(std::move(frame), /*control=*/false);
}

void Connection::send_control(FrameType type, const std::string& payload,
                              Deadline deadline) noexcept {
  try {
    auto frame = std::make_shared<Outgoing>();
    frame->header = FrameHeader{kFrameMagic, type, {0, 0, 0}, 0, 0, payload.size()};
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

std::unique_ptr<Request> Connection::post_recv(Tag tag, void* data, size_t bytes,
                                               Deadline deadline) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = unexpected_.find(tag);
  if (it != unexpected_.end()) {
    Unexpected message = std::move(it->second.front());
    it->second.pop_front();
    if (it->second.empty()) unexpected_.erase(it);
    if (message.bytes != bytes) std::rethrow_exception(size_mismatch(tag, message.bytes, bytes));
    if (bytes > 0) std::memcpy(data, message.data.get(), bytes);
    return std::make_unique<CompletedRequest>();
  }
  if (error_) std::rethrow_exception(error_);
  if (peer_left_) {
    throw PeerError(peer_, "rank " + std::to_string(peer_) +
                               " has closed its group; it will send nothing more");
  }
  auto pending = std::make_shared<Pending>();
  pending->data = data;
  pending->bytes = bytes;
  posted_[tag].push_back(pending);
  return std::make_unique<RecvRequest>(*this, tag, std::move(pending), deadline);
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
      const WireError wire = decode_abort(payload);
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
  const Tag tag{header.channel, header.step};
  const size_t bytes = static_cast<size_t>(header.bytes);
  std::shared_ptr<Pending> pending;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending = claim_posted(tag);
  }
  if (pending) {
    if (pending->bytes != bytes) {
      auto error = size_mismatch(tag, bytes, pending->bytes);
      finish(pending, error);
      std::rethrow_exception(error);  // the stream is out of step: the connection is done
    }
    try {
      socket_.read_all(pending->data, bytes, Deadline::never());
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
    pending = claim_posted(tag);  // a receive may have been posted while we read
    if (!pending) {
      unexpected_[tag].push_back(std::move(message));
      return;
    }
  }
  if (pending->bytes != message.bytes) {
    finish(pending, size_mismatch(tag, message.bytes, pending->bytes));
    return;
  }
  if (message.bytes > 0) std::memcpy(pending->data, message.data.get(), message.bytes);
  finish(pending, nullptr);
}

void Connection::on_disconnect(const std::string& reason) {
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;  // we closed it ourselves
    if (peer_left_) {
      error = std::make_exception_ptr(PeerError(
          peer_, "rank " + std::to_string(peer_) + " has closed its group"));
    } else {
      error = std::make_exception_ptr(PeerError(
          peer_, "lost the connection to rank " + std::to_string(peer_) + " (" + peer_address_ +
                     "): its process exited or was killed (" + reason + ")"));
    }
  }
  fail(error);
  bool left;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    left = peer_left_;
  }
  if (!left) sink_.on_connection_failed(peer_, error);
}

}  // namespace cohort::tcp
