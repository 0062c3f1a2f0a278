// TcpStoreServer: the process that hosts the rendezvous store over TCP.
//
// One thread serves every client. It runs an epoll loop of the server's own (not the TCP
// transport's shared loops: the server needs deadlines, which net::EventLoop leaves to its
// callers, and its handlers would share a thread with the collectives' traffic) that accepts
// connections, authenticates them, reads frames, runs requests against the table
// (store_table.h) and writes the replies. A GET or WAIT whose keys are not set yet holds no
// thread: it is parked (parked_requests.h) and answered when a SET, ADD or COMPARE_SET sets its
// keys, answered with the timeout error at its deadline, or dropped when its client hangs up.
// The server's threads stay at one whatever the number of clients; with a thread per
// connection a 64-rank job ran 66 of them, most blocked in get().
//
// Note [Store server speed]
// Every request costs the loop one recv() and one send(), plus its share of an epoll_wait()
// that reports every ready connection at once: a readable connection gets one recv() of
// whatever has arrived, and every whole frame in it is handled; a reply is written with one
// send() straight away when nothing is queued before it, and only what the socket does not take
// is queued and waited for with EPOLLOUT. A connection watched for EPOLLOUT (or for nothing but
// hang-ups, while parked) is not read, so a client that does not read its replies cannot make
// the server queue more of them. An earlier attempt at one loop, which made several system
// calls per request, served less than half the requests per second of the thread per connection
// (8 clients in one process: 22.4k against 52.8k); store_bench (bench/micro) measures it.
//
// Note [Store server hardening]: every peer is untrusted until it has presented the job token.
//  - The first frame must be HELLO, arrive whole within frame_timeout of the connection and be
//    at most a HELLO's size; the token is compared in constant time. A wrong or missing token
//    gets an error reply, a logged warning naming the peer, and the connection is closed.
//  - A frame header is checked as soon as its 10 bytes are in, before any of its payload is
//    stored (store_connection.h); payload memory grows with the bytes that arrive. Every frame
//    must arrive whole within frame_timeout (+1 s per MiB) of its first byte, and queued replies
//    must be taken as fast; a peer that stalls is dropped and its slot freed.
//  - A malformed frame gets an error reply and the connection is closed.
//  - Nothing a peer sends can throw out of the loop: every exception while serving a
//    connection is caught, logged and closes that connection only.
//  - Connections beyond max_connections are refused with an error reply and a warning.
//  - The destructor stops the loop, which answers every parked request with a "shutting down"
//    error, writes what the sockets take of the replies already computed, closes every
//    connection; then it joins the one thread.
//
// Note [Abandoned waits]
// A GET or WAIT may be parked for as long as its client asks (up to 30 days). While it is, its
// connection is watched for hang-ups only (EPOLLRDHUP, EPOLLHUP, EPOLLERR): when the client
// closes its end, the request is dropped at once and the connection closed, which frees its
// slot, without polling. The protocol has no use for a half-closed connection: a client that
// shuts down its sending side has gone too. A client whose host vanished without closing is
// noticed once TCP keepalive (on every connection) gives up on it, which epoll reports as an
// error.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>
#include <set>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cohort/comm/tcp_store.h"
#include "cohort/core/env.h"
#include "cohort/core/error.h"
#include "cohort/core/logging.h"
#include "net/socket.h"
#include "rendezvous/parked_requests.h"
#include "rendezvous/store_connection.h"
#include "rendezvous/store_table.h"
#include "rendezvous/tcp_store_protocol.h"

namespace cohort {

using namespace store_wire;

namespace {
// epoll ids: the wake-up eventfd, the listener, then connections.
constexpr uint64_t kWakeId = 0;
constexpr uint64_t kListenerId = 1;
constexpr uint64_t kFirstConnectionId = 2;
constexpr int kMaxEvents = 64;
// After accept() failed (out of descriptors or memory), wait this long before trying again.
constexpr Milliseconds kAcceptRetry{250};
// TCP keepalive on client connections (Note [Abandoned waits]): a vanished host is noticed
// about two minutes after its connection went quiet.
constexpr int kKeepaliveIdleS = 60;
constexpr int kKeepaliveIntervalS = 10;
constexpr int kKeepaliveProbes = 6;
constexpr uint32_t kHangupEvents = EPOLLRDHUP | EPOLLHUP | EPOLLERR;

[[noreturn]] void fail_errno(const char* what) {
  throw Error(std::string("store server: ") + what + " failed: " + std::strerror(errno));
}

std::string quoted_keys(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "" : ", ") + ("'" + k + "'");
  return out;
}

// The keys a GET or WAIT waits for.
std::vector<std::string> keys_of(const Request& r) {
  return r.op == Op::kGet ? std::vector<std::string>{r.key} : r.keys;
}

Milliseconds wire_timeout(uint64_t timeout_ms) {
  return Milliseconds(std::min<uint64_t>(timeout_ms, kMaxTimeout.count()));
}

// A descriptor closed with its owner.
class OwnedFd {
 public:
  explicit OwnedFd(int fd = -1) : fd_(fd) {}
  ~OwnedFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};
}  // namespace

class TcpStoreServer::Impl {
 public:
  explicit Impl(TcpStoreServerOptions options);
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  uint16_t port() const { return port_; }

 private:
  // The loop.
  void run() noexcept;
  void turn();
  int sleep_ms() const;
  void shut_down() noexcept;

  // Accepting.
  void accept_all();
  void admit(net::Socket socket);
  size_t live_connections() const { return connections_.size() - retired_.size(); }

  // One connection. Whatever serving it throws ends up in guarded(), which closes it.
  template <typename Serve>
  void guarded(StoreConnection& c, Serve&& serve) noexcept;
  void on_events(StoreConnection& c, uint32_t events);
  void handle_frames(StoreConnection& c);
  void handle_frame(StoreConnection& c, const FrameView& frame);
  void authenticate(StoreConnection& c, const FrameView& frame);
  void refuse(StoreConnection& c, ErrorCode code, const std::string& message);
  void update_registration(StoreConnection& c);
  void retire(StoreConnection& c) noexcept;
  void run_resumed();
  void erase_retired();

  // Requests.
  void execute(StoreConnection& c, Request r);
  void park(StoreConnection& c, Request r, std::vector<std::string> missing);
  void keys_set(const std::string& key);
  void answer_or_repark(ParkedRequests::Parked parked);
  void answer(StoreConnection& c, const Request& r);
  void reply_timeout(StoreConnection& c, const Request& r);
  void expire(Clock::time_point now);
  void reply(StoreConnection& c, const Bytes& payload) {
    c.send(Op::kOk, payload.data(), payload.size());
  }
  void reply_error(StoreConnection& c, ErrorCode code, const std::string& message) {
    reply_error_frame(c, encode_error(code, message));
  }
  void reply_error_frame(StoreConnection& c, const Bytes& payload) {
    c.send(Op::kError, payload.data(), payload.size());
  }

  std::string where() const { return "store server on port " + std::to_string(port_); }

  TcpStoreServerOptions options_;
  net::Listener listener_;
  uint16_t port_ = 0;
  OwnedFd epoll_;
  OwnedFd wake_;  // an eventfd: the destructor writes it so that epoll_wait returns
  std::atomic<bool> stopping_{false};

  // Everything below belongs to the loop thread.
  StoreTable table_;
  ParkedRequests parked_;
  std::unordered_map<uint64_t, std::unique_ptr<StoreConnection>> connections_;
  uint64_t next_id_ = kFirstConnectionId;
  std::vector<uint64_t> retired_;  // closed this turn, erased at its end
  std::vector<uint64_t> resume_;   // may have whole frames buffered that wait to be handled
  // Connections' deadlines (StoreConnection::deadline), earliest first.
  std::set<std::pair<Clock::time_point, uint64_t>> deadlines_;
  Clock::time_point accept_resume_ = Clock::time_point::max();

  std::thread thread_;  // last: it runs on everything above
};

TcpStoreServer::Impl::Impl(TcpStoreServerOptions options)
    : options_(std::move(options)),
      epoll_(::epoll_create1(EPOLL_CLOEXEC)),
      wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (options_.token.empty()) options_.token = env_string("COHORT_JOB_TOKEN").value_or("");
  if (options_.token.size() > kMaxTokenBytes) {
    throw ConfigError("the job token is " + std::to_string(options_.token.size()) +
                      " bytes long; the store accepts at most " + std::to_string(kMaxTokenBytes));
  }
  if (options_.max_connections < 1) throw ConfigError("store server max_connections must be >= 1");
  options_.frame_timeout = std::clamp(options_.frame_timeout, Milliseconds(1), kMaxTimeout);
  listener_ = net::Listener::bind(options_.bind_host, options_.port);
  port_ = listener_.port();
  if (epoll_.get() < 0) fail_errno("epoll_create1");
  if (wake_.get() < 0) fail_errno("eventfd");
  for (const auto& [fd, id] : {std::pair<int, uint64_t>{wake_.get(), kWakeId},
                               std::pair<int, uint64_t>{listener_.fd(), kListenerId}}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = id;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) fail_errno("epoll_ctl(ADD)");
  }
  if (options_.token.empty()) {
    COHORT_LOG(kInfo, where(),
               ": no job token set (COHORT_JOB_TOKEN), so every client that "
               "can reach the port is served");
  }
  thread_ = std::thread([this] { run(); });
}

TcpStoreServer::Impl::~Impl() {
  stopping_ = true;
  const uint64_t one = 1;
  while (::write(wake_.get(), &one, sizeof one) < 0 && errno == EINTR) {
  }
  if (thread_.joinable()) thread_.join();
  listener_.close();
}

// ---------------------------------------------------------------- the loop

void TcpStoreServer::Impl::run() noexcept {
  while (!stopping_.load(std::memory_order_relaxed)) {
    try {
      turn();
    } catch (const std::exception& e) {
      // Not a peer's doing (those are caught per connection): out of memory in the loop's own
      // bookkeeping, say. Keep serving.
      COHORT_LOG(kError, where(), ": ", e.what());
    }
  }
  shut_down();
}

// One epoll_wait and everything it reported, then the deadlines that passed.
void TcpStoreServer::Impl::turn() {
  epoll_event events[kMaxEvents];
  const int n = ::epoll_wait(epoll_.get(), events, kMaxEvents, sleep_ms());
  if (n < 0) {
    if (errno == EINTR) return;
    fail_errno("epoll_wait");
  }
  bool accept_ready = false;
  for (int i = 0; i < n; ++i) {
    const uint64_t id = events[i].data.u64;
    if (id == kWakeId) {
      uint64_t count = 0;
      while (::read(wake_.get(), &count, sizeof count) < 0 && errno == EINTR) {
      }
    } else if (id == kListenerId) {
      accept_ready = true;
    } else if (auto it = connections_.find(id); it != connections_.end() && !it->second->retired) {
      StoreConnection& c = *it->second;
      guarded(c, [&] { on_events(c, events[i].events); });
    }
  }
  expire(Clock::now());
  run_resumed();
  // Accepting last: a slot that a hang-up freed in this turn is free for a connection accepted
  // in it (a client that closed before another connected is never counted against it).
  if (accept_ready || Clock::now() >= accept_resume_) accept_all();
  erase_retired();
}

// Until the earliest deadline: a parked request's, a connection's, or accepting again.
int TcpStoreServer::Impl::sleep_ms() const {
  Clock::time_point next = accept_resume_;
  if (const auto parked = parked_.next_deadline()) next = std::min(next, *parked);
  if (!deadlines_.empty()) next = std::min(next, deadlines_.begin()->first);
  if (next == Clock::time_point::max()) return -1;
  const auto left = std::chrono::ceil<Milliseconds>(next - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, INT_MAX));
}

void TcpStoreServer::Impl::shut_down() noexcept {
  for (auto& parked : parked_.take_all()) {
    StoreConnection& c = *connections_.at(parked.connection);
    c.parked = false;
    try {
      reply_error(c, ErrorCode::kClosed, "the store server is shutting down");
    } catch (const std::exception&) {
    }
  }
  for (auto& [id, c] : connections_) {
    if (c->retired) continue;
    // A reply already computed still goes out, as far as the socket takes it now: a client
    // whose SET was applied (and let another rank finish and stop this server) gets its answer.
    try {
      if (c->output_pending()) c->flush();
    } catch (const std::exception&) {
    }
    c->close();
  }
  connections_.clear();
}

// ---------------------------------------------------------------- accepting

void TcpStoreServer::Impl::accept_all() {
  if (accept_resume_ != Clock::time_point::max()) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kListenerId;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, listener_.fd(), &ev) != 0) {
      fail_errno("epoll_ctl(MOD)");
    }
    accept_resume_ = Clock::time_point::max();
  }
  for (;;) {
    net::Socket socket;
    try {
      socket = listener_.accept(Deadline(Clock::now()));  // what is there, without waiting
    } catch (const std::exception& e) {
      // Out of descriptors or memory: keep serving the connections we have, try again soon
      // (the listener stays readable, so it is not watched meanwhile).
      COHORT_LOG(kWarn, where(), ": accept failed (", e.what(), "); retrying");
      epoll_event ev{};
      ev.data.u64 = kListenerId;
      ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, listener_.fd(), &ev);
      accept_resume_ = Clock::now() + kAcceptRetry;
      return;
    }
    if (!socket.valid()) return;
    admit(std::move(socket));
  }
}

void TcpStoreServer::Impl::admit(net::Socket socket) {
  if (live_connections() >= static_cast<size_t>(options_.max_connections)) {
    COHORT_LOG(kWarn, where(), ": refusing a connection from ", socket.peer_name(),
               ": already serving ", options_.max_connections, " connections (the limit)");
    // A fresh socket takes a short frame whole; if not, the peer sees the close alone.
    Bytes frame(kHeaderBytes);
    const Bytes payload = encode_error(
        ErrorCode::kBusy, "the store server is at its limit of " +
                              std::to_string(options_.max_connections) + " connections");
    encode_header(Op::kError, static_cast<uint32_t>(payload.size()), frame.data());
    frame.insert(frame.end(), payload.begin(), payload.end());
    iovec part{frame.data(), frame.size()};
    iovec* left = &part;
    int count = 1;
    try {
      socket.write_available(left, count);
    } catch (const std::exception&) {
    }
    socket.shutdown();
    return;
  }
  socket.enable_keepalive(kKeepaliveIdleS, kKeepaliveIntervalS, kKeepaliveProbes);
  const uint64_t id = next_id_++;
  auto owned = std::make_unique<StoreConnection>(id, std::move(socket), Clock::now());
  StoreConnection& c = *owned;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.u64 = id;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, c.fd(), &ev) != 0) fail_errno("epoll_ctl(ADD)");
  c.watched = ev.events;
  connections_.emplace(id, std::move(owned));
  update_registration(c);  // the HELLO deadline
}

// ---------------------------------------------------------------- one connection

template <typename Serve>
void TcpStoreServer::Impl::guarded(StoreConnection& c, Serve&& serve) noexcept {
  try {
    serve();
    update_registration(c);
    return;
  } catch (const ProtocolError& e) {
    COHORT_LOG(kWarn, where(), ": malformed frame from ", c.peer(), ": ", e.what(),
               "; closing the connection");
    try {
      refuse(c, ErrorCode::kProtocol, e.what());
      update_registration(c);
      return;
    } catch (const std::exception&) {
    }
  } catch (const net::NetError& e) {
    COHORT_LOG(kDebug, where(), ": connection from ", c.peer(), " ended: ", e.what());
  } catch (const std::exception& e) {
    COHORT_LOG(kWarn, where(), ": dropping ", c.peer(), ": ", e.what());
  } catch (...) {
    COHORT_LOG(kWarn, where(), ": dropping ", c.peer(), " after an unknown error");
  }
  retire(c);
}

void TcpStoreServer::Impl::on_events(StoreConnection& c, uint32_t events) {
  if ((events & EPOLLOUT) && c.output_pending() && c.flush()) {
    if (c.closing) return retire(c);
    resume_.push_back(c.id());  // frames that arrived meanwhile may be buffered already
  }
  if (c.watched & EPOLLIN) {
    // Data that arrived before a hang-up is still handled; the end of stream comes after it.
    if (!(events & (EPOLLIN | kHangupEvents))) return;
    if (!c.receive()) {
      COHORT_LOG(kDebug, where(), ": ", c.peer(), " closed its connection");
      return retire(c);
    }
    handle_frames(c);
    if (!c.parked || !(events & kHangupEvents)) return;
  } else if (!(events & kHangupEvents)) {
    return;
  }
  // Note [Abandoned waits]
  if (c.parked) {
    COHORT_LOG(kDebug, where(), ": ", c.peer(), " hung up while its request waited");
  }
  retire(c);
}

// Every whole frame received, while the connection may take requests.
void TcpStoreServer::Impl::handle_frames(StoreConnection& c) {
  FrameView frame;
  while (!c.retired && !c.closing && !c.parked && !c.output_pending() &&
         c.next_frame(c.authenticated ? kMaxPayloadBytes : kMaxHelloPayloadBytes, &frame)) {
    handle_frame(c, frame);
    c.consume_frame(frame);
  }
  c.note_input_time();
}

void TcpStoreServer::Impl::handle_frame(StoreConnection& c, const FrameView& frame) {
  if (!c.authenticated) return authenticate(c, frame);
  if (!is_request(frame.op) || frame.op == Op::kHello) {
    throw ProtocolError(std::string("expected a request, got a ") + op_name(frame.op) + " frame");
  }
  execute(c, decode_request(frame.op, frame.payload, frame.size));
}

void TcpStoreServer::Impl::authenticate(StoreConnection& c, const FrameView& frame) {
  if (frame.op != Op::kHello) {
    throw ProtocolError(std::string("the first frame of a connection must be HELLO, not ") +
                        op_name(frame.op));
  }
  const Request hello = decode_request(Op::kHello, frame.payload, frame.size);
  if (!options_.token.empty() && !tokens_equal(options_.token, hello.token)) {
    const bool missing = hello.token.empty();
    COHORT_LOG(kWarn, where(), ": refused a connection from ", c.peer(), ": ",
               missing ? "it presented no job token" : "it presented a wrong job token");
    return refuse(c, ErrorCode::kBadToken,
                  missing ? "no job token presented" : "the job token does not match the server's");
  }
  c.authenticated = true;
  c.send(Op::kOk, nullptr, 0);
}

// An error reply, then the connection closes (once the reply is written, or at its deadline).
void TcpStoreServer::Impl::refuse(StoreConnection& c, ErrorCode code, const std::string& message) {
  c.closing = true;
  reply_error(c, code, message);
  if (!c.output_pending()) retire(c);
}

// Watches what the connection's state needs (Note [Store server speed]) and files its deadline.
void TcpStoreServer::Impl::update_registration(StoreConnection& c) {
  if (c.retired) return;
  uint32_t want = EPOLLRDHUP;
  if (c.output_pending()) {
    want |= EPOLLOUT;
  } else if (!c.parked && !c.closing) {
    want |= EPOLLIN;
  }
  if (want != c.watched) {
    epoll_event ev{};
    ev.events = want;
    ev.data.u64 = c.id();
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, c.fd(), &ev) != 0) fail_errno("epoll_ctl(MOD)");
    c.watched = want;
  }
  const Clock::time_point at = c.deadline(options_.frame_timeout);
  if (at != c.registered_deadline) {
    deadlines_.erase({c.registered_deadline, c.id()});
    if (at != Clock::time_point::max()) deadlines_.emplace(at, c.id());
    c.registered_deadline = at;
  }
}

void TcpStoreServer::Impl::retire(StoreConnection& c) noexcept {
  if (c.retired) return;
  c.retired = true;
  if (c.parked) parked_.drop(c.id());
  c.parked = false;
  deadlines_.erase({c.registered_deadline, c.id()});
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c.fd(), nullptr);
  c.close();
  retired_.push_back(c.id());
}

void TcpStoreServer::Impl::run_resumed() {
  while (!resume_.empty()) {
    const std::vector<uint64_t> ids = std::move(resume_);
    resume_.clear();
    for (const uint64_t id : ids) {
      const auto it = connections_.find(id);
      if (it == connections_.end() || it->second->retired) continue;
      StoreConnection& c = *it->second;
      guarded(c, [&] { handle_frames(c); });
    }
  }
}

void TcpStoreServer::Impl::erase_retired() {
  for (const uint64_t id : retired_) connections_.erase(id);
  retired_.clear();
}

// ---------------------------------------------------------------- requests

void TcpStoreServer::Impl::execute(StoreConnection& c, Request r) {
  Writer w;
  switch (r.op) {
    case Op::kSet:
      table_.set(r.key, std::move(r.value));
      reply(c, {});
      return keys_set(r.key);
    case Op::kGet:
      if (const Bytes* value = table_.find(r.key)) {
        w.bytes(*value);
        return reply(c, w.take());
      } else {
        std::vector<std::string> missing{r.key};
        return park(c, std::move(r), std::move(missing));
      }
    case Op::kAdd: {
      int64_t value = 0;
      try {
        value = table_.add(r.key, r.delta);
      } catch (const InvalidArgument& e) {
        return reply_error(c, ErrorCode::kInvalidArgument, e.what());
      }
      w.i64(value);
      reply(c, w.take());
      return keys_set(r.key);
    }
    case Op::kCompareSet: {
      bool wrote = false;
      w.bytes(table_.compare_set(r.key, r.expected, std::move(r.value), &wrote));
      reply(c, w.take());
      if (wrote) keys_set(r.key);
      return;
    }
    case Op::kWait: {
      std::vector<std::string> missing = table_.missing(r.keys);
      if (missing.empty()) return reply(c, {});
      return park(c, std::move(r), std::move(missing));
    }
    case Op::kDeleteKey: w.u8(table_.erase(r.key) ? 1 : 0); return reply(c, w.take());
    case Op::kNumKeys: w.i64(table_.size()); return reply(c, w.take());
    default: throw ProtocolError(std::string("unexpected ") + op_name(r.op) + " request");
  }
}

void TcpStoreServer::Impl::park(StoreConnection& c, Request r, std::vector<std::string> missing) {
  const Milliseconds timeout = wire_timeout(r.timeout_ms);
  if (timeout.count() == 0) return reply_timeout(c, r);
  parked_.park(c.id(), std::move(r), Clock::now() + timeout, std::move(missing));
  c.parked = true;
}

// After a SET, ADD or COMPARE_SET stored `key`: the requests parked on it.
void TcpStoreServer::Impl::keys_set(const std::string& key) {
  if (parked_.empty()) return;
  for (auto& parked : parked_.take_ready(key)) answer_or_repark(std::move(parked));
}

void TcpStoreServer::Impl::answer_or_repark(ParkedRequests::Parked parked) {
  // A parked request's connection is live: retire() drops the request.
  StoreConnection& c = *connections_.at(parked.connection);
  std::vector<std::string> missing = table_.missing(keys_of(parked.request));
  if (!missing.empty()) {  // deleted again since
    parked_.park(parked.connection, std::move(parked.request), parked.deadline, std::move(missing));
    return;
  }
  c.parked = false;
  guarded(c, [&] {
    answer(c, parked.request);
    resume_.push_back(c.id());
  });
}

void TcpStoreServer::Impl::answer(StoreConnection& c, const Request& r) {
  if (r.op != Op::kGet) return reply(c, {});
  Writer w;
  w.bytes(*table_.find(r.key));
  reply(c, w.take());
}

void TcpStoreServer::Impl::reply_timeout(StoreConnection& c, const Request& r) {
  const std::string after = std::to_string(wire_timeout(r.timeout_ms).count()) + " ms";
  if (r.op == Op::kGet) {
    return reply_error(
        c, ErrorCode::kTimeout,
        "store get('" + r.key + "') timed out after " + after + ": the key was never set");
  }
  reply_error(c, ErrorCode::kTimeout,
              "store wait timed out after " + after +
                  "; keys never set: " + quoted_keys(table_.missing(r.keys)));
}

// Parked requests get their timeout replies; stalled connections are dropped.
void TcpStoreServer::Impl::expire(Clock::time_point now) {
  for (auto& parked : parked_.take_expired(now)) {
    StoreConnection& c = *connections_.at(parked.connection);
    c.parked = false;
    guarded(c, [&] {
      reply_timeout(c, parked.request);
      resume_.push_back(c.id());
    });
  }
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    const uint64_t id = deadlines_.begin()->second;
    deadlines_.erase(deadlines_.begin());
    StoreConnection& c = *connections_.at(id);
    c.registered_deadline = Clock::time_point::max();
    COHORT_LOG(kWarn, where(), ": dropping ", c.peer(), ": ",
               c.stall_reason(options_.frame_timeout));
    retire(c);
  }
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
