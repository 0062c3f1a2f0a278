// TcpStoreServer: the process that hosts the rendezvous store over TCP.
//
// One thread accepts connections; each connection gets its own thread, which reads a request,
// runs it against a MemoryStore (so blocking get/wait reuse its waiting logic and wake-ups),
// and writes the reply. A thread per connection keeps a get() blocked for one client from
// delaying anyone else, and there are few connections (one or two per rank), capped at
// max_connections.
//
// Note [Store server hardening]: every peer is untrusted until it has presented the job token.
//  - The first frame must be HELLO, arrive within frame_timeout and be at most a HELLO's size;
//    the token is compared in constant time. A wrong or missing token gets an error reply, a
//    logged warning naming the peer, and the connection is closed.
//  - Frame headers are checked before a payload byte is read or allocated (see
//    tcp_store_protocol.h), a payload must follow its header within frame_timeout, and a
//    malformed frame gets an error reply and the connection is closed.
//  - Nothing a peer sends can throw out of a connection thread: every exception is caught,
//    logged and ends that connection only.
//  - The destructor shuts the listener and every socket down, wakes blocked get/wait calls
//    (MemoryStore::shutdown) and joins every thread; idle connection threads also poll the
//    stop flag, so none can outlive the server.
//
// Note [Abandoned waits]
// A GET or WAIT may block for as long as its client asks (up to 30 days). While it blocks, its
// thread checks every kHangupPollInterval whether the client has closed its end; if so the wait
// ends at once, which frees the thread and the connection slot. A client that vanishes without
// closing (its host lost power) is noticed by TCP keepalive the same way. The protocol has no
// use for a half-closed connection: a client that shuts down its sending side has gone too.
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <list>
#include <memory>
#include <mutex>
#include <thread>

#include "cohort/comm/memory_store.h"
#include "cohort/comm/tcp_store.h"
#include "cohort/core/env.h"
#include "cohort/core/error.h"
#include "cohort/core/logging.h"
#include "net/socket.h"
#include "rendezvous/tcp_store_protocol.h"

namespace cohort {

using namespace store_wire;

namespace {
// How often idle threads look at the stop flag (a backstop: shutdown() wakes them first).
constexpr Milliseconds kStopPollInterval{250};
// Writing a refusal to a peer we are about to drop must not stall the accept loop.
constexpr Milliseconds kRefusalWriteTimeout{100};
// How soon a blocked GET/WAIT notices that its client has gone (Note [Abandoned waits]).
constexpr Milliseconds kHangupPollInterval{100};

// Note [Abandoned waits]: throws once the client has closed its end (or the connection broke).
void throw_if_hung_up(const net::Socket& socket, const std::string& peer) {
  pollfd entry{socket.fd(), POLLRDHUP, 0};
  if (::poll(&entry, 1, 0) > 0 && (entry.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) {
    throw net::NetError(peer + " closed its connection while its request was waiting", 0);
  }
}
}  // namespace

class TcpStoreServer::Impl {
 public:
  explicit Impl(TcpStoreServerOptions options);
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  uint16_t port() const { return port_; }

 private:
  struct Connection {
    net::Socket socket;  // never closed or moved while its thread runs (others shut it down)
    std::string peer;
    std::thread thread;
    std::atomic<bool> done{false};
  };

  void accept_loop() noexcept;
  void admit(net::Socket socket);
  void refuse(net::Socket& socket, ErrorCode code, const std::string& message);
  void reap_finished();
  void serve(Connection& c) noexcept;
  bool authenticate(Connection& c);
  void serve_requests(Connection& c);
  // Waits until a frame starts arriving; false at the deadline or when the server stops.
  bool wait_for_frame(net::Socket& socket, Deadline deadline) const;
  Bytes execute(Connection& c, const Request& r);
  void send(Connection& c, Op op, const Bytes& payload);
  std::string where() const { return "store server on port " + std::to_string(port_); }

  TcpStoreServerOptions options_;
  net::Listener listener_;
  uint16_t port_ = 0;
  MemoryStore table_;
  std::atomic<bool> stopping_{false};
  std::mutex mutex_;  // guards connections_
  std::list<std::unique_ptr<Connection>> connections_;
  std::thread acceptor_;
};

TcpStoreServer::Impl::Impl(TcpStoreServerOptions options) : options_(std::move(options)) {
  if (options_.token.empty()) options_.token = env_string("COHORT_JOB_TOKEN").value_or("");
  if (options_.token.size() > kMaxTokenBytes) {
    throw ConfigError("the job token is " + std::to_string(options_.token.size()) +
                      " bytes long; the store accepts at most " + std::to_string(kMaxTokenBytes));
  }
  if (options_.max_connections < 1) throw ConfigError("store server max_connections must be >= 1");
  options_.frame_timeout = std::clamp(options_.frame_timeout, Milliseconds(1), kMaxTimeout);
  listener_ = net::Listener::bind(options_.bind_host, options_.port);
  port_ = listener_.port();
  if (options_.token.empty()) {
    COHORT_LOG(kInfo, where(),
               ": no job token set (COHORT_JOB_TOKEN), so every client that "
               "can reach the port is served");
  }
  acceptor_ = std::thread([this] { accept_loop(); });
}

TcpStoreServer::Impl::~Impl() {
  stopping_ = true;
  listener_.shutdown();
  try {
    if (acceptor_.joinable()) acceptor_.join();
    table_.shutdown();
    std::list<std::unique_ptr<Connection>> all;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // Reading ends, but a reply already computed still goes out: a client whose SET was
      // applied (and let another rank finish and stop this server) gets its answer.
      for (auto& c : connections_) c->socket.shutdown_read();
      all.swap(connections_);
    }
    for (auto& c : all) {
      if (c->thread.joinable()) c->thread.join();
    }
  } catch (const std::exception& e) {
    COHORT_LOG(kError, where(), ": error while shutting down: ", e.what());
  }
  listener_.close();
}

// ---------------------------------------------------------------- accepting

void TcpStoreServer::Impl::accept_loop() noexcept {
  while (!stopping_) {
    try {
      net::Socket socket = listener_.accept(Deadline::after(kStopPollInterval));
      reap_finished();
      if (socket.valid() && !stopping_) admit(std::move(socket));
    } catch (const std::exception& e) {
      if (stopping_) break;
      // Out of descriptors or memory: keep serving the connections we have, try again soon.
      COHORT_LOG(kWarn, where(), ": accept failed (", e.what(), "); retrying");
      std::this_thread::sleep_for(kStopPollInterval);
    }
  }
}

void TcpStoreServer::Impl::admit(net::Socket socket) {
  auto c = std::make_unique<Connection>();
  c->peer = socket.peer_name();
  std::unique_lock<std::mutex> lock(mutex_);
  if (connections_.size() >= static_cast<size_t>(options_.max_connections)) {
    lock.unlock();
    COHORT_LOG(kWarn, where(), ": refusing a connection from ", c->peer, ": already serving ",
               options_.max_connections, " connections (the limit)");
    refuse(socket, ErrorCode::kBusy,
           "the store server is at its limit of " + std::to_string(options_.max_connections) +
               " connections");
    return;
  }
  c->socket = std::move(socket);
  Connection* raw = c.get();
  connections_.push_back(std::move(c));
  try {
    raw->thread = std::thread([this, raw] { serve(*raw); });
  } catch (const std::exception& e) {
    connections_.pop_back();
    COHORT_LOG(kWarn, where(), ": cannot start a thread for ", raw->peer, ": ", e.what());
  }
}

void TcpStoreServer::Impl::refuse(net::Socket& socket, ErrorCode code, const std::string& message) {
  try {
    write_frame(socket, Op::kError, encode_error(code, message),
                Deadline::after(kRefusalWriteTimeout));
  } catch (const std::exception&) {
    // The peer is being dropped anyway; it will see the connection close.
  }
  socket.shutdown();
}

void TcpStoreServer::Impl::reap_finished() {
  std::list<std::unique_ptr<Connection>> finished;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = connections_.begin(); it != connections_.end();) {
      auto next = std::next(it);
      if ((*it)->done) finished.splice(finished.end(), connections_, it);
      it = next;
    }
  }
  for (auto& c : finished) c->thread.join();
}

// ---------------------------------------------------------------- one connection

void TcpStoreServer::Impl::serve(Connection& c) noexcept {
  try {
    if (authenticate(c)) serve_requests(c);
  } catch (const ProtocolError& e) {
    COHORT_LOG(kWarn, where(), ": malformed frame from ", c.peer, ": ", e.what(),
               "; closing the connection");
    try {
      send(c, Op::kError, encode_error(ErrorCode::kProtocol, e.what()));
    } catch (const std::exception&) {
    }
  } catch (const net::NetError& e) {
    COHORT_LOG(kDebug, where(), ": connection from ", c.peer, " ended: ", e.what());
  } catch (const TimeoutError& e) {
    COHORT_LOG(kWarn, where(), ": dropping ", c.peer, ", which stalled in the middle of a frame (",
               e.what(), ")");
  } catch (const std::exception& e) {
    COHORT_LOG(kWarn, where(), ": dropping ", c.peer, ": ", e.what());
  } catch (...) {
    COHORT_LOG(kWarn, where(), ": dropping ", c.peer, " after an unknown error");
  }
  c.socket.shutdown();
  c.done = true;
}

bool TcpStoreServer::Impl::wait_for_frame(net::Socket& socket, Deadline deadline) const {
  while (!stopping_) {
    if (socket.wait_readable(deadline.min(Deadline::after(kStopPollInterval)))) return true;
    if (deadline.expired()) return false;
  }
  return false;
}

bool TcpStoreServer::Impl::authenticate(Connection& c) {
  const Deadline deadline = Deadline::after(options_.frame_timeout);
  if (!wait_for_frame(c.socket, deadline)) {
    if (!stopping_) {
      COHORT_LOG(kWarn, where(), ": dropping ", c.peer, ", which sent no HELLO within ",
                 options_.frame_timeout.count(), " ms");
    }
    return false;
  }
  const Frame frame = read_frame(c.socket, kMaxHelloPayloadBytes, deadline, options_.frame_timeout);
  if (frame.op != Op::kHello) {
    throw ProtocolError(std::string("the first frame of a connection must be HELLO, not ") +
                        op_name(frame.op));
  }
  const Request hello = decode_request(Op::kHello, frame.payload);
  if (!options_.token.empty() && !tokens_equal(options_.token, hello.token)) {
    const bool missing = hello.token.empty();
    COHORT_LOG(kWarn, where(), ": refused a connection from ", c.peer, ": ",
               missing ? "it presented no job token" : "it presented a wrong job token");
    refuse(c.socket, ErrorCode::kBadToken,
           missing ? "no job token presented" : "the job token does not match the server's");
    return false;
  }
  send(c, Op::kOk, {});
  return true;
}

void TcpStoreServer::Impl::serve_requests(Connection& c) {
  for (;;) {
    if (!wait_for_frame(c.socket, Deadline::never())) return;
    Frame frame = read_frame(c.socket, kMaxPayloadBytes, Deadline::after(options_.frame_timeout),
                             options_.frame_timeout);
    if (!is_request(frame.op) || frame.op == Op::kHello) {
      throw ProtocolError(std::string("expected a request, got a ") + op_name(frame.op) + " frame");
    }
    const Request request = decode_request(frame.op, frame.payload);
    frame.payload = Bytes();  // a 64 MiB value should not be held twice
    Bytes reply;
    try {
      reply = execute(c, request);
    } catch (const TimeoutError& e) {
      send(c, Op::kError, encode_error(ErrorCode::kTimeout, e.what()));
      continue;
    } catch (const InvalidArgument& e) {
      send(c, Op::kError, encode_error(ErrorCode::kInvalidArgument, e.what()));
      continue;
    } catch (const StoreError& e) {  // the table was shut down: the server is stopping
      send(c, Op::kError, encode_error(ErrorCode::kClosed, "the store server is shutting down"));
      return;
    }
    send(c, Op::kOk, reply);
  }
}

Bytes TcpStoreServer::Impl::execute(Connection& c, const Request& r) {
  const Milliseconds timeout(r.timeout_ms < static_cast<uint64_t>(kMaxTimeout.count())
                                 ? static_cast<int64_t>(r.timeout_ms)
                                 : kMaxTimeout.count());
  const MemoryStore::WaitCheck client_still_there{kHangupPollInterval,
                                                  [&c] { throw_if_hung_up(c.socket, c.peer); }};
  Writer w;
  switch (r.op) {
    case Op::kSet: table_.set(r.key, r.value); break;
    case Op::kGet: w.bytes(table_.get(r.key, timeout, client_still_there)); break;
    case Op::kAdd: w.i64(table_.add(r.key, r.delta)); break;
    case Op::kCompareSet: w.bytes(table_.compare_set(r.key, r.expected, r.value)); break;
    case Op::kWait: table_.wait(r.keys, timeout, client_still_there); break;
    case Op::kDeleteKey: w.u8(table_.delete_key(r.key) ? 1 : 0); break;
    case Op::kNumKeys: w.i64(table_.num_keys()); break;
    default: throw ProtocolError(std::string("unexpected ") + op_name(r.op) + " request");
  }
  return w.take();
}

void TcpStoreServer::Impl::send(Connection& c, Op op, const Bytes& payload) {
  // A client that does not read its reply stalls only its own connection, and only this long.
  const auto allowance = Milliseconds(1000) * static_cast<int64_t>(payload.size() >> 20);
  write_frame(c.socket, op, payload, Deadline::after(options_.frame_timeout + allowance));
}

// ---------------------------------------------------------------- public face

TcpStoreServer::TcpStoreServer(const std::string& bind_host, uint16_t port, std::string token)
    : TcpStoreServer(TcpStoreServerOptions{bind_host, port, std::move(token)}) {}

TcpStoreServer::TcpStoreServer(TcpStoreServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

TcpStoreServer::~TcpStoreServer() = default;

uint16_t TcpStoreServer::port() const {
  return impl_->port();
}

}  // namespace cohort
