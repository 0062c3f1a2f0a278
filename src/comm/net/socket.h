// Thin RAII wrappers over POSIX TCP sockets with deadlines, shared by the TCP store and the
// TCP transport. Every socket is non-blocking; blocking helpers poll() until their deadline,
// so no call here can hang forever.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <string>

#include "cohort/core/deadline.h"
#include "cohort/core/error.h"

namespace cohort::net {

// The connection failed or was closed. Callers turn it into StoreError or PeerError with the
// context they know (which store, which rank).
class NetError : public Error {
 public:
  NetError(const std::string& what, int error_number) : Error(what), errno_(error_number) {}
  int error_number() const { return errno_; }

 private:
  int errno_;
};

struct Endpoint {
  std::string host;
  uint16_t port = 0;
  // "host:port", with brackets around IPv6 literals: "[::1]:29500".
  std::string to_string() const;
  // Parses "host:port", "[v6]:port"; throws ConfigError with the text on failure.
  static Endpoint parse(const std::string& text);
};

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd);
  ~Socket();
  Socket(Socket&& other) noexcept;
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  // Connects to host:port (IPv4 or IPv6, by name or literal) before `deadline`, retrying
  // transient failures (refused, unreachable: the server may not be up yet) with backoff.
  static Socket connect(const std::string& host, uint16_t port, Deadline deadline);

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  // Gives up ownership of the descriptor without closing it.
  int release() noexcept {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

  void write_all(const void* data, size_t bytes, Deadline deadline);
  // Writes every byte of the iovecs (modified in place as they are consumed).
  void write_all(struct iovec* parts, int count, Deadline deadline);
  // Writes what the socket takes without blocking; advances parts/count past what was written
  // and returns true when nothing is left.
  bool write_available(struct iovec*& parts, int& count);
  void read_all(void* data, size_t bytes, Deadline deadline);
  // Reads up to `bytes` that have arrived, without blocking; 0 when none has. End of stream or
  // a failed connection throws NetError.
  size_t read_available(void* data, size_t bytes);
  // Waits until the socket is readable (or closed) or the deadline passes; false on timeout.
  bool wait_readable(Deadline deadline);

  // Wakes any thread blocked on this socket (its reads then see end-of-stream).
  void shutdown() noexcept;
  // Ends reading only: a thread blocked in a read wakes up at end of stream, while a reply
  // being written still goes out.
  void shutdown_read() noexcept;
  void close() noexcept;
  // "ip:port" of the remote end, for logs.
  std::string peer_name() const;
  // Probes an idle connection so that a peer host that vanished without closing it (power
  // loss, network cut) is noticed: after `idle` without traffic, a probe every `interval`,
  // and the connection fails after `probes` unanswered ones.
  void enable_keepalive(int idle_s, int interval_s, int probes);

 private:
  int fd_ = -1;
};

class Listener {
 public:
  Listener() = default;
  // Listens on host:port (host "" = every interface, IPv6 dual-stack when available; port 0 =
  // any free port). A port in use is a ConfigError that says so and what to do.
  static Listener bind(const std::string& host, uint16_t port, int backlog = 128);

  uint16_t port() const { return port_; }
  bool valid() const { return socket_.valid(); }
  int fd() const { return socket_.fd(); }  // to poll() it beside other sockets
  // Waits for a connection until `deadline`; returns an invalid Socket on timeout.
  Socket accept(Deadline deadline);
  void shutdown() noexcept { socket_.shutdown(); }
  void close() noexcept { socket_.close(); }

 private:
  Socket socket_;
  uint16_t port_ = 0;
};

// This machine's host name, for addresses other hosts can reach.
std::string host_name();

}  // namespace cohort::net
