#include "net/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

namespace cohort::net {

namespace {

[[noreturn]] void throw_errno(const std::string& what, int error_number) {
  throw NetError(what + ": " + std::strerror(error_number), error_number);
}

void make_non_blocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) throw_errno("fcntl", errno);
}

void tune(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  // Larger kernel buffers keep big messages streaming while the receiver reduces.
  const int buffer = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer, sizeof buffer);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer, sizeof buffer);
}

// Polls one fd for `events` until the deadline; false on timeout.
bool poll_until(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const auto left = deadline.remaining().count();
    const int rc = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1 << 30)));
    if (rc > 0) return true;
    if (rc == 0) {
      if (deadline.expired()) return false;
      continue;
    }
    if (errno != EINTR) throw_errno("poll", errno);
  }
}

// Owns a getaddrinfo() result, so that an exception between lookup and use cannot leak it.
struct AddrInfoFree {
  void operator()(addrinfo* ai) const noexcept { freeaddrinfo(ai); }
};
using AddrInfoList = std::unique_ptr<addrinfo, AddrInfoFree>;

bool is_transient_connect_error(int e) {
  return e == ECONNREFUSED || e == ECONNRESET || e == ETIMEDOUT || e == ENETUNREACH ||
         e == EHOSTUNREACH || e == EAGAIN || e == EINPROGRESS || e == ECONNABORTED;
}

std::string format_address(const sockaddr* addr) {
  char host[NI_MAXHOST];
  char port[NI_MAXSERV];
  const socklen_t len = addr->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  if (getnameinfo(addr, len, host, sizeof host, port, sizeof port,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "?";
  }
  return Endpoint{host, static_cast<uint16_t>(std::atoi(port))}.to_string();
}

// Note [Self-connect]: retrying connect() to a local port nobody listens on can "succeed" by
// connecting the socket to itself (TCP simultaneous open), when the kernel happens to pick the
// destination port as the ephemeral source port. Ports chosen with port 0 come from that same
// ephemeral range, so a client that starts before its server could end up talking to itself.
// Such a connection is treated as refused: it is closed and the attempt retried.
bool is_self_connection(int fd) {
  sockaddr_storage local{};
  sockaddr_storage peer{};
  socklen_t local_len = sizeof local;
  socklen_t peer_len = sizeof peer;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
      getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) {
    return false;
  }
  return local_len == peer_len && std::memcmp(&local, &peer, local_len) == 0;
}

// One connection attempt to one resolved address; returns the errno on failure.
int try_connect(const addrinfo* ai, Deadline deadline, int* out_fd) {
  const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
  if (fd < 0) return errno;
  Socket guard(fd);
  make_non_blocking(fd);
  if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) return errno;
    if (!poll_until(fd, POLLOUT, deadline)) return ETIMEDOUT;
    int error = 0;
    socklen_t len = sizeof error;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
    if (error != 0) return error;
  }
  if (is_self_connection(fd)) return ECONNREFUSED;
  tune(fd);
  *out_fd = guard.release();
  return 0;
}

}  // namespace

// ---------------------------------------------------------------- Endpoint

std::string Endpoint::to_string() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

Endpoint Endpoint::parse(const std::string& text) {
  Endpoint out;
  std::string port_text;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      throw ConfigError("bad address '" + text + "': expected [ipv6]:port");
    }
    out.host = text.substr(1, close - 1);
    port_text = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string::npos)
      throw ConfigError("bad address '" + text + "': expected host:port");
    out.host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
  }
  char* end = nullptr;
  const long port = std::strtol(port_text.c_str(), &end, 10);
  if (port_text.empty() || *end != '\0' || port < 0 || port > 65535) {
    throw ConfigError("bad port in address '" + text + "'");
  }
  out.port = static_cast<uint16_t>(port);
  return out;
}

// ---------------------------------------------------------------- Socket

Socket::Socket(int fd) : fd_(fd) {}
Socket::~Socket() {
  close();
}
Socket::Socket(Socket&& other) noexcept : fd_(other.fd_) {
  other.fd_ = -1;
}
Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

void Socket::close() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Socket::shutdown() noexcept {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

void Socket::shutdown_read() noexcept {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RD);
}

Socket Socket::connect(const std::string& host, uint16_t port, Deadline deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  const std::string where = Endpoint{host, port}.to_string();
  auto backoff = Milliseconds(10);
  int last_error = 0;
  for (;;) {
    addrinfo* found = nullptr;
    const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
    if (rc == 0) {
      const AddrInfoList list(found);
      // A name can resolve to several addresses (::1 and 127.0.0.1 for localhost). Retry while
      // any of them failed transiently: a hard error on one family (say, no IPv6 route) must
      // not hide a server that is about to come up on the other.
      bool any_transient = false;
      for (addrinfo* ai = list.get(); ai != nullptr; ai = ai->ai_next) {
        int fd = -1;
        const int error = try_connect(ai, deadline, &fd);
        if (error == 0) return Socket(fd);
        any_transient = any_transient || is_transient_connect_error(error);
        last_error = error;
      }
      if (!any_transient) throw_errno("cannot connect to " + where, last_error);
    } else if (rc != EAI_AGAIN) {
      throw NetError("cannot resolve host '" + host + "': " + gai_strerror(rc), 0);
    }
    if (deadline.expired()) {
      throw TimeoutError("could not connect to " + where + " before the deadline (last error: " +
                         (last_error ? std::strerror(last_error) : "name lookup failed") +
                         "); is the server running and reachable?");
    }
    std::this_thread::sleep_for(std::min(backoff, deadline.remaining()));
    backoff = std::min(backoff * 2, Milliseconds(500));
  }
}

void Socket::write_all(const void* data, size_t bytes, Deadline deadline) {
  iovec part{const_cast<void*>(data), bytes};
  write_all(&part, 1, deadline);
}

void Socket::write_all(iovec* parts, int count, Deadline deadline) {
  while (!write_available(parts, count)) {
    if (!poll_until(fd_, POLLOUT, deadline)) throw TimeoutError("send timed out");
  }
}

bool Socket::write_available(iovec*& parts, int& count) {
  while (count > 0) {
    if (parts->iov_len == 0) {
      ++parts;
      --count;
      continue;
    }
    msghdr msg{};
    msg.msg_iov = parts;
    msg.msg_iovlen = static_cast<size_t>(count);
    const ssize_t n = ::sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
      throw_errno("send failed", errno);
    }
    size_t done = static_cast<size_t>(n);
    while (count > 0 && done >= parts->iov_len) {
      done -= parts->iov_len;
      ++parts;
      --count;
    }
    if (count > 0) {
      parts->iov_base = static_cast<uint8_t*>(parts->iov_base) + done;
      parts->iov_len -= done;
    }
  }
  return true;
}

void Socket::read_all(void* data, size_t bytes, Deadline deadline) {
  auto* p = static_cast<uint8_t*>(data);
  while (bytes > 0) {
    const ssize_t n = ::recv(fd_, p, bytes, 0);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) throw NetError("connection closed by the other side", 0);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!poll_until(fd_, POLLIN, deadline)) throw TimeoutError("receive timed out");
      continue;
    }
    throw_errno("receive failed", errno);
  }
}

size_t Socket::read_available(void* data, size_t bytes) {
  for (;;) {
    const ssize_t n = ::recv(fd_, data, bytes, MSG_DONTWAIT);
    if (n > 0) return static_cast<size_t>(n);
    if (n == 0) {
      if (bytes == 0) return 0;
      throw NetError("connection closed by the other side", 0);
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    throw_errno("receive failed", errno);
  }
}

void Socket::enable_keepalive(int idle_s, int interval_s, int probes) {
  const int one = 1;
  setsockopt(fd_, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  setsockopt(fd_, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof idle_s);
  setsockopt(fd_, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof interval_s);
  setsockopt(fd_, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
}

bool Socket::wait_readable(Deadline deadline) {
  return poll_until(fd_, POLLIN, deadline);
}

std::string Socket::peer_name() const {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (getpeername(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "?";
  return format_address(reinterpret_cast<sockaddr*>(&addr));
}

// ---------------------------------------------------------------- Listener

namespace {

// Binds and listens on the first usable address of `list`. Returns an invalid Socket and sets
// *error to the last errno when none works.
Socket bind_first(const addrinfo* list, int backlog, int* error) {
  for (const addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      *error = errno;
      continue;
    }
    Socket sock(fd);
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ai->ai_family == AF_INET6) {
      const int zero = 0;  // dual stack: accept IPv4 clients too
      setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    }
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, backlog) != 0) {
      *error = errno;
      continue;
    }
    make_non_blocking(fd);
    return sock;
  }
  return Socket();
}

AddrInfoList resolve_passive(const char* node, uint16_t port, int family, int* rc) {
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  *rc = getaddrinfo(node, std::to_string(port).c_str(), &hints, &found);
  return AddrInfoList(*rc == 0 ? found : nullptr);
}

uint16_t bound_port(int fd) {
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  return ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
}

}  // namespace

Listener Listener::bind(const std::string& host, uint16_t port, int backlog) {
  const char* node = host.empty() ? nullptr : host.c_str();
  int rc = 0;
  int last_error = 0;
  AddrInfoList found = resolve_passive(node, port, host.empty() ? AF_INET6 : AF_UNSPEC, &rc);
  Socket sock = rc == 0 ? bind_first(found.get(), backlog, &last_error) : Socket();
  // No IPv6 on this machine: "::" resolves but socket() fails, or the lookup itself fails.
  // Fall back to IPv4, unless the port was simply taken (IPv4 would say the same).
  if (!sock.valid() && host.empty() && last_error != EADDRINUSE) {
    found = resolve_passive(node, port, AF_INET, &rc);
    if (rc == 0) sock = bind_first(found.get(), backlog, &last_error);
  }
  if (rc != 0) throw ConfigError("cannot listen on '" + host + "': " + gai_strerror(rc));
  if (sock.valid()) {
    Listener out;
    out.port_ = bound_port(sock.fd());
    out.socket_ = std::move(sock);
    return out;
  }
  const std::string where = Endpoint{host.empty() ? "*" : host, port}.to_string();
  if (last_error == EADDRINUSE) {
    throw ConfigError("port " + std::to_string(port) + " is already in use (" + where +
                      "): pick another port or stop the process that holds it");
  }
  throw ConfigError("cannot listen on " + where + ": " + std::strerror(last_error));
}

Socket Listener::accept(Deadline deadline) {
  for (;;) {
    if (!poll_until(socket_.fd(), POLLIN, deadline)) return Socket();
    const int fd = ::accept4(socket_.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      tune(fd);
      return Socket(fd);
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED)
      continue;
    if (errno == EINVAL) throw NetError("listener was shut down", errno);
    throw_errno("accept failed", errno);
  }
}

std::string host_name() {
  char name[256] = {0};
  if (gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

}  // namespace cohort::net
