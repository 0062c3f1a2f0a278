// A Store served over TCP by one process of the job (usually rank 0, or the launcher) and used
// by every rank. Connections present the job secret; frames are validated and bounded.
//
//   TcpStoreOptions o;  o.host = "10.0.0.1";  o.port = 29500;  o.is_server = (rank == 0);
//   auto store = std::make_shared<cohort::TcpStore>(o);
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cohort/comm/store.h"

namespace cohort {

struct TcpStoreOptions {
  std::string host = "127.0.0.1";  // where the server is (clients connect here)
  uint16_t port = 0;               // server: 0 picks a free port (read it back with port())
  bool is_server = false;          // this process hosts the store
  std::string bind_host;           // server: interface to listen on ("" = all, IPv4 and IPv6)
  // Secret every connection must present. Empty: COHORT_JOB_TOKEN (may be empty too, then
  // any process that can reach the port may use the store).
  std::string token;
  Milliseconds timeout = Store::kDefaultTimeout;  // default for get/wait and for connecting
};

// Everything a standalone server needs (TcpStore fills it from TcpStoreOptions).
struct TcpStoreServerOptions {
  std::string bind_host;  // interface to listen on ("" = all, IPv4 and IPv6)
  uint16_t port = 0;      // 0 picks a free port
  // Empty: COHORT_JOB_TOKEN; empty too: every client that can reach the port is served.
  std::string token;
  // A new connection must present its token, and every frame must arrive whole (its header
  // and payload, plus 1 s per MiB of payload), within this time; a peer that stalls longer is
  // dropped so that it cannot hold a connection slot forever.
  Milliseconds frame_timeout{30'000};
  // Connections beyond this are refused with an error reply and a logged warning.
  int max_connections = 1024;
};

class TcpStoreServer;

class TcpStore : public Store {
 public:
  using Store::get;
  using Store::set;
  using Store::wait;

  // Starts the server first when options.is_server, then connects to it as a client.
  // Throws ConfigError when the server cannot listen (port in use), StoreError when the store
  // cannot be reached within options.timeout or refuses the job token.
  explicit TcpStore(TcpStoreOptions options);
  ~TcpStore() override;
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  void wait(const std::vector<std::string>& keys, Milliseconds timeout) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;

  // The port the server listens on (useful with port 0).
  uint16_t port() const;
  const std::string& host() const;

  class Client;

 private:
  TcpStoreOptions options_;
  std::unique_ptr<TcpStoreServer> server_;
  std::unique_ptr<Client> client_;
};

// The server on its own, for processes that host the store without using it (a launcher).
class TcpStoreServer {
 public:
  // Listens on bind_host:port and serves until destroyed. Limits: keys up to 4 KiB, values up
  // to 64 MiB, 1024 connections; anything beyond is refused with a clear error.
  TcpStoreServer(const std::string& bind_host, uint16_t port, std::string token);
  explicit TcpStoreServer(TcpStoreServerOptions options);
  // Stops accepting, wakes blocked get/wait requests (their clients see StoreError), closes
  // every connection and joins every thread.
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;
  uint16_t port() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort
