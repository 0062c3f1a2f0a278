// TCP transport: one full-duplex connection per pair of ranks. Two event loop threads per
// process serve every connection of every group: one matches incoming messages to posted
// receives and reads payloads straight into the receiver's buffer, the other writes what a
// sender's thread could not write at once; senders write header + payload with one gather-write, so
// large messages stream without an extra copy. A dead peer is noticed from its closed connection
// (kernel FIN/RST, or keepalive for a vanished host) and reported as PeerError naming it.
#pragma once

#include <memory>
#include <string>

#include "cohort/comm/store.h"
#include "cohort/comm/transport.h"

namespace cohort {

struct TcpTransportOptions {
  std::string host;               // address peers use to reach us ("" = this host's name)
  std::string bind_host;          // interface to listen on ("" = all)
  Milliseconds timeout{300'000};  // for building the mesh of connections
};

// Collective: every rank of the group calls it with the same store (address exchange and a
// per-group secret that each connection presents) and size.
std::unique_ptr<Transport> connect_tcp_transport(std::shared_ptr<Store> store, int rank, int size,
                                                 TcpTransportOptions options);

}  // namespace cohort
