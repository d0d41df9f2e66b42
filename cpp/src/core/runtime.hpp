// What every call of a communicator runs on: set up at creation by the
// communicator object (core/communicator.cpp, which owns the connections) and
// used by the call routine's steps (core/call.hpp, core/lossy_call.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/trace.hpp"
#include "base/worker_pool.hpp"
#include "core/buffer.hpp"
#include "core/call_protocol.hpp"
#include "core/channels.hpp"
#include "core/device_work.hpp"
#include "core/hier_channels.hpp"
#include "core/lossy_ops.hpp"
#include "core/persistent_call.hpp"
#include "ncclz/communicator.hpp"
#include "transport/peer_memory.hpp"
#include "transport/transport.hpp"

namespace ncclz::core {

struct Runtime {
  /// cfg: the effective configuration; slot_capacity: the bytes of a ring slot.
  Runtime(int rank_, int nranks_, const CommConfig& cfg_, size_t slot_capacity,
          std::shared_ptr<transport::AbortFlag> abort_, const FailFn& fail_)
      : rank(rank_),
        nranks(nranks_),
        cfg(cfg_),
        abort(std::move(abort_)),
        fail(fail_),
        pool(std::make_unique<base::WorkerPool>(cfg_.nchannels - 1)),
        channels(rank_, nranks_, cfg_, slot_capacity, pool.get(), fail_),
        peers(rank_, nranks_, cfg_.slot_bytes),
        protocol(rank_, nranks_, channels, peers, fail_) {
    channels.use_peer_links(&peers);  // the peer schedules' lanes (all_to_all, gather, scatter)
  }

  int rank, nranks;
  CommConfig cfg;                               ///< effective (Communicator::config())
  std::shared_ptr<transport::AbortFlag> abort;  ///< set when the communicator is aborted
  FailFn fail;                                  ///< aborts the communicator
  std::unique_ptr<base::WorkerPool> pool;       ///< channels 1.. and the API layer's element-wise passes
  RingChannels channels;
  PeerLinks peers;
  CallProtocol protocol;
  Topology topo;  ///< which ranks share a host (core/communicator.cpp finds it)
  /// This rank has fewer than two cores of its own (core::rings_share_cores):
  /// its single lossy sends and recvs quantize slice by slice in the link's
  /// loop (LossyCall::stage_p2p), where a whole-buffer pass on the pool could
  /// not run in parallel anyway.
  bool short_of_cores = false;
  std::unique_ptr<HierChannels> hier;  ///< the hierarchical links, where topo.hierarchical()
  /// Peers' memory, where every rank can read every other's (CommConfig::direct_from_bytes > 0)
  std::unique_ptr<transport::PeerMemory> peer_mem;
  /// NCCLZ_DIRECT_FROM_BYTES was unset (on every rank): the collectives
  /// other than all_reduce run direct from their own sizes (core::direct_from).
  bool direct_defaulted = false;
  Buffer work[2];     ///< the lossy paths' code and float64 buffers
  Buffer staging[2];  ///< host copies of a device call's buffers (core/device_call.hpp)
  /// A group's calls' codes and slot scratch, by the call's position in its
  /// group (core/p2p_group.cpp): kept from group to group, as work[] is, so
  /// that a call does not touch fresh pages each time.
  std::vector<Buffer> group_codes, group_scratch;
  /// The host copies of a group's calls on device buffers, by position.
  std::vector<Buffer> group_host;
  std::unique_ptr<DeviceWork> device_work;  ///< device calls' work (core/device_work.hpp), made by the first
  NonzeroIndex nonzeros;                    ///< the lossy sums' list of input nonzeros (LossyStage)
  uint64_t seq = 0;                         ///< collective calls so far (CallDesc::seq)
  /// Descriptor rounds this rank took part in (collectives and send/recv
  /// handshakes, refused ones too): Communicator::rounds.
  uint64_t rounds = 0;
  std::vector<uint64_t> send_seq = std::vector<uint64_t>(size_t(nranks), 0);  ///< sends so far, by peer
  std::vector<uint64_t> recv_seq = std::vector<uint64_t>(size_t(nranks), 0);  ///< receives so far, by peer
  /// The timeline trace (CommConfig::trace_file; base/trace.hpp); null when off.
  std::unique_ptr<trace::Recorder> trace;
  /// The persistent ring (core/persistent_call.hpp): its connections, made at
  /// creation where CommConfig::persistent is set, until its first call makes
  /// the ring, which takes them; the slices each channel's stream will have
  /// received and sent after the last call.
  std::vector<transport::ProxyChannel> persistent_links;
  std::unique_ptr<PersistentWork> persistent;
  std::vector<uint64_t> persistent_recv, persistent_sent;
  /// Every rank on this host (the bootstrap's host ids): the persistent ring
  /// may put its FIFOs in device memory.
  bool one_host = false;
};

}  // namespace ncclz::core
