// One rank's end of the connection to one peer. Sends are written on the caller's thread while
// the socket takes them without blocking, and by a sender thread from there on
// (Note [Outbox]); a reader thread matches incoming messages to posted receives
// (Note [Claimed receives]).
#pragma once

#include <sys/uio.h>

#include <array>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cohort/comm/transport.h"
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
  Connection(net::Socket socket, int local_rank, int peer_rank, FailureSink& sink);
  ~Connection();  // stop()s

  void start();  // the reader and sender threads
  // Shuts the socket down and joins both threads. Idempotent. A transport stops all its
  // connections before destroying any, since a reader reports failures to all of them.
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
    bool claimed = false;  // the reader is writing into data right now
    bool done = false;
    std::exception_ptr error;
  };
  struct Unexpected {
    std::unique_ptr<uint8_t[]> data;
    size_t bytes = 0;
    CallStamp stamp{};  // the sending call
  };
  // A frame waiting in the outbox, or being written by the sender thread.
  struct Outgoing {
    FrameHeader header{};
    std::string payload;  // control frames own their payload; data frames point at the caller's
    iovec parts[2]{};
    iovec* next = parts;  // first part not fully written
    int left = 2;         // parts not fully written
    Deadline deadline = Deadline::never();
    bool writing = false;
    bool done = false;
    std::exception_ptr error;
  };
  class RecvRequest;
  class SendRequest;

  std::unique_ptr<Request> enqueue(std::shared_ptr<Outgoing> frame, bool control);
  void sender_loop() noexcept;
  void finish_send(const std::shared_ptr<Outgoing>& frame, std::exception_ptr error);
  void drop_from_outbox(const std::shared_ptr<Outgoing>& frame);
  std::exception_ptr lost_while_sending(const std::string& reason) const;

  void reader_loop() noexcept;
  void read_frame();
  void receive_data(const FrameHeader& header);
  std::unique_ptr<Request> post(Tag tag, std::shared_ptr<Pending> pending, Deadline deadline);
  std::shared_ptr<Pending> claim_posted(const Tag& tag);
  void read_payload(Pending& pending);
  static void land(Pending& pending, const uint8_t* bytes);
  void finish(const std::shared_ptr<Pending>& pending, std::exception_ptr error);
  void deliver_buffered(const Tag& tag, Unexpected message);
  void on_disconnect(const std::string& reason);
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

  std::mutex send_mutex_;  // guards the socket's write side and the outbox
  std::condition_variable send_changed_;
  std::deque<std::shared_ptr<Outgoing>> outbox_;
  std::exception_ptr send_error_;  // the write side broke: nothing more can be sent
  bool sender_stop_ = false;
  std::thread sender_;

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
  std::thread reader_;
  std::vector<uint8_t> bounce_;  // reader thread only: cache-sized landing for reduce-on-receive
};

}  // namespace cohort::tcp
