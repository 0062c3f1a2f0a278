// Group::create: the default way to build a group across processes, over TCP.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cohort/comm/group.h"
#include "cohort/comm/memory_store.h"
#include "cohort/comm/prefix_store.h"
#include "cohort/comm/tcp_transport.h"
#include "cohort/core/check.h"
#include "group/group_impl.h"

namespace cohort {

namespace {
// An IP literal names one interface: listen there only.
bool is_ip_literal(const std::string& host) {
  unsigned char buffer[sizeof(in6_addr)];
  return inet_pton(AF_INET, host.c_str(), buffer) == 1 ||
         inet_pton(AF_INET6, host.c_str(), buffer) == 1;
}

bool is_loopback(const sockaddr* address) {
  if (address->sa_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(address);
    return (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
  }
  const auto* v6 = reinterpret_cast<const sockaddr_in6*>(address);
  return address->sa_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr);
}

// The numeric address `name` resolves to here, when it is one this machine can listen on and
// not a loopback alias ("" otherwise).
std::string local_address_of(const std::string& name) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(name.c_str(), nullptr, &hints, &found) != 0) return "";
  std::string address;
  if (!is_loopback(found->ai_addr)) {
    const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    char text[INET6_ADDRSTRLEN] = {};
    if (fd >= 0 && ::bind(fd, found->ai_addr, found->ai_addrlen) == 0 &&
        getnameinfo(found->ai_addr, found->ai_addrlen, text, sizeof text, nullptr, 0,
                    NI_NUMERICHOST) == 0) {
      address = text;
    }
    if (fd >= 0) ::close(fd);
  }
  freeaddrinfo(found);
  return address;
}

// Where rank listeners listen: the interface of the address peers use (Note [Concurrent
// handshakes] in tcp_transport.cc says why no more than that). A host name is only trusted to
// name an interface when it resolves to one of this machine's non-loopback addresses: a name
// may resolve here to a loopback alias (Debian's 127.0.1.1) that other hosts reach by another
// address, or to an address this machine does not own (NAT); then every interface.
std::string listen_host(const std::string& host) {
  if (host.empty()) return "";
  return is_ip_literal(host) ? host : local_address_of(host);
}
}  // namespace

std::shared_ptr<Group> Group::create(std::shared_ptr<Store> store, int rank, int size,
                                     GroupOptions options) {
  COHORT_CHECK(store != nullptr, "Group::create needs a store shared by all ranks");
  COHORT_CHECK(size >= 1, "world size must be at least 1, got ", size);
  COHORT_CHECK(rank >= 0 && rank < size, "rank ", rank, " is outside [0, ", size,
               "): check RANK/WORLD_SIZE");
  options = options.resolved();
  auto group_store = std::make_shared<PrefixStore>("g/" + options.name, std::move(store));
  TcpTransportOptions tcp;
  // Ranks that share a MemoryStore are threads of this process: loopback reaches them all.
  tcp.host = options.host.empty() && std::dynamic_pointer_cast<MemoryStore>(store) != nullptr
                 ? "127.0.0.1"
                 : options.host;
  tcp.bind_host = listen_host(tcp.host);
  tcp.timeout = options.timeout;
  auto transport = connect_tcp_transport(group_store, rank, size, tcp);
  auto group = std::make_shared<Group>(std::move(transport), group_store, std::move(options));
  group->impl_->discover_topology();
  return group;
}

}  // namespace cohort
