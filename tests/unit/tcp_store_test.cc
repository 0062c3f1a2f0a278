// Tests of the TCP store: its wire format, Store semantics over the network, the job token,
// hostile peers (random bytes, truncated and oversized frames, stalls) thrown at the server
// from raw sockets, shutdown while clients are blocked, and concurrency through one client.
// Servers bind 127.0.0.1 on a free port and every timeout is short, so each test takes well
// under a few seconds; a hang fails at a deadline instead of blocking.
#include "cohort/comm/tcp_store.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cohort/comm/prefix_store.h"
#include "cohort/core/error.h"
#include "net/socket.h"
#include "rendezvous/tcp_store_protocol.h"
#include "store_semantics.h"
#include "support/log_capture.h"
#include "support/sync.h"

namespace cohort {
namespace {

using namespace std::chrono_literals;
using store_wire::ErrorCode;
using store_wire::Op;

constexpr char kToken[] = "test-token-7f3a";
constexpr Milliseconds kClientTimeout{3000};

// Keeps COHORT_JOB_TOKEN out of the tests that do not set it on purpose, and restores it.
class TcpStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* old = std::getenv("COHORT_JOB_TOKEN")) saved_token_ = old;
    unsetenv("COHORT_JOB_TOKEN");
  }
  void TearDown() override {
    if (saved_token_.empty()) {
      unsetenv("COHORT_JOB_TOKEN");
    } else {
      setenv("COHORT_JOB_TOKEN", saved_token_.c_str(), 1);
    }
  }

 private:
  std::string saved_token_;
};

TcpStoreServerOptions server_options(const std::string& token = kToken) {
  TcpStoreServerOptions o;
  o.bind_host = "127.0.0.1";
  o.token = token;
  o.frame_timeout = 500ms;
  return o;
}

TcpStoreOptions client_options(uint16_t port, const std::string& token = kToken) {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.token = token;
  o.timeout = kClientTimeout;
  return o;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Asserts that a good client can still use the server.
void expect_serves(uint16_t port) {
  TcpStore store(client_options(port));
  store.set("alive", "yes");
  EXPECT_EQ(to_string(store.get("alive", 1000ms)), "yes");
}

// ---------------------------------------------------------------- raw frames for hostile peers

Bytes frame(Op op, const Bytes& payload) {
  Bytes out(store_wire::kHeaderBytes + payload.size());
  store_wire::encode_header(op, static_cast<uint32_t>(payload.size()), out.data());
  std::copy(payload.begin(), payload.end(), out.begin() + store_wire::kHeaderBytes);
  return out;
}

Bytes request_frame(const store_wire::Request& r) {
  return frame(r.op, store_wire::encode_request(r));
}

Bytes hello_frame(const std::string& token) {
  store_wire::Request r;
  r.op = Op::kHello;
  r.token = token;
  return request_frame(r);
}

Bytes set_frame(const std::string& key, const std::string& value) {
  store_wire::Request r;
  r.op = Op::kSet;
  r.key = key;
  r.value = to_bytes(value);
  return request_frame(r);
}

net::Socket raw_connect(uint16_t port) {
  return net::Socket::connect("127.0.0.1", port, Deadline::after(2000ms));
}

// Sends `data` (ignoring a server that hangs up early), half-closes, then reads until the server
// closes the connection. Returns what the server sent; fails the test if it does not close
// within `limit` (the server must never hang on a peer).
Bytes send_and_drain(net::Socket& socket, const Bytes& data, bool half_close = true,
                     Milliseconds limit = 3000ms) {
  try {
    socket.write_all(data.data(), data.size(), Deadline::after(limit));
  } catch (const Error&) {
  }
  if (half_close) ::shutdown(socket.fd(), SHUT_WR);
  Bytes received;
  const Deadline deadline = Deadline::after(limit);
  uint8_t buffer[4096];
  for (;;) {
    if (!socket.wait_readable(deadline)) {
      ADD_FAILURE() << "the server kept the connection open for " << limit.count() << " ms";
      return received;
    }
    const ssize_t n = ::recv(socket.fd(), buffer, sizeof buffer, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return received;
    if (n > 0) received.insert(received.end(), buffer, buffer + n);
  }
}

// Decodes the first frame the server sent, which must be an ERROR; returns its code and text.
std::pair<ErrorCode, std::string> first_error(const Bytes& received) {
  if (received.size() < store_wire::kHeaderBytes) return {ErrorCode::kInternal, "<no reply>"};
  const auto h = store_wire::decode_header(received.data(), store_wire::kMaxPayloadBytes);
  EXPECT_EQ(h.op, Op::kError);
  const Bytes payload(received.begin() + store_wire::kHeaderBytes,
                      received.begin() + store_wire::kHeaderBytes + h.length);
  return store_wire::decode_error(payload);
}

// ---------------------------------------------------------------- wire format

TEST(TcpStoreProtocol, RequestsRoundTrip) {
  store_wire::Request r;
  r.op = Op::kCompareSet;
  r.key = std::string("k\0ey", 4);
  r.expected = to_bytes("old");
  r.value = Bytes{0, 1, 2, 255};
  const auto back = store_wire::decode_request(r.op, store_wire::encode_request(r));
  EXPECT_EQ(back.key, r.key);
  EXPECT_EQ(back.expected, r.expected);
  EXPECT_EQ(back.value, r.value);

  store_wire::Request w;
  w.op = Op::kWait;
  w.keys = {"a", "", "ccc"};
  w.timeout_ms = 1234;
  const auto wb = store_wire::decode_request(w.op, store_wire::encode_request(w));
  EXPECT_EQ(wb.keys, w.keys);
  EXPECT_EQ(wb.timeout_ms, 1234u);

  store_wire::Request a;
  a.op = Op::kAdd;
  a.key = "n";
  a.delta = -5;
  EXPECT_EQ(store_wire::decode_request(a.op, store_wire::encode_request(a)).delta, -5);
}

TEST(TcpStoreProtocol, IntegersAreLittleEndian) {
  uint8_t h[store_wire::kHeaderBytes];
  store_wire::encode_header(Op::kSet, 0x01020304, h);
  EXPECT_EQ(Bytes(h, h + 10), (Bytes{'C', 'H', 'S', 'T', 1, 2, 4, 3, 2, 1}));
}

TEST(TcpStoreProtocol, BadHeadersAreRejectedWithTheReason) {
  uint8_t h[store_wire::kHeaderBytes];
  auto message = [&](uint32_t limit) {
    try {
      store_wire::decode_header(h, limit);
    } catch (const ProtocolError& e) {
      return std::string(e.what());
    }
    return std::string("<accepted>");
  };
  store_wire::encode_header(Op::kGet, 100, h);
  EXPECT_EQ(message(100), "<accepted>");
  EXPECT_TRUE(contains(message(99), "over the limit")) << message(99);
  h[0] = 'X';
  EXPECT_TRUE(contains(message(100), "magic")) << message(100);
  store_wire::encode_header(Op::kGet, 0, h);
  h[4] = 9;
  EXPECT_TRUE(contains(message(100), "version 9")) << message(100);
  store_wire::encode_header(Op::kGet, 0, h);
  h[5] = 0x42;
  EXPECT_TRUE(contains(message(100), "unknown frame op")) << message(100);
}

TEST(TcpStoreProtocol, BadPayloadsAreRejectedWithTheReason) {
  auto message = [](Op op, const Bytes& payload) {
    try {
      store_wire::decode_request(op, payload);
    } catch (const ProtocolError& e) {
      return std::string(e.what());
    }
    return std::string("<accepted>");
  };
  // A key length pointing past the end of the payload.
  EXPECT_TRUE(contains(message(Op::kGet, {5, 0, 0, 0, 'a'}), "truncated key"));
  // A key over the 4 KiB limit is refused from its length alone.
  EXPECT_TRUE(contains(message(Op::kDeleteKey, {0x01, 0x10, 0, 0}), "limit"));
  // A WAIT claiming more keys than allowed, and one whose count lies.
  EXPECT_TRUE(contains(message(Op::kWait, {0xff, 0xff, 0xff, 0xff}), "limit"));
  EXPECT_TRUE(contains(message(Op::kWait, {3, 0, 0, 0, 0, 0, 0, 0}), "truncated"));
  // Bytes left after the last field.
  EXPECT_TRUE(contains(message(Op::kNumKeys, {0}), "unexpected bytes"));
  EXPECT_TRUE(contains(message(Op::kOk, {}), "expected a request"));
}

TEST(TcpStoreProtocol, TokensCompare) {
  EXPECT_TRUE(store_wire::tokens_equal("abc", "abc"));
  EXPECT_FALSE(store_wire::tokens_equal("abc", "abd"));
  EXPECT_FALSE(store_wire::tokens_equal("abc", "ab"));
  EXPECT_FALSE(store_wire::tokens_equal("abc", "abcd"));
  EXPECT_FALSE(store_wire::tokens_equal("abc", ""));
  EXPECT_TRUE(store_wire::tokens_equal("", ""));
}

// ---------------------------------------------------------------- Store semantics

// The shared Store contract (store_test.cc), run against a server and client in one object,
// and through a PrefixStore over it.
std::shared_ptr<Store> make_tcp() {
  TcpStoreOptions o = client_options(0);
  o.is_server = true;
  o.bind_host = "127.0.0.1";
  o.timeout = 10'000ms;
  return std::make_shared<TcpStore>(o);
}

std::shared_ptr<Store> make_prefix_over_tcp() {
  return std::make_shared<PrefixStore>("job", make_tcp());
}

using testing::StoreSemantics;
INSTANTIATE_TEST_SUITE_P(Tcp, StoreSemantics,
                         ::testing::Values(testing::StoreFactory{"tcp", make_tcp},
                                           testing::StoreFactory{"prefix_over_tcp",
                                                                 make_prefix_over_tcp}),
                         testing::StoreFactory::name_of);

TEST_F(TcpStoreTest, OperationsBehaveLikeTheStoreInterface) {
  TcpStoreOptions o = client_options(0);
  o.is_server = true;
  o.bind_host = "127.0.0.1";
  TcpStore store(o);
  ASSERT_NE(store.port(), 0);

  store.set("a", "1");
  EXPECT_EQ(store.get_string("a", 1000ms), "1");
  store.set("a", Bytes{});  // empty values are values
  EXPECT_EQ(store.get("a", 1000ms), Bytes{});
  const std::string binary_key("\0\xff/key", 6);
  store.set(binary_key, Bytes{0, 1, 2});
  EXPECT_EQ(store.get(binary_key, 1000ms), (Bytes{0, 1, 2}));

  EXPECT_EQ(store.add("n", 5), 5);
  EXPECT_EQ(store.add("n", -7), -2);
  EXPECT_THROW(store.add(binary_key, 1), InvalidArgument);

  EXPECT_EQ(to_string(store.compare_set("c", {}, to_bytes("x"))), "x");
  EXPECT_EQ(to_string(store.compare_set("c", to_bytes("nope"), to_bytes("y"))), "x");
  EXPECT_EQ(to_string(store.compare_set("c", to_bytes("x"), to_bytes("y"))), "y");

  store.wait({"a", "n", "c"}, 1000ms);
  EXPECT_EQ(store.num_keys(), 4);
  EXPECT_TRUE(store.delete_key("c"));
  EXPECT_FALSE(store.delete_key("c"));
  EXPECT_EQ(store.num_keys(), 3);

  Bytes big(3 << 20);  // over 1 MiB: the payload is read in growing chunks
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 7);
  store.set("big", big);
  EXPECT_EQ(store.get("big", 2000ms), big);
}

TEST_F(TcpStoreTest, ServerSideTimeoutsNameTheKeys) {
  TcpStoreServer server(server_options());
  TcpStore store(client_options(server.port()));
  try {
    store.get("missing-key", 50ms);
    FAIL() << "get of a missing key returned";
  } catch (const TimeoutError& e) {
    EXPECT_TRUE(contains(e.what(), "missing-key")) << e.what();
  }
  store.set("here", "1");
  try {
    store.wait({"here", "absent-1", "absent-2"}, 50ms);
    FAIL() << "wait on missing keys returned";
  } catch (const TimeoutError& e) {
    EXPECT_TRUE(contains(e.what(), "absent-1") && contains(e.what(), "absent-2")) << e.what();
    EXPECT_FALSE(contains(e.what(), "'here'")) << e.what();
  }
  // The connection that carried the timeouts is still good.
  EXPECT_EQ(store.get_string("here", 1000ms), "1");
}

TEST_F(TcpStoreTest, LimitsAreCheckedBeforeSending) {
  TcpStoreServer server(server_options());
  TcpStore store(client_options(server.port()));
  EXPECT_THROW(store.set(std::string(store_wire::kMaxKeyBytes + 1, 'k'), "v"), InvalidArgument);
  store.set(std::string(store_wire::kMaxKeyBytes, 'k'), "v");
  EXPECT_THROW(store.set("k", Bytes(store_wire::kMaxValueBytes + 1)), InvalidArgument);
  EXPECT_THROW(store.wait(std::vector<std::string>(store_wire::kMaxWaitKeys + 1, "k"), 10ms),
               InvalidArgument);
  expect_serves(server.port());
}

TEST_F(TcpStoreTest, ManyClientThreadsShareOneServer) {
  TcpStoreServer server(server_options());
  constexpr int kThreads = 4;
  constexpr int kAdds = 50;
  std::vector<std::future<void>> done;
  for (int t = 0; t < kThreads; ++t) {
    done.push_back(std::async(std::launch::async, [&, t] {
      TcpStore store(client_options(server.port()));
      for (int i = 0; i < kAdds; ++i) store.add("counter", 1);
      store.set("ready/" + std::to_string(t), std::to_string(t));
      std::vector<std::string> all;
      for (int u = 0; u < kThreads; ++u) all.push_back("ready/" + std::to_string(u));
      store.wait(all, 2000ms);
      for (int u = 0; u < kThreads; ++u) {
        EXPECT_EQ(store.get_string("ready/" + std::to_string(u), 1000ms), std::to_string(u));
      }
      // Exactly one thread wins the election.
      const Bytes winner = store.compare_set("leader", {}, to_bytes(std::to_string(t)));
      EXPECT_FALSE(winner.empty());
    }));
  }
  for (auto& f : done) {
    ASSERT_EQ(f.wait_for(10s), std::future_status::ready);
    f.get();
  }
  TcpStore store(client_options(server.port()));
  EXPECT_EQ(store.add("counter", 0), kThreads * kAdds);
  EXPECT_EQ(store.num_keys(), kThreads + 2);
}

TEST_F(TcpStoreTest, BlockingGetDoesNotDelaySetOnTheSameStore) {
  TcpStoreServer server(server_options());
  TcpStore store(client_options(server.port()));
  testing::BackgroundCall<std::string> getter([&] { return store.get_string("late", 2500ms); });
  ASSERT_TRUE(getter.wait_until_blocked(5s));  // waiting for the server's reply
  store.set("late", "value");                  // must not queue behind the get
  ASSERT_EQ(getter.result().wait_for(5s), std::future_status::ready);
  EXPECT_EQ(getter.result().get(), "value");
}

// ---------------------------------------------------------------- connecting

uint16_t free_port() {
  net::Listener probe = net::Listener::bind("127.0.0.1", 0);
  return probe.port();
}

TEST_F(TcpStoreTest, ClientStartedBeforeTheServerConnectsWhenItAppears) {
  const uint16_t port = free_port();
  testing::BackgroundCall<void> client([&] {
    TcpStoreOptions o = client_options(port);
    o.timeout = 5000ms;
    TcpStore store(o);  // retries while nothing listens
    store.set("early", "bird");
  });
  // Blocked: between two connection attempts (nothing listens, so nothing else can block it).
  ASSERT_TRUE(client.wait_until_blocked(5s));
  TcpStoreServerOptions so = server_options();
  so.port = port;
  TcpStoreServer server(so);
  ASSERT_EQ(client.result().wait_for(5s), std::future_status::ready);
  client.result().get();
  TcpStore check(client_options(port));
  EXPECT_EQ(check.get_string("early", 1000ms), "bird");
}

TEST_F(TcpStoreTest, NoServerIsAStoreErrorNamingTheAddress) {
  const uint16_t port = free_port();
  TcpStoreOptions o = client_options(port);
  o.timeout = 300ms;
  try {
    TcpStore store(o);
    FAIL() << "connected to a port nobody listens on";
  } catch (const StoreError& e) {
    EXPECT_TRUE(contains(e.what(), "unreachable")) << e.what();
    EXPECT_TRUE(contains(e.what(), "127.0.0.1:" + std::to_string(port))) << e.what();
  }
}

TEST_F(TcpStoreTest, PortInUseIsAConfigErrorNamingThePort) {
  TcpStoreServer first(server_options());
  try {
    TcpStoreServerOptions o = server_options();
    o.port = first.port();
    TcpStoreServer second(o);
    FAIL() << "two servers listen on port " << first.port();
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), std::to_string(first.port()))) << e.what();
    EXPECT_TRUE(contains(e.what(), "in use")) << e.what();
  }
  expect_serves(first.port());
}

TEST_F(TcpStoreTest, WorksOverIpv6Loopback) {
  TcpStoreServerOptions so = server_options();
  so.bind_host = "::1";
  std::unique_ptr<TcpStoreServer> server;
  try {
    server = std::make_unique<TcpStoreServer>(so);
  } catch (const ConfigError& e) {
    GTEST_SKIP() << "no IPv6 loopback on this machine: " << e.what();
  }
  TcpStoreOptions o = client_options(server->port());
  o.host = "::1";
  TcpStore store(o);
  store.set("v6", "yes");
  EXPECT_EQ(store.get_string("v6", 1000ms), "yes");
  EXPECT_EQ(store.host(), "::1");
}

TEST_F(TcpStoreTest, ConnectionsBeyondTheLimitAreRefused) {
  TcpStoreServerOptions so = server_options();
  so.max_connections = 2;
  TcpStoreServer server(so);
  auto first = std::make_unique<TcpStore>(client_options(server.port()));
  TcpStore second(client_options(server.port()));
  try {
    TcpStore third(client_options(server.port()));
    FAIL() << "a third connection was accepted over a limit of 2";
  } catch (const StoreError& e) {
    EXPECT_TRUE(contains(e.what(), "limit of 2 connections")) << e.what();
  }
  // A freed slot is usable again once the server notices the close.
  first.reset();
  const Deadline deadline = Deadline::after(3000ms);
  for (;;) {
    try {
      TcpStore again(client_options(server.port()));
      again.set("slot", "free");
      break;
    } catch (const StoreError&) {
      ASSERT_FALSE(deadline.expired()) << "the freed connection slot was never reused";
      std::this_thread::sleep_for(20ms);
    }
  }
}

// Note [Abandoned waits]: a client that asks for a long WAIT and closes its socket must not keep
// its thread and connection slot. With a limit of one connection, a second client is served
// only once the server has let the abandoned wait go (it asked for an hour).
TEST_F(TcpStoreTest, AWaitWhoseClientHungUpFreesItsConnection) {
  TcpStoreServerOptions so = server_options();
  so.max_connections = 1;
  TcpStoreServer server(so);
  {
    net::Socket abandoning = raw_connect(server.port());
    const Bytes hello = hello_frame(kToken);
    abandoning.write_all(hello.data(), hello.size(), Deadline::after(2000ms));
    uint8_t ok[store_wire::kHeaderBytes];
    abandoning.read_all(ok, sizeof ok, Deadline::after(2000ms));
    ASSERT_EQ(store_wire::decode_header(ok, 0).op, Op::kOk);
    store_wire::Request wait;
    wait.op = Op::kWait;
    wait.keys = {"never-set"};
    wait.timeout_ms = 3600 * 1000;
    const Bytes request = request_frame(wait);
    abandoning.write_all(request.data(), request.size(), Deadline::after(2000ms));
  }  // closed: the server reads the WAIT (it precedes the end of stream) and blocks on it
  const Deadline deadline = Deadline::after(5000ms);
  for (;;) {
    try {
      TcpStore next(client_options(server.port()));
      next.set("slot", "free");
      break;
    } catch (const StoreError& e) {
      ASSERT_FALSE(deadline.expired())
          << "the abandoned wait still holds the only slot: " << e.what();
      std::this_thread::sleep_for(20ms);
    }
  }
}

// ---------------------------------------------------------------- one loop, parked requests

void send_frame(net::Socket& socket, const Bytes& data) {
  socket.write_all(data.data(), data.size(), Deadline::after(2000ms));
}

store_wire::Frame read_reply(net::Socket& socket) {
  return store_wire::read_frame(socket, store_wire::kMaxPayloadBytes, Deadline::after(5000ms),
                                5000ms);
}

// A raw connection that has presented the token: a client without a thread of its own.
net::Socket authenticated(uint16_t port) {
  net::Socket socket = raw_connect(port);
  send_frame(socket, hello_frame(kToken));
  EXPECT_EQ(read_reply(socket).op, Op::kOk);
  return socket;
}

Bytes get_frame(const std::string& key, Milliseconds timeout) {
  store_wire::Request r;
  r.op = Op::kGet;
  r.key = key;
  r.timeout_ms = store_wire::clamp_timeout_ms(timeout);
  return request_frame(r);
}

std::string value_of(const store_wire::Frame& reply) {
  EXPECT_EQ(reply.op, Op::kOk) << (reply.op == Op::kError
                                       ? store_wire::decode_error(reply.payload).second
                                       : std::string(store_wire::op_name(reply.op)));
  if (reply.op != Op::kOk) return "<not OK>";
  store_wire::Reader r(reply.payload, "GET reply");
  return to_string(r.bytes("value", store_wire::kMaxValueBytes));
}

// The server's threads do not grow with its clients or with their waiting requests. The
// clients are raw sockets of this test's thread, so every thread the process gains is the
// server's; a first server, made and used before the count, lets the runtime start the threads
// it starts once (TSan's) outside it.
TEST_F(TcpStoreTest, SixtyFourBlockedGetsLeaveTheServerAtOneThread) {
  {
    TcpStoreServer warm_up(server_options());
    expect_serves(warm_up.port());
  }
  const int before = testing::thread_count();
  TcpStoreServer server(server_options());
  std::vector<net::Socket> clients;
  for (int i = 0; i < 64; ++i) {
    clients.push_back(authenticated(server.port()));
    send_frame(clients.back(), get_frame("released", 60'000ms));
  }
  const int server_threads = testing::thread_count() - before;
  TcpStore setter(client_options(server.port()));
  setter.set("released", "yes");
  for (auto& c : clients) EXPECT_EQ(value_of(read_reply(c)), "yes");
  EXPECT_EQ(server_threads, 1);
}

TEST_F(TcpStoreTest, AParkedGetIsAnsweredByAnotherClientsSet) {
  TcpStoreServer server(server_options());
  TcpStore waiter(client_options(server.port()));
  TcpStore setter(client_options(server.port()));
  testing::BackgroundCall<std::string> get([&] { return waiter.get_string("k", 20'000ms); });
  ASSERT_TRUE(get.wait_until_blocked(5s));  // waiting for the server's reply
  setter.set("k", "from the other client");
  ASSERT_EQ(get.result().wait_for(10s), std::future_status::ready);
  EXPECT_EQ(get.result().get(), "from the other client");
}

// A WAIT is answered only once every key it names exists at the same time: a key set and
// deleted again before the last one is set keeps it parked. ADD and COMPARE_SET wake it too.
TEST_F(TcpStoreTest, AParkedWaitIsAnsweredWhenAllItsKeysExist) {
  TcpStoreServer server(server_options());
  net::Socket waiter = authenticated(server.port());
  store_wire::Request wait;
  wait.op = Op::kWait;
  wait.keys = {"a", "b", "a"};
  wait.timeout_ms = 60'000;
  send_frame(waiter, request_frame(wait));
  TcpStore other(client_options(server.port()));
  other.add("a", 1);
  other.delete_key("a");
  other.compare_set("b", {}, to_bytes("x"));
  other.num_keys();  // answered after everything above, so the server has handled it all
  pollfd entry{waiter.fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&entry, 1, 0), 0) << "the WAIT was answered while 'a' did not exist";
  other.set("a", "again");
  const store_wire::Frame reply = read_reply(waiter);
  EXPECT_EQ(reply.op, Op::kOk);
  EXPECT_TRUE(reply.payload.empty());
}

// Two GETs parked on one key: the one with the short deadline gets the store's timeout error,
// the other stays parked and is answered by the SET that follows.
TEST_F(TcpStoreTest, AParkedGetTimesOutWithTheStoresTimeoutError) {
  TcpStoreServer server(server_options());
  net::Socket patient = authenticated(server.port());
  send_frame(patient, get_frame("k", 60'000ms));
  net::Socket hasty = authenticated(server.port());
  send_frame(hasty, get_frame("k", 50ms));
  const store_wire::Frame timed_out = read_reply(hasty);
  ASSERT_EQ(timed_out.op, Op::kError);
  const auto [code, message] = store_wire::decode_error(timed_out.payload);
  EXPECT_EQ(code, ErrorCode::kTimeout);
  EXPECT_EQ(message, "store get('k') timed out after 50 ms: the key was never set");
  TcpStore setter(client_options(server.port()));
  setter.set("k", "v");
  EXPECT_EQ(value_of(read_reply(patient)), "v");
  // The connection whose GET timed out is still in step.
  send_frame(hasty, get_frame("k", 1000ms));
  EXPECT_EQ(value_of(read_reply(hasty)), "v");
}

// Note [Abandoned waits]: the only connection slot is freed as soon as the parked client hangs
// up; the next client is admitted at its first attempt (the server handles the hang-up before
// it accepts a connection made after it).
TEST_F(TcpStoreTest, AClientThatHangsUpWhileParkedFreesItsSlot) {
  TcpStoreServerOptions so = server_options();
  so.max_connections = 1;
  TcpStoreServer server(so);
  {
    net::Socket abandoning = authenticated(server.port());
    send_frame(abandoning, get_frame("never-set", 3'600'000ms));
  }
  TcpStore next(client_options(server.port()));
  next.set("slot", "free");
  EXPECT_EQ(next.get_string("slot", 1000ms), "free");
}

TEST_F(TcpStoreTest, APeerThatNeverSendsHelloIsDroppedAfterTheFrameTimeout) {
  testing::LogCapture log(LogLevel::kWarn);
  TcpStoreServer server(server_options());  // frame_timeout 500 ms
  net::Socket silent = raw_connect(server.port());
  ASSERT_TRUE(silent.wait_readable(Deadline::after(10'000ms)))
      << "the server kept a silent peer for 10 s";
  uint8_t byte = 0;
  EXPECT_EQ(::recv(silent.fd(), &byte, 1, 0), 0) << "the server sent something instead of closing";
  const auto lines = log.lines_containing(LogLevel::kWarn, "sent no HELLO within 500 ms");
  EXPECT_EQ(lines.size(), 1u);
}

// A client that does not read its (large) reply holds up nobody: the reply waits in the
// server, and the loop serves the others. The frame timeout (120 s) is far beyond the other
// client's (20 s), so a server that waited on the slow reader would fail the second client;
// 20 s leaves room for a sanitizer build on a loaded machine, where copying the value takes
// seconds. The slow end's receive buffer is capped at 64 KiB (else it may grow to
// net.ipv4.tcp_rmem's maximum, 32 MiB here), so 8 MiB is more than both ends can hold.
TEST_F(TcpStoreTest, AClientThatDoesNotReadItsReplyDelaysNobody) {
  TcpStoreServerOptions so = server_options();
  so.frame_timeout = 120'000ms;
  TcpStoreServer server(so);
  TcpStoreOptions patient = client_options(server.port());
  patient.timeout = 20'000ms;
  Bytes big(8 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 13);
  TcpStore(patient).set("big", big);
  net::Socket slow = authenticated(server.port());
  const int small_buffer = 64 << 10;
  ASSERT_EQ(::setsockopt(slow.fd(), SOL_SOCKET, SO_RCVBUF, &small_buffer, sizeof small_buffer), 0);
  send_frame(slow, get_frame("big", 1000ms));  // and do not read the reply yet
  TcpStore other(patient);
  other.set("small", "value");
  EXPECT_EQ(other.get_string("small", 1000ms), "value");
  const store_wire::Frame reply = read_reply(slow);
  ASSERT_EQ(reply.op, Op::kOk);
  store_wire::Reader r(reply.payload, "GET reply");
  EXPECT_EQ(r.bytes("value", store_wire::kMaxValueBytes), big);
}

// ---------------------------------------------------------------- the job token

TEST_F(TcpStoreTest, WrongTokenIsRefusedAndTheServerKeepsServing) {
  TcpStoreServer server(server_options());
  try {
    TcpStore intruder(client_options(server.port(), "not-the-token"));
    FAIL() << "a wrong token was accepted";
  } catch (const StoreError& e) {
    EXPECT_TRUE(contains(e.what(), "refused")) << e.what();
    EXPECT_TRUE(contains(e.what(), "COHORT_JOB_TOKEN")) << e.what();
    EXPECT_TRUE(contains(e.what(), "differs")) << e.what();
  }
  expect_serves(server.port());
}

TEST_F(TcpStoreTest, MissingTokenIsRefusedAndTheServerKeepsServing) {
  TcpStoreServer server(server_options());
  try {
    TcpStore intruder(client_options(server.port(), ""));
    FAIL() << "a client without a token was accepted";
  } catch (const StoreError& e) {
    EXPECT_TRUE(contains(e.what(), "refused")) << e.what();
    EXPECT_TRUE(contains(e.what(), "no job token")) << e.what();
  }
  expect_serves(server.port());
}

TEST_F(TcpStoreTest, EmptyTokenOptionReadsTheEnvironment) {
  setenv("COHORT_JOB_TOKEN", kToken, 1);
  TcpStoreOptions o = client_options(0, "");
  o.is_server = true;
  o.bind_host = "127.0.0.1";
  TcpStore store(o);  // server and client both take the token from the environment
  store.set("k", "v");
  EXPECT_NO_THROW(expect_serves(store.port()));  // kToken given explicitly
  EXPECT_THROW({ TcpStore other(client_options(store.port(), "other")); }, StoreError);
}

// ---------------------------------------------------------------- hostile peers

TEST_F(TcpStoreTest, FuzzRandomBytesNeverCrashOrHangTheServer) {
  TcpStoreServer server(server_options());
  std::mt19937 rng(20240611);
  const Bytes valid = hello_frame(kToken);
  for (int round = 0; round < 120; ++round) {
    Bytes junk(rng() % 64);
    for (auto& b : junk) b = static_cast<uint8_t>(rng());
    // Some rounds start like a real frame so that the parser gets past the magic.
    if (round % 3 == 1 && junk.size() >= 6)
      std::copy(valid.begin(), valid.begin() + 6, junk.begin());
    if (round % 3 == 2) junk.insert(junk.begin(), valid.begin(), valid.begin() + 5);
    net::Socket s = raw_connect(server.port());
    send_and_drain(s, junk);
  }
  expect_serves(server.port());
}

TEST_F(TcpStoreTest, FuzzTruncatedFramesAreDropped) {
  TcpStoreServer server(server_options());
  const Bytes hello = hello_frame(kToken);
  for (size_t cut = 0; cut < hello.size(); ++cut) {
    net::Socket s = raw_connect(server.port());
    send_and_drain(s, Bytes(hello.begin(), hello.begin() + static_cast<std::ptrdiff_t>(cut)));
  }
  const Bytes set = set_frame("key", "value");
  for (size_t cut = 0; cut < set.size(); ++cut) {
    Bytes data = hello;
    data.insert(data.end(), set.begin(), set.begin() + static_cast<std::ptrdiff_t>(cut));
    net::Socket s = raw_connect(server.port());
    send_and_drain(s, data);
  }
  TcpStore store(client_options(server.port()));
  EXPECT_EQ(store.num_keys(), 0);  // no truncated SET was applied
  expect_serves(server.port());
}

TEST_F(TcpStoreTest, HeaderAnnouncingFourGigabytesIsRejectedAtOnce) {
  TcpStoreServer server(server_options());
  uint8_t header[store_wire::kHeaderBytes];
  store_wire::encode_header(Op::kSet, 0xffffffffu, header);
  const Bytes huge(header, header + store_wire::kHeaderBytes);
  {
    // Before the token: even a HELLO-sized limit applies. No half-close: the server must
    // answer on its own, without waiting for the 4 GiB.
    net::Socket s = raw_connect(server.port());
    const auto [code, message] = first_error(send_and_drain(s, huge, false));
    EXPECT_EQ(code, ErrorCode::kProtocol);
    EXPECT_TRUE(contains(message, "4294967295") && contains(message, "limit")) << message;
  }
  {
    net::Socket s = raw_connect(server.port());
    Bytes data = hello_frame(kToken);
    data.insert(data.end(), huge.begin(), huge.end());
    const Bytes received = send_and_drain(s, data, false);
    ASSERT_GE(received.size(), store_wire::kHeaderBytes);
    // The first reply is HELLO's OK (empty payload); the error follows it.
    const auto [code, message] = first_error(Bytes(received.begin() + 10, received.end()));
    EXPECT_EQ(code, ErrorCode::kProtocol);
    EXPECT_TRUE(contains(message, "limit")) << message;
  }
  expect_serves(server.port());
}

TEST_F(TcpStoreTest, FuzzGarbageAfterAValidHello) {
  TcpStoreServer server(server_options());
  std::mt19937 rng(7);
  for (int round = 0; round < 60; ++round) {
    Bytes data = hello_frame(kToken);
    if (round % 2 == 0) {
      // A well-formed header with a random op and a payload of random bytes.
      Bytes payload(rng() % 48);
      for (auto& b : payload) b = static_cast<uint8_t>(rng());
      const Bytes f = frame(static_cast<Op>(1 + rng() % 9), payload);
      data.insert(data.end(), f.begin(), f.end());
    } else {
      // A valid SET with a few bytes flipped.
      Bytes f = set_frame("k" + std::to_string(round), "some value");
      for (int flips = 0; flips < 3; ++flips)
        f[rng() % f.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
      data.insert(data.end(), f.begin(), f.end());
    }
    net::Socket s = raw_connect(server.port());
    send_and_drain(s, data);
  }
  expect_serves(server.port());
}

TEST_F(TcpStoreTest, StalledPeersAreDropped) {
  TcpStoreServer server(server_options());  // frame_timeout 500 ms
  {
    net::Socket silent = raw_connect(server.port());  // never says HELLO
    send_and_drain(silent, {}, false);
  }
  {
    // A header that promises 100 bytes, then nothing.
    net::Socket s = raw_connect(server.port());
    Bytes data = hello_frame(kToken);
    uint8_t header[store_wire::kHeaderBytes];
    store_wire::encode_header(Op::kSet, 100, header);
    data.insert(data.end(), header, header + store_wire::kHeaderBytes);
    send_and_drain(s, data, false);
  }
  expect_serves(server.port());
}

// ---------------------------------------------------------------- shutdown

TEST_F(TcpStoreTest, ServerDestroyedWhileAClientIsBlockedGivesStoreErrorPromptly) {
  auto server = std::make_unique<TcpStoreServer>(server_options());
  TcpStoreOptions o = client_options(server->port());
  o.timeout = 1000ms;  // bounds the reconnect attempt below
  TcpStore store(o);
  testing::BackgroundCall<std::string> blocked([&] {
    try {
      store.get("never-set", 20'000ms);
    } catch (const StoreError& e) {
      return std::string(e.what());
    } catch (const std::exception& e) {
      return std::string("wrong exception: ") + e.what();
    }
    return std::string("get returned");
  });
  ASSERT_TRUE(blocked.wait_until_blocked(5s));
  server.reset();
  // Far sooner than the get's 20 s deadline.
  ASSERT_EQ(blocked.result().wait_for(5s), std::future_status::ready);
  const std::string message = blocked.result().get();
  EXPECT_TRUE(contains(message, "closed") || contains(message, "lost")) << message;
  EXPECT_TRUE(contains(message, "127.0.0.1:")) << message;
  // Later calls fail too, naming the store, instead of hanging.
  try {
    store.set("k", "v");
    FAIL() << "set succeeded without a server";
  } catch (const StoreError& e) {
    EXPECT_TRUE(contains(e.what(), "127.0.0.1:")) << e.what();
  }
}

// Prompt: it does not wait for the half-open connection's frame timeout (30 s here).
TEST_F(TcpStoreTest, DestroyingAServerWithIdleAndHalfOpenConnectionsIsPrompt) {
  TcpStoreServerOptions so = server_options();
  so.frame_timeout = 30'000ms;
  auto server = std::make_unique<TcpStoreServer>(so);
  TcpStore idle(client_options(server->port()));
  net::Socket half = raw_connect(server->port());  // mid-handshake
  half.write_all(hello_frame(kToken).data(), 4, Deadline::after(1000ms));
  testing::BackgroundCall<void> destroy([&] { server.reset(); });
  EXPECT_EQ(destroy.result().wait_for(10s), std::future_status::ready)
      << "the server's destructor waits for a stalled connection";
}

}  // namespace
}  // namespace cohort
