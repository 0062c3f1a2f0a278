// TcpStore: the client side of the TCP store (and, with is_server, the server next to it).
//
// Each request takes a connection from a small pool, sends one frame, reads one reply and puts
// the connection back. When every pooled connection is busy (another thread is blocked in
// get() or wait()), a new one is opened, so concurrent callers never wait for each other; at
// most kMaxIdleConnections stay open once the burst is over, to keep the server's connection
// count low in big jobs.
//
// Errors are turned into what the caller can act on (error.h):
//   cannot connect before the timeout, connection lost   StoreError naming host:port
//   token refused                                        StoreError saying so
//   server-side get/wait deadline                        TimeoutError naming the key(s)
//   key/value over the limits                            InvalidArgument, before sending
//   reply that breaks the protocol                       ProtocolError
// A connection that failed mid-request is dropped, never reused: its stream position is
// unknown.
#include <algorithm>
#include <mutex>
#include <vector>

#include "cohort/comm/tcp_store.h"
#include "cohort/core/env.h"
#include "cohort/core/error.h"
#include "net/socket.h"
#include "rendezvous/tcp_store_protocol.h"

namespace cohort {

using namespace store_wire;

namespace {
constexpr size_t kMaxIdleConnections = 2;
// After the first connection, a refused reconnect means the server is gone: fail soon.
constexpr Milliseconds kReconnectWindow{5000};
// A get/wait reply may come this long after the request's own timeout (the server's timeout
// error has to travel back) before the client gives up on the server.
constexpr Milliseconds kReplyGrace{10'000};

Deadline after(Milliseconds timeout) {
  return Deadline::after(std::clamp(timeout, Milliseconds(0), kMaxTimeout));
}
}  // namespace

class TcpStore::Client {
 public:
  Client(std::string host, uint16_t port, std::string token, Milliseconds timeout)
      : host_(std::move(host)), port_(port), token_(std::move(token)),
        timeout_(std::clamp(timeout, Milliseconds(0), kMaxTimeout)) {
    give_back(open(after(timeout_)));
  }

  // Sends `request` and returns the payload of its OK reply; throws the typed errors above.
  Bytes call(const Request& request, Deadline reply_deadline);
  // The deadline for replies to requests the server answers at once.
  Deadline default_deadline() const { return after(timeout_); }
  std::string where() const { return net::Endpoint{host_, port_}.to_string(); }

 private:
  net::Socket open(Deadline deadline);
  void handshake(net::Socket& socket, Deadline deadline);
  net::Socket take_idle();
  void give_back(net::Socket socket);
  [[noreturn]] void throw_error_reply(const Bytes& payload, const char* op);

  const std::string host_;
  const uint16_t port_;
  const std::string token_;
  const Milliseconds timeout_;
  std::mutex mutex_;  // guards idle_
  std::vector<net::Socket> idle_;
};

net::Socket TcpStore::Client::take_idle() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (idle_.empty()) return net::Socket();
  net::Socket socket = std::move(idle_.back());
  idle_.pop_back();
  return socket;
}

void TcpStore::Client::give_back(net::Socket socket) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (idle_.size() < kMaxIdleConnections) idle_.push_back(std::move(socket));
}

net::Socket TcpStore::Client::open(Deadline deadline) {
  net::Socket socket;
  try {
    socket = net::Socket::connect(host_, port_, deadline);
  } catch (const TimeoutError& e) {
    throw StoreError("the store at " + where() + " is unreachable: " + e.what());
  } catch (const net::NetError& e) {
    throw StoreError("cannot connect to the store at " + where() + ": " + e.what());
  }
  handshake(socket, after(timeout_));
  return socket;
}

void TcpStore::Client::handshake(net::Socket& socket, Deadline deadline) {
  Request hello;
  hello.op = Op::kHello;
  hello.token = token_;
  try {
    write_frame(socket, Op::kHello, encode_request(hello), deadline);
  } catch (const net::NetError&) {
    // The server may already have refused us (connection limit) and closed: its reason is
    // waiting to be read below, and is a better error than "broken pipe".
  }
  Frame reply;
  try {
    reply = read_frame(socket, kMaxPayloadBytes, deadline, timeout_);
  } catch (const net::NetError& e) {
    throw StoreError("the store at " + where() + " closed the connection during the handshake (" +
                     e.what() + "); is it a cohort store server, and is it still running?");
  } catch (const TimeoutError& e) {
    throw StoreError("the store at " + where() + " did not answer the handshake (" + e.what() +
                     "); is it a cohort store server?");
  } catch (const ProtocolError& e) {
    throw ProtocolError("the server at " + where() + " does not speak the store protocol: " +
                        e.what());
  }
  if (reply.op == Op::kOk) return;
  if (reply.op != Op::kError) {
    throw ProtocolError("the store at " + where() + " answered HELLO with a " +
                        op_name(reply.op) + " frame");
  }
  const auto [code, message] = decode_error(reply.payload);
  if (code != ErrorCode::kBadToken) throw_error_reply(reply.payload, "HELLO");
  if (token_.empty()) {
    throw StoreError("the store at " + where() + " refused this process: it presented no job "
                     "token, but the server requires one (set COHORT_JOB_TOKEN to the job's "
                     "token)");
  }
  throw StoreError("the store at " + where() + " refused this process's job token: "
                   "COHORT_JOB_TOKEN (or TcpStoreOptions::token) differs from the server's");
}

Bytes TcpStore::Client::call(const Request& request, Deadline reply_deadline) {
  const Bytes payload = encode_request(request);  // limits are checked before any I/O
  net::Socket socket = take_idle();
  if (!socket.valid()) socket = open(after(std::min(timeout_, kReconnectWindow)));
  const char* op = op_name(request.op);
  Frame reply;
  try {
    write_frame(socket, request.op, payload, after(timeout_));
    reply = read_frame(socket, kMaxPayloadBytes, reply_deadline, timeout_);
  } catch (const net::NetError& e) {
    throw StoreError("lost the connection to the store at " + where() + " during " + op + " (" +
                     e.what() + "): the store server closed or died");
  } catch (const TimeoutError& e) {
    throw TimeoutError("the store at " + where() + " did not answer " + op + " in time (" +
                       e.what() + ")");
  } catch (const ProtocolError& e) {
    throw ProtocolError("the store at " + where() + " sent a malformed reply to " + op + ": " +
                        e.what());
  }
  if (reply.op == Op::kOk) {
    give_back(std::move(socket));
    return std::move(reply.payload);
  }
  if (reply.op != Op::kError) {
    throw ProtocolError("the store at " + where() + " answered " + op + " with a " +
                        op_name(reply.op) + " frame");
  }
  const ErrorCode code = decode_error(reply.payload).first;
  // After a timeout or a refused argument the connection is still in step; keep it.
  if (code == ErrorCode::kTimeout || code == ErrorCode::kInvalidArgument) {
    give_back(std::move(socket));
  }
  throw_error_reply(reply.payload, op);
}

void TcpStore::Client::throw_error_reply(const Bytes& payload, const char* op) {
  const auto [code, message] = decode_error(payload);
  const std::string text = "store at " + where() + ": " + message;
  switch (code) {
    case ErrorCode::kTimeout: throw TimeoutError(text);
    case ErrorCode::kInvalidArgument: throw InvalidArgument(text);
    case ErrorCode::kProtocol:
      throw ProtocolError("the store at " + where() + " rejected our " + op + " frame: " + message);
    case ErrorCode::kClosed: throw StoreError("the store at " + where() + " closed: " + message);
    case ErrorCode::kBusy:
      throw StoreError("the store at " + where() + " refused the connection: " + message);
    case ErrorCode::kBadToken:
    case ErrorCode::kInternal: break;
  }
  throw StoreError(text);
}

// ---------------------------------------------------------------- TcpStore

namespace {
Request make_request(Op op, const std::string& key) {
  Request r;
  r.op = op;
  r.key = key;
  return r;
}
}  // namespace

TcpStore::TcpStore(TcpStoreOptions options) : options_(std::move(options)) {
  if (options_.token.empty()) options_.token = env_string("COHORT_JOB_TOKEN").value_or("");
  if (options_.token.size() > kMaxTokenBytes) {
    throw ConfigError("the job token is " + std::to_string(options_.token.size()) +
                      " bytes long; the store accepts at most " + std::to_string(kMaxTokenBytes));
  }
  timeout_ = options_.timeout;
  if (options_.is_server) {
    TcpStoreServerOptions server;
    server.bind_host = options_.bind_host;
    server.port = options_.port;
    server.token = options_.token;
    server_ = std::make_unique<TcpStoreServer>(std::move(server));
  }
  client_ = std::make_unique<Client>(options_.host, port(), options_.token, options_.timeout);
}

TcpStore::~TcpStore() = default;

uint16_t TcpStore::port() const { return server_ ? server_->port() : options_.port; }
const std::string& TcpStore::host() const { return options_.host; }

void TcpStore::set(const std::string& key, const Bytes& value) {
  check_value(value);  // before copying up to 64 MiB into the request
  Request r = make_request(Op::kSet, key);
  r.value = value;
  client_->call(r, client_->default_deadline());
}

Bytes TcpStore::get(const std::string& key, Milliseconds timeout) {
  Request r = make_request(Op::kGet, key);
  r.timeout_ms = clamp_timeout_ms(timeout);
  const Bytes reply = client_->call(r, after(Milliseconds(r.timeout_ms) + kReplyGrace));
  Reader reader(reply, "GET reply from the store at " + client_->where());
  Bytes value = reader.bytes("value", kMaxValueBytes);
  reader.finish();
  return value;
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  Request r = make_request(Op::kAdd, key);
  r.delta = delta;
  const Bytes reply = client_->call(r, client_->default_deadline());
  Reader reader(reply, "ADD reply from the store at " + client_->where());
  const int64_t value = reader.i64("value");
  reader.finish();
  return value;
}

Bytes TcpStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  check_value(expected);
  check_value(desired);
  Request r = make_request(Op::kCompareSet, key);
  r.expected = expected;
  r.value = desired;
  const Bytes reply = client_->call(r, client_->default_deadline());
  Reader reader(reply, "COMPARE_SET reply from the store at " + client_->where());
  Bytes value = reader.bytes("value", kMaxValueBytes);
  reader.finish();
  return value;
}

void TcpStore::wait(const std::vector<std::string>& keys, Milliseconds timeout) {
  Request r = make_request(Op::kWait, "");
  r.keys = keys;
  r.timeout_ms = clamp_timeout_ms(timeout);
  const Bytes reply = client_->call(r, after(Milliseconds(r.timeout_ms) + kReplyGrace));
  Reader(reply, "WAIT reply from the store at " + client_->where()).finish();
}

bool TcpStore::delete_key(const std::string& key) {
  const Bytes reply =
      client_->call(make_request(Op::kDeleteKey, key), client_->default_deadline());
  Reader reader(reply, "DELETE_KEY reply from the store at " + client_->where());
  const uint8_t existed = reader.u8("existed");
  reader.finish();
  return existed != 0;
}

int64_t TcpStore::num_keys() {
  const Bytes reply = client_->call(make_request(Op::kNumKeys, ""), client_->default_deadline());
  Reader reader(reply, "NUM_KEYS reply from the store at " + client_->where());
  const int64_t count = reader.i64("count");
  reader.finish();
  return count;
}

}  // namespace cohort
