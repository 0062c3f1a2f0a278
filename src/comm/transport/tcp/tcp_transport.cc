// TcpTransport: the full mesh of connections of one group, and its setup.
//
// Setup (every rank): listen on a free port; publish "tcp/addr/<rank>" = host:port in the
// store; rank 0 publishes a fresh random secret "tcp/secret". Rank r connects to every rank
// below it and accepts one connection from every rank above it; each connection opens with a
// Hello carrying rank, world size and the secret, and anything else is refused and logged.
// Then the listener closes: nothing can connect to a running group.
//
// Note [Concurrent handshakes]
// The listener is open to anyone who can reach it (port scanners, health checks, a stale rank
// of another job), so a connection that sends nothing must not hold up the ranks behind it.
// accept_from_higher polls the listener and every connection whose Hello is incomplete at
// once, reads what each has sent without blocking, and drops a connection that has not sent
// its whole Hello within kHandshakeTimeout of being accepted (or when more than
// kMaxPendingHandshakes are pending: the oldest goes). A silent connection costs a descriptor
// for at most kHandshakeTimeout, never the group's time.
#include "cohort/comm/tcp_transport.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <mutex>

#include "cohort/core/check.h"
#include "cohort/core/logging.h"
#include "transport/tcp/tcp_connection.h"
#include "transport/wire_error.h"

namespace cohort {

class TcpTransport final : public Transport, private tcp::FailureSink {
 public:
  TcpTransport(int rank, int size, TcpTransportOptions options)
      : rank_(rank), size_(size), options_(std::move(options)), connections_(size) {}

  ~TcpTransport() override {
    // Tell peers we leave on purpose, so that they do not report us as dead.
    for (auto& c : connections_) {
      if (c) c->send_control(tcp::kGoodbye, "", Deadline::after(Milliseconds(1000)));
    }
    // Every connection off the loop first: a handler still running may report a failure to
    // any connection.
    for (auto& c : connections_) {
      if (c) c->stop();
    }
    connections_.clear();
  }

  void adopt(int peer, net::Socket socket) {
    tcp::FailureSink& sink = *this;
    // Two loops for every connection of every group of this process, one reading and one
    // writing (Note [Event loop]).
    if (!in_loop_) in_loop_ = net::EventLoop::shared(net::EventLoop::kIncoming);
    if (!out_loop_) out_loop_ = net::EventLoop::shared(net::EventLoop::kOutgoing);
    connections_[peer] = std::make_unique<tcp::Connection>(std::move(socket), rank_, peer, sink,
                                                           in_loop_, out_loop_);
  }
  void start() {
    for (auto& c : connections_) {
      if (c) c->start();
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "tcp"; }

  std::unique_ptr<Request> isend(int peer, Tag tag, const void* data, size_t bytes,
                                 Deadline deadline) override {
    return connection(peer).send(tag, data, bytes, deadline);
  }

  std::unique_ptr<Request> irecv(int peer, Tag tag, void* data, size_t bytes,
                                 Deadline deadline) override {
    return connection(peer).post_recv(tag, data, bytes, deadline);
  }

  std::unique_ptr<Request> irecv_reduce(int peer, Tag tag, void* accumulate, size_t count,
                                        DType dtype, ReduceOp op, Deadline deadline) override {
    return connection(peer).post_recv_reduce(tag, accumulate, count, dtype, op, deadline);
  }

  // Tells every peer about the first failure this rank saw, even when a connection noticed it
  // before the group called abort(): peers must learn the culprit from us, not from our exit.
  void abort(std::exception_ptr error) noexcept override {
    record_failure(error);
    std::exception_ptr first;
    {
      std::lock_guard<std::mutex> lock(failure_mutex_);
      if (abort_sent_) return;
      abort_sent_ = true;
      first = failure_;
    }
    try {
      const std::string payload = WireError::from(first).encode();
      for (auto& c : connections_) {
        if (c) c->send_control(tcp::kAbort, payload, Deadline::after(Milliseconds(1000)));
      }
    } catch (...) {
      // Best effort: peers still notice when our connections close.
    }
    fail_all(first);
  }

  std::unique_ptr<Transport> split(const SplitSpec& spec) override {
    return connect_tcp_transport(spec.store, spec.new_rank(rank_), spec.new_size(), options_);
  }

 private:
  tcp::Connection& connection(int peer) {
    COHORT_CHECK(peer >= 0 && peer < size_ && peer != rank_, "invalid peer ", peer, " for rank ",
                 rank_, " of ", size_);
    return *connections_[peer];
  }

  void on_connection_failed(int peer, std::exception_ptr error) override {
    if (record_failure(error)) fail_all(error);
  }

  // True for the first failure only: later ones are consequences of it.
  bool record_failure(std::exception_ptr error) {
    std::lock_guard<std::mutex> lock(failure_mutex_);
    if (failure_) return false;
    failure_ = error;
    return true;
  }

  void fail_all(std::exception_ptr error) {
    for (auto& c : connections_) {
      if (c) c->fail(error);
    }
  }

  const int rank_;
  const int size_;
  const TcpTransportOptions options_;
  std::shared_ptr<net::EventLoop> in_loop_;
  std::shared_ptr<net::EventLoop> out_loop_;
  std::vector<std::unique_ptr<tcp::Connection>> connections_;
  std::mutex failure_mutex_;
  std::exception_ptr failure_;
  bool abort_sent_ = false;
};

namespace {

std::string address_key(int rank) {
  return "tcp/addr/" + std::to_string(rank);
}

tcp::Secret agree_on_secret(Store& store, int rank, Deadline deadline) {
  tcp::Secret secret{};
  if (rank == 0) {
    secret = tcp::random_secret();
    store.set("tcp/secret", Bytes(secret.begin(), secret.end()));
    return secret;
  }
  const Bytes value = store.get("tcp/secret", deadline.remaining());
  COHORT_CHECK_EQ(value.size(), tcp::kSecretBytes, "malformed group secret in the store");
  std::copy(value.begin(), value.end(), secret.begin());
  return secret;
}

// The host name if it resolves here (then other hosts can probably resolve it too), else the
// loopback address (single-host jobs still work).
std::string default_advertised_host() {
  const std::string name = net::host_name();
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(name.c_str(), nullptr, &hints, &found) == 0) {
    freeaddrinfo(found);
    return name;
  }
  return "127.0.0.1";
}

void connect_to_lower(TcpTransport& transport, Store& store, int rank, int size, int peer,
                      const tcp::Secret& secret, Deadline deadline) {
  const auto endpoint =
      net::Endpoint::parse(store.get_string(address_key(peer), deadline.remaining()));
  net::Socket socket = net::Socket::connect(endpoint.host, endpoint.port, deadline);
  tcp::Hello hello{tcp::kHelloMagic, tcp::kProtocolVersion, 0, size, rank, {}};
  std::copy(secret.begin(), secret.end(), hello.secret);
  socket.write_all(&hello, sizeof hello, deadline);
  uint8_t accepted = 0;
  try {
    socket.read_all(&accepted, 1, deadline);
  } catch (const net::NetError&) {
    accepted = 0;
  }
  if (accepted != 1) {
    throw PeerError(peer, "rank " + std::to_string(peer) + " at " + endpoint.to_string() +
                              " refused the connection of rank " + std::to_string(rank) +
                              " (another job or a stale address in the store?)");
  }
  transport.adopt(peer, std::move(socket));
}

// Note [Concurrent handshakes].
constexpr Milliseconds kHandshakeTimeout{2000};
constexpr size_t kMaxPendingHandshakes = 64;

// An accepted connection whose Hello has not fully arrived.
struct PendingHello {
  net::Socket socket;
  std::string who;
  Deadline deadline = Deadline::never();
  tcp::Hello hello{};
  size_t received = 0;
};

// What is wrong with a complete Hello, or "" when it is one of ours.
std::string hello_problem(const tcp::Hello& hello, int rank, int size, const tcp::Secret& secret,
                          const std::vector<bool>& connected) {
  if (hello.magic != tcp::kHelloMagic || hello.version != tcp::kProtocolVersion) {
    return "it does not speak cohort's protocol";
  }
  if (!tcp::secrets_equal(hello.secret, secret.data()))
    return "it presented the wrong group secret";
  if (hello.world_size != size) {
    return "it believes the world size is " + std::to_string(hello.world_size);
  }
  if (hello.rank <= rank || hello.rank >= size || connected[hello.rank]) {
    return "it claims rank " + std::to_string(hello.rank) + ", which is not expected here";
  }
  return "";
}

// Reads what `p` has sent without blocking. True when it is finished with: Hello complete, or
// the connection closed or failed (logged).
bool read_hello(PendingHello& p, int rank) {
  auto* bytes = reinterpret_cast<uint8_t*>(&p.hello);
  while (p.received < sizeof p.hello) {
    const ssize_t n = ::recv(p.socket.fd(), bytes + p.received, sizeof p.hello - p.received, 0);
    if (n > 0) {
      p.received += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return false;
    } else {
      COHORT_LOG(kWarn, "rank ", rank, ": dropped a connection from ", p.who,
                 " that closed before sending a whole hello");
      p.socket.close();
      return true;
    }
  }
  return true;
}

std::string missing_ranks(const std::vector<bool>& connected, int rank, int size) {
  std::string missing;
  for (int r = rank + 1; r < size; ++r) {
    if (!connected[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  }
  return missing;
}

// Waits until the listener or a pending connection has something, or the earliest deadline.
void poll_handshakes(net::Listener& listener, const std::deque<PendingHello>& pending,
                     Deadline deadline) {
  std::vector<pollfd> fds{{listener.fd(), POLLIN, 0}};
  for (const PendingHello& p : pending) {
    fds.push_back({p.socket.fd(), POLLIN, 0});
    deadline = deadline.min(p.deadline);
  }
  const auto wait = deadline.remaining() + Milliseconds(1);  // rounded up: no busy loop
  if (::poll(fds.data(), fds.size(), static_cast<int>(wait.count())) < 0 && errno != EINTR) {
    throw net::NetError(std::string("poll failed: ") + std::strerror(errno), errno);
  }
}

// Note [Concurrent handshakes]: serves every Hello that has arrived; returns how many ranks
// it connected.
int serve_hellos(TcpTransport& transport, std::deque<PendingHello>& pending, int rank, int size,
                 const tcp::Secret& secret, std::vector<bool>& connected) {
  int joined = 0;
  for (auto it = pending.begin(); it != pending.end();) {
    PendingHello& p = *it;
    if (!read_hello(p, rank)) {
      if (!p.deadline.expired()) {
        ++it;
        continue;
      }
      COHORT_LOG(kWarn, "rank ", rank, ": dropped a connection from ", p.who,
                 " that sent no hello within ", kHandshakeTimeout.count(), " ms");
    } else if (p.socket.valid()) {
      const std::string problem = hello_problem(p.hello, rank, size, secret, connected);
      if (!problem.empty()) {
        COHORT_LOG(kWarn, "rank ", rank, ": refused a connection from ", p.who, ": ", problem);
      } else {
        const uint8_t accepted = 1;
        p.socket.write_all(&accepted, 1, Deadline::after(kHandshakeTimeout));
        connected[p.hello.rank] = true;
        ++joined;
        transport.adopt(p.hello.rank, std::move(p.socket));
      }
    }
    it = pending.erase(it);
  }
  return joined;
}

// Takes every connection waiting on the listener into `pending`, the oldest dropped past the cap.
void accept_waiting(net::Listener& listener, std::deque<PendingHello>& pending, int rank) {
  for (;;) {
    net::Socket socket = listener.accept(Deadline::after(Milliseconds(0)));
    if (!socket.valid()) return;
    if (pending.size() >= kMaxPendingHandshakes) {
      COHORT_LOG(kWarn, "rank ", rank, ": dropped a connection from ", pending.front().who,
                 ": more than ", kMaxPendingHandshakes, " connections sent no hello yet");
      pending.pop_front();
    }
    PendingHello p;
    p.who = socket.peer_name();
    p.socket = std::move(socket);
    p.deadline = Deadline::after(kHandshakeTimeout);
    pending.push_back(std::move(p));
  }
}

void accept_from_higher(TcpTransport& transport, net::Listener& listener, int rank, int size,
                        const tcp::Secret& secret, Deadline deadline) {
  std::vector<bool> connected(size, false);
  std::deque<PendingHello> pending;
  int remaining = size - 1 - rank;
  while (remaining > 0) {
    poll_handshakes(listener, pending, deadline);
    accept_waiting(listener, pending, rank);
    remaining -= serve_hellos(transport, pending, rank, size, secret, connected);
    if (remaining > 0 && deadline.expired()) {
      throw TimeoutError("rank " + std::to_string(rank) + " waited in vain for ranks " +
                         missing_ranks(connected, rank, size) +
                         " to connect: they never started, or cannot reach this host");
    }
  }
}

}  // namespace

std::unique_ptr<Transport> connect_tcp_transport(std::shared_ptr<Store> store, int rank, int size,
                                                 TcpTransportOptions options) {
  COHORT_CHECK(store != nullptr, "a TCP transport needs a store");
  COHORT_CHECK(size >= 1, "world size must be at least 1, got ", size);
  COHORT_CHECK(rank >= 0 && rank < size, "rank ", rank, " is outside [0, ", size, ")");
  const Deadline deadline = Deadline::after(options.timeout);
  auto transport = std::make_unique<TcpTransport>(rank, size, options);
  if (size == 1) return transport;

  net::Listener listener = net::Listener::bind(options.bind_host, 0);
  const std::string host = options.host.empty() ? default_advertised_host() : options.host;
  store->set(address_key(rank), net::Endpoint{host, listener.port()}.to_string());
  const tcp::Secret secret = agree_on_secret(*store, rank, deadline);

  try {
    for (int peer = 0; peer < rank; ++peer) {
      connect_to_lower(*transport, *store, rank, size, peer, secret, deadline);
    }
    accept_from_higher(*transport, listener, rank, size, secret, deadline);
  } catch (const net::NetError& e) {
    throw PeerError(-1, std::string("building the TCP connections of rank ") +
                            std::to_string(rank) + " failed: " + e.what());
  }
  listener.close();
  transport->start();
  COHORT_LOG(kDebug, "rank ", rank, ": TCP mesh of ", size, " ranks ready");
  return transport;
}

}  // namespace cohort
