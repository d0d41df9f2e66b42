// Internal glue shared by the transports (not part of the contract).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "transport/slot_ring.hpp"
#include "transport/transport.hpp"

namespace ncclz::transport {

/// What every transport gets from create_transport.
struct TransportContext {
  Bootstrap* bootstrap = nullptr;
  TransportConfig cfg;
  std::shared_ptr<AbortFlag> abort;
  /// Same on every rank, unique per create_transport call: names shm segments
  /// and in-process rings ("<job_key>-<nonce of rank 0>").
  std::string key;
  /// Shared by every ring end of this transport (slot_ring.hpp): the agreed
  /// checksum setting, corrupt-data notices. create_transport joins the ends
  /// connect() returns; the socket transport also hands it to its proxies.
  std::shared_ptr<LinkGroup> group;
};

std::unique_ptr<Transport> make_inprocess_transport(TransportContext ctx);
std::unique_ptr<Transport> make_shm_transport(TransportContext ctx);
std::unique_ptr<Transport> make_socket_transport(TransportContext ctx);

/// Checks connect()'s arguments (peers in range, no duplicates, nchannels >= 1).
void check_connect_args(const TransportContext& ctx, const std::vector<int>& peers, int nchannels);
/// A link of a rank to itself: one heap ring whose both ends are local.
PeerLink make_self_link(const TransportContext& ctx, int channel, const char* transport, size_t slot_bytes);

}  // namespace ncclz::transport
