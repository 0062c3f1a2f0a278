// Group::create: the default way to build a group across processes, over TCP.
#include <arpa/inet.h>

#include "cohort/comm/group.h"
#include "cohort/comm/prefix_store.h"
#include "cohort/comm/tcp_transport.h"
#include "cohort/core/check.h"
#include "group_impl.h"

namespace cohort {

namespace {
// An IP literal names one interface: listen there only. A host name may map to addresses this
// machine does not own (NAT, aliases), so then listen on every interface.
bool is_ip_literal(const std::string& host) {
  unsigned char buffer[sizeof(in6_addr)];
  return inet_pton(AF_INET, host.c_str(), buffer) == 1 ||
         inet_pton(AF_INET6, host.c_str(), buffer) == 1;
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
  tcp.host = options.host;
  if (is_ip_literal(options.host)) tcp.bind_host = options.host;
  tcp.timeout = options.timeout;
  auto transport = connect_tcp_transport(group_store, rank, size, tcp);
  auto group = std::make_shared<Group>(std::move(transport), group_store, std::move(options));
  group->impl_->discover_topology();
  return group;
}

}  // namespace cohort
