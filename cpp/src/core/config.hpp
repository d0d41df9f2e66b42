// The runtime's configuration: its defaults and the sizes derived from them.
// CommConfig (ncclz/communicator.hpp) is the one struct that holds every
// setting; config.cpp reads the environment into it in one place
// (CommConfig::from_env, CommConfig::resolved) and checks it.
#pragma once

#include <cstddef>
#include <string>

#include "codec/slice.hpp"
#include "core/call_desc.hpp"
#include "ncclz/communicator.hpp"

namespace ncclz::core {

/// Channels (rings) when CommConfig::nchannels / NCCLZ_NCHANNELS is unset: each
/// rank proposes one per core of its share of the host, at least kMinAutoChannels
/// and at most kMaxAutoChannels, and every rank takes the smallest proposal
/// (proposed_channels; the communicator agrees on it at creation).
constexpr int kMinAutoChannels = 2;
constexpr int kMaxAutoChannels = 8;
constexpr size_t kDefaultSlotBytes = size_t(1) << 20;
constexpr int kDefaultSlots = 4;
/// Slices of mostly-zero lossy sums (NCCLZ_SPARSE_SLICE_BYTES): their slots
/// carry a few percent of these bytes, and each slot costs fixed work (wakeups,
/// frame setup), so they pay for larger ones than dense data, which overlaps
/// codec and link better with the smaller default.
constexpr size_t kDefaultSparseSliceBytes = size_t(8) << 20;
/// Exact calls up to this many bytes take the latency algorithm by default
/// (CommConfig::latency_bytes, NCCLZ_LATENCY_BYTES; bench/results/latency.md).
constexpr int64_t kDefaultLatencyBytes = int64_t(64) << 10;
/// The latency algorithm takes a collective's two-hop schedule (where it has
/// one: all_reduce) where one hop would send more than this many bytes per
/// rank ((N-1) x the message; bench/results/latency.md).
constexpr size_t kOneHopBytes = size_t(48) << 10;
/// The waits' polling time (CommConfig::spin_us) where the ranks on a machine
/// have a CPU each, and where they outnumber its CPUs (bench/results/latency.md).
constexpr int kDefaultSpinUs = 20;
constexpr int kDefaultSharedSpinUs = 200;
/// What the latency algorithm's message holds besides the data, at most (the
/// call descriptor): latency_bytes is at most slot_bytes minus this.
constexpr size_t kLatencyHeadroom = 128;
/// A call uses one more channel per this many bytes (up to nchannels).
constexpr size_t kBytesPerChannel = size_t(256) << 10;

/// The transport slot that carries slices of `bytes` bytes of data: the slice
/// header on top, so that a slice holds exactly bytes / esize elements (with
/// power-of-two slot sizes the ring's chunks then split into whole slices,
/// with no short remainder slice or loop, each of which costs a ring step's
/// fixed latency).
constexpr size_t slot_of(size_t bytes) { return bytes + codec::kHeaderBytes; }

/// The longest host id NCCLZ_TOPO_HOST takes (it travels in a fixed record).
constexpr size_t kMaxTopoHostId = 63;

/// This rank's proposal for an unset channel count: its cores (NCCLZ_CORES_PER_RANK,
/// else the CPUs this process may run on divided by `local_size`, the ranks on
/// its host), rounded down, within [kMinAutoChannels, kMaxAutoChannels].
int proposed_channels(int local_size);

/// Whether this rank has fewer cores than kMinAutoChannels rings need (its
/// cores as proposed_channels counts them, before the clamp): its rings'
/// threads would share cores.
bool rings_share_cores(int local_size);

/// The slices of exact ring calls where they run one ring (resolve_exact_shape).
constexpr size_t kOneRingSliceBytes = size_t(128) << 10;

/// The shape of exact ring calls (none and lossless: the user's values through
/// raw slots or the lossless coder, with no quantizer or codec work to spread
/// over cores), fixed at creation from agreed facts, so that every rank runs
/// the same schedule: CommConfig::exact_nchannels and exact_slice_bytes, where
/// unset (0), become
///   - one ring of kOneRingSliceBytes slices where the channel count was left
///     to the communicator (`auto_channels`), some rank has fewer cores than
///     two rings need (`short_of_cores`: any rank's rings_share_cores,
///     allgathered at creation) and the rings are not sockets (shared memory,
///     in-process). There a second ring only adds a thread that
///     must be scheduled at every step, and slot-sized slices leave a ring
///     step one slice with nothing to pipeline: 4 ranks on 2 CPUs, float32
///     sum, 1 MiB 801 -> 659 us, 4 MiB 2185 -> 1958, 16 MiB 9563 -> 7852,
///     64 MiB 39593 -> 38029; 2 ranks on 2 CPUs 1 MiB 193 -> 164, 16 MiB
///     2779 -> 2244 (bench/results/latency.md);
///   - else today's shape: nchannels rings of slot_bytes slices. On sockets
///     (every rank has the same transport kind) the one ring of small slices
///     was 0-8% slower than that, 4 ranks on 2 CPUs (each slot is a wakeup of
///     the proxy thread that drains it), so they keep it.
/// Set values are kept (exact_nchannels at most nchannels, exact_slice_bytes
/// at most slot_bytes). Per call, an exact ring call of `bytes` runs
/// min(RingChannels::pick(bytes), exact_nchannels) rings. The shape depends
/// on the mode only through exact/compressed, so none and lossless stay
/// bit-identical; compressed calls keep nchannels rings of slot_bytes slices
/// (the lossy codes' sums do not depend on the schedule).
void resolve_exact_shape(CommConfig& cfg, bool auto_channels, bool short_of_cores, bool sockets);

/// CommConfig::two_hop_bytes where unset (-1), from agreed facts: (2N-3) x
/// slot_bytes / 4 where the transport is not sockets and the topology is
/// flat, else 0. Above latency_bytes an exact all_reduce then runs the
/// latency algorithm's two hops where it would otherwise take the ring. The
/// two rounds save 2N-3 of the ring's 2N-1 hops (the descriptor round
/// included) but do not pipeline a block's copies and sums, so the size where
/// they stop paying grows with the hops saved; a quarter slot per saved hop
/// (blocks of at most a quarter slot, one piece each) is where they paid in
/// every run on 2 CPUs over shared memory, float32 sum
/// (bench/results/latency.md, "Two hops above latency_bytes"): 4 ranks
/// (1.25 MiB) 256 KiB 289 -> 172 us, 1 MiB 655 -> 541, while 2 and 4 MiB
/// were even or slower than the ring; 2 ranks (256 KiB) 256 KiB 120 -> 96,
/// while 512 KiB and 1 MiB were 2x and 1.4x slower. Measured at N = 2 and 4
/// only. Sockets keep the ring: there the exact calls' bytes are what a slow
/// link pays for, and lossless (which must run the same schedule as none)
/// compresses only on the ring. Hierarchical topologies keep their schedule
/// (fewer bytes between hosts).
void resolve_two_hop(CommConfig& cfg, int nranks, bool sockets, bool hierarchical);

/// Direct all_reduce and reduce_scatter read each block of the peers' inputs
/// in pieces of this many bytes, reduced while they are in cache
/// (core/direct_schedules.cpp).
constexpr size_t kDirectPieceBytes = size_t(64) << 10;
/// CommConfig::direct_from_bytes: 0 where the peers' memory is not
/// reachable (transport::PeerMemory::probe: the same on every rank), else,
/// where unset, the size from which the direct two hops were at least as fast
/// as the slots' two hops and the ring on 2 CPUs over shared memory, float32
/// sum (bench/results/latency.md, "Direct two hops"): 2 MiB with 2 ranks, 256
/// KiB with 3, 128 KiB with 4 or more. A cross-memory-attach copy costs about
/// twice a memcpy per byte on that machine (the kernel pins the peer's pages),
/// so direct pays where it saves rounds and copies: with more ranks than
/// CPUs, with more ranks, with larger messages.
void resolve_direct(CommConfig& cfg, int nranks, bool readable);
/// The message size from which collective `c` (one with a direct schedule,
/// core/direct_schedule.hpp) runs direct, given the resolved
/// direct_from_bytes (0: never). Where NCCLZ_DIRECT_FROM_BYTES was set
/// (`defaulted` false: the same on every rank, agreed at creation) every
/// collective takes that; where it was left unset, all_reduce takes it and
/// the others their own defaults, measured on 2 CPUs over shared memory
/// (bench/results/latency.md, "Direct reduce_scatter, all_gather and
/// broadcast"): reduce_scatter and all_gather from 8 MiB with 2 ranks (the
/// ring's one step each way pipelines well there; direct first won at 8-16
/// MiB), all_gather from 128 KiB with 3 or more, reduce_scatter from 128 KiB
/// with 3 and 512 KiB with 4 or more (at 128-256 KiB the ring was faster in
/// two runs of three); broadcast from 128 KiB (every reader copies once, in
/// parallel, where the chain relays).
int64_t direct_from(Coll c, int nranks, int64_t direct_from_bytes, bool defaulted);

/// An algorithm name (CommConfig::algorithm, NCCLZ_ALGO): int(Algorithm) for
/// "ring" and "hierarchical" ("hier"), -1 for "auto" (or ""); *ok false for
/// anything else. Case-insensitive.
int parse_algorithm(const std::string& s, bool* ok);

}  // namespace ncclz::core
