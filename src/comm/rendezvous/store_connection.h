// One client connection of the TCP store server, as its event loop sees it: the socket, the
// bytes received that do not make a whole frame yet, the reply bytes the socket has not taken
// yet, and where the connection is in its life. Only the server's loop thread touches it, and
// nothing here blocks: reads and writes take what the socket has or takes now.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cohort/core/deadline.h"
#include "net/socket.h"
#include "rendezvous/tcp_store_protocol.h"

namespace cohort {

// Bytes waiting at the front of a growable buffer; storage is not zero-filled when it grows (a
// recv() writes it), and is given back once emptied after a large frame.
class ByteQueue {
 public:
  const uint8_t* data() const { return storage_.get() + begin_; }
  size_t size() const { return end_ - begin_; }
  bool empty() const { return begin_ == end_; }
  // Room for at least `bytes` more at the end (moving or growing the storage); commit() what
  // was written there.
  uint8_t* reserve(size_t bytes);
  void commit(size_t bytes) { end_ += bytes; }
  void append(const uint8_t* data, size_t bytes);
  void consume(size_t bytes);

 private:
  std::unique_ptr<uint8_t[]> storage_;
  size_t capacity_ = 0;
  size_t begin_ = 0;
  size_t end_ = 0;
};

// A whole frame in a connection's input: valid until the connection reads or consumes more.
struct FrameView {
  store_wire::Op op = store_wire::Op::kOk;
  const uint8_t* payload = nullptr;
  size_t size = 0;
};

class StoreConnection {
 public:
  StoreConnection(uint64_t id, net::Socket socket, Clock::time_point now);

  uint64_t id() const { return id_; }
  int fd() const { return socket_.fd(); }
  const std::string& peer() const { return peer_; }

  // One recv() of whatever has arrived. False at end of stream; NetError when the connection
  // failed.
  bool receive();
  // The next whole frame received, if there is one. Its header is checked (against
  // `max_payload`) as soon as its 10 bytes are in, before any of its payload is stored:
  // ProtocolError otherwise. consume_frame() once it has been handled.
  bool next_frame(uint32_t max_payload, FrameView* frame);
  void consume_frame(const FrameView& frame);
  // Sends a frame, straight away when nothing is queued; queues what the socket did not take.
  void send(store_wire::Op op, const uint8_t* payload, size_t size);
  // Sends what is queued. True when nothing is left. NetError when the connection failed.
  bool flush();
  bool output_pending() const { return !output_.empty(); }

  // The time by which the connection must have made progress, Clock::time_point::max() when it
  // may stay as it is: a HELLO, a frame under way, or queued replies must be done by then.
  Clock::time_point deadline(Milliseconds frame_timeout) const;
  // Why it did not (for the log), when deadline() passed.
  std::string stall_reason(Milliseconds frame_timeout) const;
  // The input is handled up to here: a partial frame left in it started arriving now, unless
  // it had started before.
  void note_input_time();

  // Shuts the socket down (the peer sees the end of stream) and closes it.
  void close() noexcept;

  // State the server keeps here (see tcp_store_server.cc).
  bool authenticated = false;
  bool parked = false;   // a GET/WAIT of this connection is parked
  bool closing = false;  // close once the queued output is written
  bool retired = false;  // closed; erased at the end of the loop's turn
  uint32_t watched = 0;  // the epoll events it is registered for
  Clock::time_point registered_deadline = Clock::time_point::max();

 private:
  const uint64_t id_;
  net::Socket socket_;
  const std::string peer_;
  const Clock::time_point accepted_;
  ByteQueue input_;
  ByteQueue output_;
  // When the partial frame at the front of input_ started arriving (max() when none), and when
  // output_ started waiting (max() when empty).
  Clock::time_point frame_started_ = Clock::time_point::max();
  Clock::time_point output_since_ = Clock::time_point::max();
  size_t output_allowance_bytes_ = 0;  // output_.size() when it started waiting
};

}  // namespace cohort
