// One rank's end of the connection to one peer. Sends are written on the caller's thread while
// the socket takes them without blocking, and by the process's writing event loop from there
// on (Note [Outbox]); its reading loop reads incoming frames and matches them to posted
// receives (Note [Claimed receives], Note [Event loop] in net/event_loop.cc).
#pragma once

#include <sys/uio.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cohort/comm/transport.h"
#include "net/event_loop.h"
#include "net/socket.h"
#include "transport/tcp/tcp_frames.h"

namespace cohort::tcp {

// Where a connection reports failures that break the whole transport.
class FailureSink {
 public:
  virtual ~FailureSink() = default;
  virtual void on_connection_failed(int peer, std::exception_ptr error) = 0;
};

class Connection {
 public:
  // `in_loop` reads the socket, `out_loop` writes what the caller's thread could not
  // (Note [Outbox]); every connection of the process shares the same two.
  Connection(net::Socket socket, int local_rank, int peer_rank, FailureSink& sink,
             std::shared_ptr<net::EventLoop> in_loop, std::shared_ptr<net::EventLoop> out_loop);
  ~Connection();  // stop()s

  void start();  // registers the socket with the event loop
  // Takes the socket off the loop (its handler is not running once this returns), shuts it
  // down and fails what is still pending. Idempotent. A transport stops all its connections
  // before destroying any, since the loop reports one connection's failure to all of them.
  void stop() noexcept;
  std::unique_ptr<Request> send(Tag tag, const void* data, size_t bytes, Deadline deadline);
  // Queues a control frame (abort, goodbye) even on a failed transport, and waits up to
  // `deadline` for it to be written. Never throws.
  void send_control(FrameType type, const std::string& payload, Deadline deadline) noexcept;
  std::unique_ptr<Request> post_recv(Tag tag, void* data, size_t bytes, Deadline deadline);
  // Receives count elements and combines them into `accumulate` as they arrive
  // (Note [Reduce on receive]).
  std::unique_ptr<Request> post_recv_reduce(Tag tag, void* accumulate, size_t count, DType dtype,
                                            ReduceOp op, Deadline deadline);
  // Fails every pending and future receive with `error` (the transport is broken).
  void fail(std::exception_ptr error);

  int peer() const { return peer_; }

 private:
  struct Pending {
    void* data = nullptr;
    size_t bytes = 0;
    bool reduce = false;  // combine into data instead of overwriting it
    DType dtype = DType::kUInt8;
    ReduceOp op = ReduceOp::kSum;
    bool claimed = false;  // the loop is writing into data (Note [Claimed receives])
    bool done = false;
    std::exception_ptr error;
  };
  struct Unexpected {
    std::unique_ptr<uint8_t[]> data;
    size_t bytes = 0;
    CallStamp stamp{};  // the sending call
  };
  // A frame waiting in the outbox, maybe partly written.
  struct Outgoing {
    FrameHeader header{};
    std::string payload;  // control frames own their payload; data frames point at the caller's
    iovec parts[2]{};
    iovec* next = parts;  // first part not fully written
    int left = 2;         // parts not fully written
    Deadline deadline = Deadline::never();
    bool done = false;
    std::exception_ptr error;
    // Some of it is on the wire: taking it back would leave the stream out of step.
    bool started() const { return next != parts || parts[0].iov_base != &header; }
  };
  // Where the loop is in the incoming stream (loop thread only, Note [Incoming stream]).
  enum class Stage { kHeader, kPayload, kBuffered, kAbort };
  struct Incoming {
    Stage stage = Stage::kHeader;
    alignas(8) FrameHeader header{};    // aligned: its CallStamp is read in place
    size_t got = 0;                     // bytes of the header or payload read so far
    std::shared_ptr<Pending> pending;   // kPayload: the claimed receive being filled
    size_t bounce_fill = 0;             // kPayload with reduce: bytes waiting in bounce_
    std::unique_ptr<uint8_t[]> buffer;  // kBuffered: the message nobody waits for yet
    std::string abort;                  // kAbort: the payload
    std::vector<uint8_t> staging;       // bytes read ahead of the current stage
    size_t staged_begin = 0;
    size_t staged_end = 0;
  };
  class RecvRequest;
  class SendRequest;

  std::unique_ptr<Request> enqueue(std::shared_ptr<Outgoing> frame, bool control);
  void drop_from_outbox(const std::shared_ptr<Outgoing>& frame);
  // Under send_mutex_: nothing more can be sent; fails the outbox. True the first time, when
  // the caller must tell the sink (after unlocking).
  bool break_sending(std::exception_ptr error);
  void watch_locked();  // under send_mutex_: tells the loop what to wait for
  std::exception_ptr lost_while_sending(const std::string& reason) const;

  // The loop's handler and its two halves.
  void on_readable(uint32_t events) noexcept;  // on in_loop_
  void on_writable(uint32_t events) noexcept;  // on out_loop_
  void write_outbox() noexcept;
  void read_incoming() noexcept;
  uint8_t* stage_target(size_t* want);  // Note [Incoming stream]
  size_t read_socket(size_t budget, size_t* asked);
  void consume_staged();
  void stage_advance(size_t n);
  void end_reading() noexcept;
  void on_header();
  void on_data_header(const Tag& tag, size_t bytes);
  std::unique_ptr<Request> post(Tag tag, std::shared_ptr<Pending> pending, Deadline deadline);
  std::shared_ptr<Pending> claim_posted(const Tag& tag);
  static void land(Pending& pending, const uint8_t* bytes);
  void finish(const std::shared_ptr<Pending>& pending, std::exception_ptr error);
  void deliver_buffered(const Tag& tag, Unexpected message);
  void on_disconnect(const std::string& reason);
  void on_goodbye();
  // Note [Call stamps], under mutex_: a send or receive of this rank records its call and
  // checks the messages already buffered for its collective; an arriving message is checked
  // against this rank's calls. Both throw MismatchError.
  void note_local_call(const Tag& tag);
  void check_against_local_calls(const Tag& message) const;
  void check_same_call(uint64_t channel, const CallStamp& mine, const CallStamp& theirs) const;
  std::exception_ptr size_mismatch(const Tag& tag, size_t sent, size_t expected) const;
  void remove_posted(const Tag& tag, const std::shared_ptr<Pending>& pending);

  net::Socket socket_;
  const int rank_;
  const int peer_;
  const std::string peer_address_;
  FailureSink& sink_;
  const std::shared_ptr<net::EventLoop> in_loop_;
  const std::shared_ptr<net::EventLoop> out_loop_;

  std::mutex send_mutex_;  // guards the socket's write side, the outbox and the loop's watch
  std::condition_variable send_changed_;
  std::deque<std::shared_ptr<Outgoing>> outbox_;
  std::exception_ptr send_error_;  // the write side broke: nothing more can be sent
  bool closing_ = false;           // stop() ran: no more data frames
  uint64_t in_id_ = 0;             // registrations with the loops (0: not, or no more)
  uint64_t out_id_ = 0;
  // The loop still reads (no end of stream or broken frame). Written by the loop thread under
  // send_mutex_; the loop reads it without the lock.
  std::atomic<bool> reading_{true};
  uint32_t watching_in_ = 0;  // what each loop waits for now
  uint32_t watching_out_ = 0;

  std::mutex mutex_;  // guards everything below
  std::condition_variable changed_;
  std::map<Tag, std::deque<std::shared_ptr<Pending>>> posted_;
  std::map<Tag, std::deque<Unexpected>> unexpected_;
  // This rank's last collectives on this connection: a peer's message may arrive after this
  // rank has finished its part of the collective (a root that only sends).
  struct LocalCall {
    uint64_t channel = ~0ULL;
    CallStamp stamp{};
  };
  std::array<LocalCall, 4> recent_calls_{};
  size_t next_recent_call_ = 0;
  std::exception_ptr error_;  // set once the connection or the transport failed
  bool peer_left_ = false;    // the peer said goodbye (closing its group normally)
  bool stopping_ = false;     // our destructor is running

  Incoming in_;                  // loop thread only (and stop(), once off the loop)
  std::vector<uint8_t> bounce_;  // loop thread only: cache-sized landing for reduce-on-receive
};

}  // namespace cohort::tcp
