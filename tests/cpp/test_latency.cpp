// The latency algorithm (docs/ALGORITHMS.md, "The latency algorithm";
// algorithms/one_hop.hpp): small exact calls carry their data in the call
// descriptor's message and combine it in one hop. Ranks are threads over the
// in-process transport. Checked: the reduction's exact value (rank order, the
// element type's arithmetic) and bits on every rank, data movement and
// max/min bit-identical to the ring, lossless bit-identical to none, in
// place, the size limit and who decides, and that mismatches, bad
// arguments, a missing rank and abort still end the call on every rank.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/types.hpp"
#include "ncclz/communicator.hpp"
#include "ncclz/error.hpp"
#include "ncclz/policy_hints.hpp"
#include "prims/reduce.hpp"
#include "test_ranks.hpp"
#include "test_values.hpp"

namespace {

using ncclz::Algorithm;
using ncclz::CallStats;
using ncclz::Communicator;
using ncclz::Compression;
using ncclz::DataType;
using ncclz::RedOp;
using ncclz_test::Ranks;
using Bytes = std::vector<uint8_t>;

constexpr int64_t kLimit = 8192;  // latency_bytes of these tests

/// n ranks with 64 KiB slots and the latency algorithm up to kLimit bytes,
/// its two hops through the slots (direct_from_bytes 0; the tests that run them
/// direct set it; tweak adjusts further).
Ranks world(int n, const std::function<void(int, ncclz::CommConfig&)>& tweak = nullptr) {
  return Ranks(n, [&](int r, ncclz::CommConfig& c) {
    c.slot_bytes = 65536;
    c.latency_bytes = kLimit;
    c.direct_from_bytes = 0;
    c.timeout_s = 30;
    if (tweak) tweak(r, c);
  });
}

size_t es(DataType t) { return ncclz::dtype_size(t); }

/// Rank r's input: n values of t, varied and not exactly representable sums
/// (floats), or small integers.
Bytes input(DataType t, size_t n, int r, int seed = 0) {
  Bytes b(n * es(t));
  for (size_t i = 0; i < n; ++i) {
    const double x = std::sin(0.37 * double(i) + r + seed) * 7.3 + 0.01 * double(r * 31 + seed);
    const bool integer = t == DataType::I32 || t == DataType::I64 || t == DataType::U8;
    ncclz_test::store_value(t, b.data(), i, integer ? std::floor(std::fabs(x) * 5) : x);
  }
  return b;
}

/// Float16's average divides every input by N before the sum (core/call.cpp:
/// NCCL's premultiplied average); the other types' divides the sum once.
bool premultiplied(DataType t, RedOp op) { return op == RedOp::Avg && t == DataType::F16; }

/// x's n values as the sum reads them: divided by N first where premultiplied.
Bytes summand(DataType t, RedOp op, const uint8_t* x, size_t n, int N) {
  Bytes v(x, x + n * ncclz::core::dsize(t));
  if (premultiplied(t, op)) ncclz::prims::divide_in_place(ncclz::core::elem_of(t), v.data(), n, N);
  return v;
}

/// The documented result: acc = x_0, then acc = x_j op acc for j = 1..N-1, in
/// the element type's own arithmetic (prims::ReduceFn); avg divides once
/// (float16: each x_j first).
Bytes rank_order(DataType t, RedOp op, const std::vector<Bytes>& x, size_t n) {
  const int N = int(x.size());
  Bytes acc = summand(t, op, x[0].data(), n, N);
  const auto e = ncclz::core::elem_of(t);
  const auto fn = ncclz::prims::reduce_fn(e, op);
  for (size_t j = 1; j < x.size(); ++j) fn(acc.data(), summand(t, op, x[j].data(), n, N).data(), acc.data(), n);
  if (op == RedOp::Avg && !premultiplied(t, op)) ncclz::prims::divide_in_place(e, acc.data(), n, N);
  return acc;
}

enum class Coll { AllReduce, ReduceScatter, Reduce, AllGather, Broadcast };
const char* name(Coll c) {
  switch (c) {
    case Coll::AllReduce: return "all_reduce";
    case Coll::ReduceScatter: return "reduce_scatter";
    case Coll::Reduce: return "reduce";
    case Coll::AllGather: return "all_gather";
    case Coll::Broadcast: return "broadcast";
  }
  return "?";
}

/// One call of `c` on every rank with `count` elements per block (the message:
/// count, or count * N for reduce_scatter and all_gather); inputs from `seed`.
/// in_place: the output is the input (NCCL's in-place forms).
struct Call {
  Coll coll = Coll::AllReduce;
  DataType t = DataType::F32;
  RedOp op = RedOp::Sum;
  Compression comp = Compression::none();
  size_t count = 0;
  int root = 0;
  bool in_place = false;
  int seed = 0;
  std::function<const ncclz::PolicyHints*(int)> hints;
  /// Floats: a NaN in rank 1's input and zeros of both signs (-0 on rank 0),
  /// whose results depend on which operand is which (max, min).
  bool special = false;
};

struct Outcome {
  std::vector<Bytes> in, out;  // by rank
  std::vector<CallStats> st;
};

Outcome run(Ranks& w, const Call& k) {
  const int N = w.size();
  const size_t n = k.count, b = n * es(k.t);
  Outcome o;
  o.in.resize(size_t(N));
  o.out.resize(size_t(N));
  o.st.resize(size_t(N));
  for (int r = 0; r < N; ++r) {
    const size_t in_n = k.coll == Coll::ReduceScatter ? n * size_t(N) : n;
    o.in[size_t(r)] = input(k.t, in_n, r, k.seed);
    const bool floats = k.t == DataType::F32 || k.t == DataType::F64 || k.t == DataType::F16 || k.t == DataType::BF16;
    if (k.special && floats && in_n > 5) {
      if (r == 1) ncclz_test::store_value(k.t, o.in[size_t(r)].data(), 3, std::nan(""));
      ncclz_test::store_value(k.t, o.in[size_t(r)].data(), 5, r == 0 ? -0.0 : 0.0);
      ncclz_test::store_value(k.t, o.in[size_t(r)].data(), in_n - 1, r == 0 ? 0.0 : -0.0);
    }
  }
  w.run([&](int r, Communicator& comm) {
    const Bytes& x = o.in[size_t(r)];
    Bytes& y = o.out[size_t(r)];
    CallStats* st = &o.st[size_t(r)];
    const ncclz::PolicyHints* h = k.hints ? k.hints(r) : nullptr;
    switch (k.coll) {
      case Coll::AllReduce:
        y = x;
        comm.all_reduce(k.in_place ? y.data() : x.data(), y.data(), n, k.t, k.op, k.comp, st, h);
        break;
      case Coll::ReduceScatter:
        if (k.in_place) {  // recv = send + rank * recv_count
          Bytes buf = x;
          comm.reduce_scatter(buf.data(), buf.data() + size_t(r) * b, n, k.t, k.op, k.comp, st, h);
          y.assign(buf.begin() + long(size_t(r) * b), buf.begin() + long(size_t(r + 1) * b));
        } else {
          y.assign(b, 0xEE);
          comm.reduce_scatter(x.data(), y.data(), n, k.t, k.op, k.comp, st, h);
        }
        break;
      case Coll::Reduce:
        y = x;
        comm.reduce(k.in_place ? y.data() : x.data(), r == k.root ? y.data() : nullptr, n, k.t, k.op, k.root, k.comp,
                    st, h);
        break;
      case Coll::AllGather:
        y.assign(b * size_t(N), 0xEE);
        if (k.in_place) {  // send = recv + rank * send_count
          std::memcpy(y.data() + size_t(r) * b, x.data(), b);
          comm.all_gather(y.data() + size_t(r) * b, y.data(), n, k.t, k.comp, st, h);
        } else {
          comm.all_gather(x.data(), y.data(), n, k.t, k.comp, st, h);
        }
        break;
      case Coll::Broadcast:
        y = x;
        comm.broadcast(y.data(), n, k.t, k.root, k.comp, st, h);
        break;
    }
  });
  return o;
}

/// What rank r must hold after `k`, exactly.
Bytes expected(const Call& k, const Outcome& o, int r, int N) {
  const size_t n = k.count, b = n * es(k.t);
  switch (k.coll) {
    case Coll::AllReduce: return rank_order(k.t, k.op, o.in, n);
    case Coll::Reduce: return r == k.root ? rank_order(k.t, k.op, o.in, n) : o.in[size_t(r)];
    case Coll::ReduceScatter: {
      std::vector<Bytes> blocks;
      for (int j = 0; j < N; ++j) {
        blocks.emplace_back(o.in[size_t(j)].begin() + long(size_t(r) * b),
                            o.in[size_t(j)].begin() + long(size_t(r + 1) * b));
      }
      return rank_order(k.t, k.op, blocks, n);
    }
    case Coll::AllGather: {
      Bytes all;
      for (int j = 0; j < N; ++j) all.insert(all.end(), o.in[size_t(j)].begin(), o.in[size_t(j)].end());
      return all;
    }
    case Coll::Broadcast: return o.in[size_t(k.root)];
  }
  return {};
}

std::string what(const Call& k, int N) {
  return std::string(name(k.coll)) + " N=" + std::to_string(N) + " " + ncclz::dtype_name(k.t) + " " +
         ncclz::op_name(k.op) + " " + ncclz::mode_name(k.comp.mode) + " count=" + std::to_string(k.count) +
         " root=" + std::to_string(k.root) + (k.in_place ? " in place" : "");
}

std::vector<RedOp> ops_of(DataType t) {
  std::vector<RedOp> ops = {RedOp::Sum, RedOp::Avg, RedOp::Max, RedOp::Min};
  if (t != DataType::U8) ops.push_back(RedOp::Prod);
  return ops;
}

class LatencyWorlds : public ::testing::TestWithParam<int> {};

TEST_P(LatencyWorlds, EveryCollectiveTypeOpModeAndCountIsExactInRankOrder) {
  const int N = GetParam();
  Ranks w = world(N);
  int seed = 0;
  for (Coll coll : {Coll::AllReduce, Coll::ReduceScatter, Coll::Reduce, Coll::AllGather, Coll::Broadcast}) {
    const bool reduces = coll == Coll::AllReduce || coll == Coll::ReduceScatter || coll == Coll::Reduce;
    for (DataType t :
         {DataType::F32, DataType::F64, DataType::F16, DataType::BF16, DataType::I32, DataType::I64, DataType::U8}) {
      for (RedOp op : reduces ? ops_of(t) : std::vector<RedOp>{RedOp::Sum}) {
        for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(200)}) {
          for (bool in_place : {false, true}) {
            Call k;
            k.coll = coll;
            k.t = t;
            k.op = op;
            k.count = count;
            k.in_place = in_place;
            k.root = (seed++) % N;
            k.seed = seed;
            Bytes none_bits[8];
            for (const Compression& c : {Compression::none(), Compression::lossless()}) {
              k.comp = c;
              const Outcome o = run(w, k);
              for (int r = 0; r < N; ++r) {
                const std::string at = what(k, N) + " rank " + std::to_string(r);
                EXPECT_EQ(o.st[size_t(r)].algorithm, Algorithm::Latency) << at;
                const Bytes want = expected(k, o, r, N);
                ASSERT_EQ(o.out[size_t(r)].size(), want.size()) << at;
                EXPECT_TRUE(o.out[size_t(r)] == want) << at;
                if (c.mode == Compression::Mode::None) {
                  none_bits[r] = o.out[size_t(r)];
                } else {
                  EXPECT_TRUE(o.out[size_t(r)] == none_bits[r]) << at << ": lossless differs from none";
                }
              }
            }
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Latency, LatencyWorlds, ::testing::Values(2, 3, 4, 5));

TEST(Latency, AllReduceInTwoHopsWhereOneWouldSendTooMuch) {
  // latency_bytes 32 KiB: a message near it sends (N-1) x 32 KiB in one hop,
  // more than kOneHopBytes (48 KiB) for N >= 3: the two-hop schedule.
  for (int N : {3, 4, 5}) {
    Ranks w = world(N, [](int, ncclz::CommConfig& c) { c.latency_bytes = 32768; });
    for (DataType t : {DataType::F32, DataType::BF16, DataType::F64, DataType::I32}) {
      for (RedOp op : {RedOp::Sum, RedOp::Avg, RedOp::Max}) {
        for (bool in_place : {false, true}) {
          Call k;
          k.t = t;
          k.op = op;
          k.count = 32768 / es(t) - 3;  // blocks of uneven sizes
          k.in_place = in_place;
          k.seed = N + int(t);
          Bytes none_bits[8];
          for (const Compression& c : {Compression::none(), Compression::lossless()}) {
            k.comp = c;
            const Outcome o = run(w, k);
            const Bytes want = expected(k, o, 0, N);
            for (int r = 0; r < N; ++r) {
              const std::string at = what(k, N) + " rank " + std::to_string(r);
              EXPECT_EQ(o.st[size_t(r)].algorithm, Algorithm::Latency) << at;
              // two hops: 2(N-1)/N of the message, not (N-1) x
              EXPECT_LT(o.st[size_t(r)].raw_bytes, 2 * k.count * es(t)) << at;
              EXPECT_TRUE(o.out[size_t(r)] == want) << at;
              if (c.mode == Compression::Mode::None) {
                none_bits[r] = o.out[size_t(r)];
              } else {
                EXPECT_TRUE(o.out[size_t(r)] == none_bits[r]) << at << ": lossless differs from none";
              }
            }
          }
        }
      }
    }
    // two small ones after: the links are in step
    Call k;
    k.count = 10;
    const Outcome o = run(w, k);
    for (int r = 0; r < N; ++r) EXPECT_TRUE(o.out[size_t(r)] == expected(k, o, r, N));
  }
}

// Above latency_bytes, exact all_reduce runs two hops up to two_hop_bytes
// ((2N-3) x slot_bytes / 4 by default, or as set), each block in pieces of at most
// a slot less kLatencyHeadroom: sizes at and around every threshold (latency_bytes, one
// piece per block, two_hop_bytes), counts that N does not divide, every type
// with sum, avg and max in turn, in place and not: every element against the rank-order
// reduction, the same bits on every rank, lossless bit-identical to none.
// The same sizes direct (direct_from_bytes 1: every two-hop call reads and
// writes the peers' buffers in place, above two_hop_bytes too): the same bits
// as through the slots.
TEST(Latency, AllReduceInPiecesAroundEveryThreshold) {
  for (const bool direct : {false, true}) {
    struct Setup {
      int n;
      size_t slot;
      int nslots;
      int64_t two_hop;  // -1: the default ((2N-3) x slot / 4: one piece a block); -2: N x slot
    };
    // 64 KiB slots: blocks of one or two pieces; 4 KiB slots: up to 9 pieces a
    // block, also with 2 slots per link (each rank one piece ahead at most)
    for (const Setup& su :
         {Setup{2, 65536, 4, -1}, Setup{4, 65536, 4, -1}, Setup{2, 65536, 4, -2}, Setup{3, 65536, 4, -2},
          Setup{4, 65536, 4, -2}, Setup{5, 65536, 4, -2}, Setup{4, 4096, 2, 131072}, Setup{3, 4096, 4, 100000}}) {
      const int N = su.n;
      Ranks w = world(N, [&](int, ncclz::CommConfig& c) {
        c.slot_bytes = su.slot;
        c.nslots = su.nslots;
        c.two_hop_bytes = su.two_hop == -2 ? int64_t(N) * int64_t(su.slot) : su.two_hop;
        if (direct) c.direct_from_bytes = 1;
      });
      const size_t limit = size_t(w.comms[0]->config().latency_bytes);
      const ncclz::CommConfig agreed = w.comms[0]->config();
      const size_t two_hop = size_t(agreed.two_hop_bytes);
      EXPECT_EQ(agreed.direct_from_bytes, direct ? 1 : 0);
      const size_t piece = su.slot - 128;
      EXPECT_EQ(two_hop, su.two_hop == -1   ? size_t(2 * N - 3) * (su.slot / 4)
                         : su.two_hop == -2 ? size_t(N) * su.slot
                                            : size_t(su.two_hop));
      int seed = 100 * N;
      for (DataType t :
           {DataType::F32, DataType::F64, DataType::F16, DataType::BF16, DataType::I32, DataType::I64, DataType::U8}) {
        const size_t e = es(t);
        // (bytes, whether it runs the latency algorithm)
        std::vector<std::pair<size_t, bool>> sizes = {{limit / e * e, true},
                                                      {limit + e, true},
                                                      {limit + 7 * e, true},  // over latency_bytes
                                                      {N * piece / e * e, true},
                                                      {(N * piece / e + 1) * e, true},      // one piece per block
                                                      {(N * piece / e + N + 3) * e, true},  // some blocks in two
                                                      {two_hop / e * e, true},
                                                      {(two_hop / e - 5) * e, true},
                                                      {(two_hop / e + 1) * e, false}};
        for (const auto& [bytes, slots_latency] : sizes) {
          const bool latency = slots_latency || direct;    // direct: no upper limit
          if (slots_latency && bytes > two_hop) continue;  // (sizes for larger two_hop_bytes)
          {
            const RedOp op = std::vector<RedOp>{RedOp::Sum, RedOp::Avg, RedOp::Max}[size_t(seed) % 3];  // in turn
            Call k;
            k.t = t;
            k.op = op;
            k.count = bytes / e;
            k.seed = ++seed;
            k.in_place = seed % 2 == 0;
            Bytes none_bits[8];
            for (const Compression& c : {Compression::none(), Compression::lossless()}) {
              k.comp = c;
              const Outcome o = run(w, k);
              const Bytes want = expected(k, o, 0, N);
              for (int r = 0; r < N; ++r) {
                const std::string at = what(k, N) + " slot " + std::to_string(su.slot) + (direct ? " direct" : "") +
                                       " rank " + std::to_string(r);
                ASSERT_EQ(o.st[size_t(r)].algorithm, latency ? Algorithm::Latency : Algorithm::Ring) << at;
                EXPECT_TRUE(o.out[size_t(r)] == o.out[0]) << at << ": differs from rank 0";
                if (c.mode == Compression::Mode::None) {
                  none_bits[r] = o.out[size_t(r)];
                } else {
                  EXPECT_TRUE(o.out[size_t(r)] == none_bits[r]) << at << ": lossless differs from none";
                }
                if (!latency) continue;  // the ring sums in its own order (checked elsewhere)
                ASSERT_TRUE(o.out[size_t(r)] == want) << at;
                if (bytes > limit) {
                  EXPECT_LT(o.st[size_t(r)].raw_bytes, 2 * bytes) << at;  // two hops: 2(N-1)/N of the message
                }
              }
            }
          }
        }
      }
      // the links are in step after all of it
      Call k;
      k.count = 10;
      const Outcome o = run(w, k);
      for (int r = 0; r < N; ++r) EXPECT_TRUE(o.out[size_t(r)] == expected(k, o, r, N));
    }
  }
}

// Many pieces back to back, in place, with 2 slots per link, and ranks that
// arrive at different times: the pieces of one call never mix with the next.
// Direct (the peers' buffers read in place) too: no call reads a buffer of
// the next.
TEST(Latency, PiecedCallsBackToBack) {
  const int N = 4;
  for (const bool direct : {false, true}) {
    Ranks w = world(N, [&](int, ncclz::CommConfig& c) {
      c.slot_bytes = 4096;
      c.nslots = 2;
      c.two_hop_bytes = direct ? 0 : 1 << 20;
      c.direct_from_bytes = direct ? 1 : 0;
    });
    w.run([&](int r, Communicator& comm) {
      for (int it = 0; it < 30; ++it) {
        const size_t n = 1000 + size_t(it) * 997;  // 4 KB to 120 KB: 1 to 8 pieces a block
        std::vector<int32_t> x(n);
        for (size_t i = 0; i < n; ++i) x[i] = int32_t(i % 1000) * (r + 1) + it;
        if ((it + r) % 3 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        CallStats st;
        comm.all_reduce(x.data(), x.data(), n, DataType::I32, RedOp::Sum, Compression::none(), &st);
        ASSERT_EQ(st.algorithm, Algorithm::Latency);
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(x[i], int32_t(i % 1000) * (N * (N + 1) / 2) + N * it)
              << "call " << it << " element " << i << (direct ? " direct" : "");
        }
      }
    });
  }
}

/// reduce_scatter's result as the ring computes it (algorithms/ring.cpp): for
/// rank r's block, acc = x_{r+1}, then acc = reduce(acc, x_{r+i}) for
/// i = 2..N; avg divides once (float16: each block first).
Bytes ring_order_block(const Call& k, const Outcome& o, int r, int N) {
  const size_t n = k.count, b = n * es(k.t);
  auto block = [&](int j) { return summand(k.t, k.op, o.in[size_t(j % N)].data() + size_t(r) * b, n, N); };
  Bytes acc = block(r + 1);
  const auto e = ncclz::core::elem_of(k.t);
  const auto fn = ncclz::prims::reduce_fn(e, k.op);
  for (int i = 2; i <= N; ++i) fn(acc.data(), acc.data(), block(r + i).data(), n);
  if (k.op == RedOp::Avg && !premultiplied(k.t, k.op)) ncclz::prims::divide_in_place(e, acc.data(), n, N);
  return acc;
}

// reduce_scatter, all_gather and broadcast above latency_bytes run direct
// from direct_from_bytes up (here 1 byte; core/direct_schedule.hpp): the same
// bits as the same calls through the slots (the ring, direct_from_bytes 0),
// reduce_scatter reducing in the ring's order (checked against that order
// computed here, NaNs and signed zeros included, whose max and min depend on
// which operand is which), for 2, 3 and 4 ranks, every type and op, in place
// and not, blocks just over the limit and of several 64 KiB pieces with
// counts that neither N nor a piece divides, lossless the bits of none.
TEST(Latency, DirectCollectivesGiveTheRingsBits) {
  for (int N : {2, 3, 4}) {
    Ranks direct = world(N, [](int, ncclz::CommConfig& c) { c.direct_from_bytes = 1; });
    Ranks slots = world(N);
    ASSERT_EQ(direct.comms[0]->config().direct_from_bytes, 1);
    int seed = 1000 * N;
    for (Coll coll : {Coll::ReduceScatter, Coll::AllGather, Coll::Broadcast}) {
      const bool reduces = coll == Coll::ReduceScatter;
      const std::vector<DataType> types =
          reduces ? std::vector<DataType>{DataType::F32, DataType::F64, DataType::F16, DataType::BF16,
                                          DataType::I32, DataType::I64, DataType::U8}
                  : std::vector<DataType>{DataType::F32, DataType::BF16, DataType::U8};
      for (DataType t : types) {
        const size_t e = es(t);
        // elements per block (broadcast: the buffer): just over latency_bytes, and several pieces
        const size_t just_over = (coll == Coll::Broadcast ? size_t(kLimit) : size_t(kLimit) / size_t(N)) / e + 1;
        for (size_t count : {just_over, (size_t(2) << 16) / e + 7}) {
          for (RedOp op : reduces ? ops_of(t) : std::vector<RedOp>{RedOp::Sum}) {
            Call k;
            k.coll = coll;
            k.t = t;
            k.op = op;
            k.count = count;
            k.seed = ++seed;
            k.in_place = seed % 2 == 0;
            k.root = seed % N;
            k.special = true;
            Bytes none_bits[8];
            for (const Compression& c : {Compression::none(), Compression::lossless()}) {
              k.comp = c;
              const Outcome d = run(direct, k);
              const Outcome s = run(slots, k);
              for (int r = 0; r < N; ++r) {
                const std::string at = what(k, N) + " rank " + std::to_string(r);
                ASSERT_EQ(d.st[size_t(r)].algorithm, Algorithm::Latency) << at;
                ASSERT_EQ(s.st[size_t(r)].algorithm, Algorithm::Ring) << at;
                const Bytes want = reduces ? ring_order_block(k, d, r, N) : expected(k, d, r, N);
                ASSERT_EQ(d.out[size_t(r)].size(), want.size()) << at;
                EXPECT_TRUE(d.out[size_t(r)] == want) << at << ": direct";
                EXPECT_TRUE(s.out[size_t(r)] == want) << at << ": the ring";
                if (c.mode == Compression::Mode::None) {
                  none_bits[r] = d.out[size_t(r)];
                } else {
                  EXPECT_TRUE(d.out[size_t(r)] == none_bits[r]) << at << ": lossless differs from none";
                }
                // bytes read of the peers' buffers: what the ring sends
                const size_t b = count * e;
                const size_t moved = coll == Coll::Broadcast ? (r == k.root ? 0 : b) : size_t(N - 1) * b;
                EXPECT_EQ(d.st[size_t(r)].raw_bytes, moved) << at;
              }
            }
          }
        }
      }
    }
    // the links are in step after all of it
    for (Ranks* w : {&direct, &slots}) {
      Call k;
      k.count = 10;
      const Outcome o = run(*w, k);
      for (int r = 0; r < N; ++r) EXPECT_TRUE(o.out[size_t(r)] == expected(k, o, r, N));
    }
  }
}

// Direct reduce_scatter, all_gather and broadcast back to back on buffers
// made for each call and freed after it, ranks arriving at different times:
// no rank returns while a peer still reads its buffers (the closing round),
// so every result is exact.
TEST(Latency, DirectCollectivesBackToBackOnFreedBuffers) {
  const int N = 4;
  Ranks w = world(N, [](int, ncclz::CommConfig& c) { c.direct_from_bytes = 1; });
  w.run([&](int r, Communicator& comm) {
    for (int it = 0; it < 40; ++it) {
      const size_t n = 3000 + size_t(it) * 1999;  // per block: 12 KB to 320 KB
      if ((it + r) % 3 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      CallStats st;
      const std::string at = "call " + std::to_string(it) + " rank " + std::to_string(r);
      switch (it % 3) {
        case 0: {
          auto x = std::make_unique<std::vector<int32_t>>(n * N);
          for (size_t i = 0; i < x->size(); ++i) (*x)[i] = int32_t(i % 1000) * (r + 1) + it;
          auto y = std::make_unique<std::vector<int32_t>>(n, -1);
          comm.reduce_scatter(x->data(), y->data(), n, DataType::I32, RedOp::Sum, Compression::none(), &st);
          for (size_t i = 0; i < n; ++i) {
            ASSERT_EQ((*y)[i], int32_t((size_t(r) * n + i) % 1000) * (N * (N + 1) / 2) + N * it) << at;
          }
          break;
        }
        case 1: {
          auto x = std::make_unique<std::vector<int32_t>>(n, r * 100000 + it);
          auto y = std::make_unique<std::vector<int32_t>>(n * N, -1);
          comm.all_gather(x->data(), y->data(), n, DataType::I32, Compression::none(), &st);
          for (size_t i = 0; i < n * N; ++i) ASSERT_EQ((*y)[i], int32_t(i / n) * 100000 + it) << at;
          break;
        }
        default: {
          const int root = it % N;
          auto x = std::make_unique<std::vector<int32_t>>(n * 2, r == root ? it : -1);
          comm.broadcast(x->data(), n * 2, DataType::I32, root, Compression::none(), &st);
          for (size_t i = 0; i < n * 2; ++i) ASSERT_EQ((*x)[i], it) << at;
          break;
        }
      }
      ASSERT_EQ(st.algorithm, Algorithm::Latency) << at;
    }
  });
}

// A lossy request above latency_bytes carries only the direct two hops'
// addresses, on every rank: where rank 0's policy lightens it to none (the
// others cannot know it beforehand) it runs direct, with the bits of the
// uncompressed call; without the proposal it runs lossy on the ring, within
// its bound.
TEST(Latency, ALightenedLossyRequestRunsDirect) {
  const int N = 4;
  Ranks w = world(N, [](int, ncclz::CommConfig& c) { c.direct_from_bytes = 1; });
  ncclz::PolicyHints none;
  none.lighter = int(Compression::Mode::None);
  Call k;
  k.count = 300001;  // 1.2 MB: above latency_bytes and two_hop_bytes
  k.seed = 5;
  const Outcome plain = run(w, k);
  k.comp = Compression::lossy_abs(1e-2);
  k.hints = [&](int r) { return r == 0 ? &none : nullptr; };
  const Outcome lightened = run(w, k);
  k.hints = nullptr;
  const Outcome lossy = run(w, k);
  const Bytes want = expected(k, plain, 0, N);
  for (int r = 0; r < N; ++r) {
    EXPECT_EQ(plain.st[size_t(r)].algorithm, Algorithm::Latency);
    EXPECT_EQ(lightened.st[size_t(r)].algorithm, Algorithm::Latency) << "rank " << r;
    EXPECT_TRUE(lightened.st[size_t(r)].lightened) << "rank " << r;
    EXPECT_TRUE(lightened.out[size_t(r)] == plain.out[size_t(r)]) << "rank " << r << ": not the uncompressed bits";
    EXPECT_TRUE(plain.out[size_t(r)] == want) << "rank " << r;
    EXPECT_EQ(lossy.st[size_t(r)].algorithm, Algorithm::Ring) << "rank " << r;
    EXPECT_FALSE(lossy.st[size_t(r)].lightened);
    EXPECT_GT(lossy.st[size_t(r)].ratio, 1.5) << "rank " << r;
    const auto* got = reinterpret_cast<const float*>(lossy.out[size_t(r)].data());
    const auto* ref = reinterpret_cast<const float*>(want.data());
    double worst = 0;
    for (size_t i = 0; i < k.count; ++i) worst = std::max(worst, std::fabs(double(got[i]) - double(ref[i])));
    EXPECT_LE(worst, 1e-2 * 1.0001) << "rank " << r;
  }
}

TEST(Latency, DataMovementMaxAndMinAreBitIdenticalToTheRing) {
  for (int N : {3, 4}) {
    Ranks w = world(N);
    ncclz::PolicyHints ring;
    ring.algorithm = int(Algorithm::Ring);
    for (Coll coll : {Coll::AllGather, Coll::Broadcast, Coll::AllReduce, Coll::ReduceScatter, Coll::Reduce}) {
      for (RedOp op : {RedOp::Max, RedOp::Min}) {
        Call k;
        k.coll = coll;
        k.t = DataType::BF16;
        k.op = op;
        k.count = 333;
        k.root = 1;
        const Outcome fast = run(w, k);
        k.hints = [&](int) { return &ring; };
        const Outcome slow = run(w, k);
        for (int r = 0; r < N; ++r) {
          EXPECT_EQ(fast.st[size_t(r)].algorithm, Algorithm::Latency);
          EXPECT_EQ(slow.st[size_t(r)].algorithm, Algorithm::Ring);
          EXPECT_TRUE(fast.out[size_t(r)] == slow.out[size_t(r)]) << what(k, N) << " rank " << r;
        }
        if (coll == Coll::AllGather || coll == Coll::Broadcast) break;  // no op
      }
    }
  }
}

TEST(Latency, SumsAgreeWithTheRingWithinRoundingAndOnEveryRank) {
  const int N = 4;
  Ranks w = world(N);
  ncclz::PolicyHints ring;
  ring.algorithm = int(Algorithm::Ring);
  Call k;
  k.t = DataType::F32;
  k.count = 2048;  // exactly kLimit bytes: still the latency algorithm
  const Outcome fast = run(w, k);
  k.hints = [&](int) { return &ring; };
  const Outcome slow = run(w, k);
  for (int r = 0; r < N; ++r) {
    EXPECT_EQ(fast.st[size_t(r)].algorithm, Algorithm::Latency);
    EXPECT_TRUE(fast.out[size_t(r)] == fast.out[0]) << "rank " << r << " differs from rank 0";
    for (size_t i = 0; i < k.count; ++i) {
      const double a = ncclz_test::value_at(k.t, fast.out[size_t(r)].data(), i);
      const double b = ncclz_test::value_at(k.t, slow.out[size_t(r)].data(), i);
      double mag = 0;
      for (int j = 0; j < N; ++j) mag += std::fabs(ncclz_test::value_at(k.t, fast.in[size_t(j)].data(), i));
      ASSERT_LE(std::fabs(a - b), 2 * N * mag * 0x1p-24) << "element " << i;
    }
  }
}

TEST(Latency, StatsCountWhatEachRankSent) {
  const int N = 3;
  Ranks w = world(N);
  Call k;
  k.count = 100;
  Outcome o = run(w, k);
  for (int r = 0; r < N; ++r) {
    EXPECT_EQ(o.st[size_t(r)].raw_bytes, uint64_t((N - 1) * 400));  // the whole input to every peer
    EXPECT_EQ(o.st[size_t(r)].wire_bytes, o.st[size_t(r)].raw_bytes);
    EXPECT_GT(o.st[size_t(r)].wall_s, 0);
  }
  k.coll = Coll::Broadcast;
  k.root = 2;
  o = run(w, k);
  for (int r = 0; r < N; ++r) EXPECT_EQ(o.st[size_t(r)].raw_bytes, r == 2 ? uint64_t((N - 1) * 400) : 0u);
  k.coll = Coll::ReduceScatter;
  o = run(w, k);
  for (int r = 0; r < N; ++r) EXPECT_EQ(o.st[size_t(r)].raw_bytes, uint64_t((N - 1) * 400));  // block q to q
}

TEST(Latency, TheLimitTheModeAndRankZeroDecide) {
  const int N = 3;
  Call k;
  k.t = DataType::I32;  // sums exact in any order: the ring's results are checked exactly too
  auto algos = [&](Ranks& w, const Call& c) {
    const Outcome o = run(w, c);
    for (int r = 1; r < N; ++r) EXPECT_EQ(o.st[size_t(r)].algorithm, o.st[0].algorithm);
    for (int r = 0; r < N; ++r) EXPECT_TRUE(o.out[size_t(r)] == expected(c, o, r, N)) << what(c, N);
    return o.st[0].algorithm;
  };
  {
    Ranks w = world(N);
    k.count = kLimit / 4;
    EXPECT_EQ(algos(w, k), Algorithm::Latency);
    k.count = kLimit / 4 + 1;  // one element over: all_reduce's two hops, up to N x the slot
    EXPECT_EQ(algos(w, k), Algorithm::Latency);
    k.count = size_t(2 * N - 3) * 65536 / 4 / 4;  // two_hop_bytes: (2N-3) x slot_bytes / 4
    EXPECT_EQ(algos(w, k), Algorithm::Latency);
    k.count = size_t(2 * N - 3) * 65536 / 4 / 4 + 1;  // over it: the ring
    EXPECT_EQ(algos(w, k), Algorithm::Ring);
    k.coll = Coll::ReduceScatter;  // no two-hop schedule: the ring over latency_bytes
    k.count = kLimit / 4 / N + 1;
    EXPECT_EQ(algos(w, k), Algorithm::Ring);
    k.coll = Coll::AllGather;  // the message is N blocks
    k.count = kLimit / 4 / N;
    EXPECT_EQ(algos(w, k), Algorithm::Latency);
    k.count = kLimit / 4 / N + 1;
    EXPECT_EQ(algos(w, k), Algorithm::Ring);
    // lossy calls with no hint exchange statistics first: never the latency algorithm
    std::vector<float> x(16, 1.f), y(16);
    w.run([&](int, Communicator& comm) {
      CallStats st;
      comm.all_reduce(x.data(), y.data(), 16, DataType::F32, RedOp::Sum, Compression::lossy_abs(1e-3), &st);
      EXPECT_EQ(st.algorithm, Algorithm::Ring);
      EXPECT_NEAR(y[3], 3.0, 1e-3);
    });
    // rank 0's proposal decides: the ring for everyone (the data that came
    // with the descriptors is dropped); another rank's is ignored
    ncclz::PolicyHints ring;
    ring.algorithm = int(Algorithm::Ring);
    k.coll = Coll::AllReduce;
    k.count = 100;
    k.hints = [&](int r) { return r == 0 ? &ring : nullptr; };
    EXPECT_EQ(algos(w, k), Algorithm::Ring);
    k.hints = [&](int r) { return r == 1 ? &ring : nullptr; };
    EXPECT_EQ(algos(w, k), Algorithm::Latency);
    k.hints = nullptr;
  }
  {
    // NCCLZ_ALGO=ring on rank 0 alone: every rank runs the ring
    Ranks w = world(N, [](int r, ncclz::CommConfig& c) { c.algorithm = r == 0 ? "ring" : "auto"; });
    EXPECT_EQ(algos(w, k), Algorithm::Ring);
  }
  {
    Ranks w = world(N, [](int, ncclz::CommConfig& c) { c.latency_bytes = 0; });  // off, two hops too
    EXPECT_EQ(algos(w, k), Algorithm::Ring);
    k.count = kLimit / 4 + 1;
    EXPECT_EQ(algos(w, k), Algorithm::Ring);
    k.count = 100;
  }
  {
    Ranks w = world(N, [](int, ncclz::CommConfig& c) { c.two_hop_bytes = 0; });  // no two hops above latency_bytes
    EXPECT_EQ(w.comms[0]->config().two_hop_bytes, 0);
    EXPECT_EQ(algos(w, k), Algorithm::Latency);
    k.count = kLimit / 4 + 1;
    EXPECT_EQ(algos(w, k), Algorithm::Ring);
    k.count = 100;
  }
  {
    // direct two hops (two_hop_bytes 0): from direct_from_bytes up, whatever the slot
    Ranks w = world(N, [](int, ncclz::CommConfig& c) {
      c.two_hop_bytes = 0;
      c.direct_from_bytes = 1 << 20;
    });
    EXPECT_EQ(w.comms[2]->config().direct_from_bytes, 1 << 20);
    k.count = (1 << 20) / 4 - 1;  // under it: the ring
    EXPECT_EQ(algos(w, k), Algorithm::Ring);
    k.count = (1 << 20) / 4;
    EXPECT_EQ(algos(w, k), Algorithm::Latency);
    k.count = (3 << 20) / 4 + 1;
    EXPECT_EQ(algos(w, k), Algorithm::Latency);
    // reduce_scatter, all_gather and broadcast too, above latency_bytes
    // (below it, one hop) from direct_from_bytes up
    for (Coll c : {Coll::ReduceScatter, Coll::AllGather, Coll::Broadcast}) {
      k.coll = c;
      const size_t per = c == Coll::Broadcast ? 1 : size_t(N);  // elements of the message per count
      k.count = (1 << 20) / 4 / per - 1;
      EXPECT_EQ(algos(w, k), Algorithm::Ring) << name(c);
      k.count = (1 << 20) / 4 / per + 1;
      EXPECT_EQ(algos(w, k), Algorithm::Latency) << name(c);
    }
    k.coll = Coll::Reduce;  // no direct schedule
    EXPECT_EQ(algos(w, k), Algorithm::Ring);
    k.coll = Coll::AllReduce;
    k.count = 100;
  }
  {
    // unset: on for ranks that reach each other (threads here), from 256 KiB with 3 ranks
    Ranks w = world(N, [](int, ncclz::CommConfig& c) { c.direct_from_bytes = -1; });
    EXPECT_EQ(w.comms[0]->config().direct_from_bytes, int64_t(256) << 10);
  }
  {
    // unset (core::direct_from): with 2 ranks all_reduce from 2 MiB, reduce_scatter and all_gather from
    // 8 MiB, broadcast from 128 KiB; with 4, all_reduce, all_gather and broadcast from 128 KiB,
    // reduce_scatter from 512 KiB; set, every collective from the value set
    struct Case {
      Coll coll;
      size_t from;  // bytes of the message
    };
    const size_t kib = 1024, mib = kib << 10;
    struct Setup {
      int n;
      int64_t set;
      std::vector<Case> cases;
    };
    const std::vector<Setup> setups = {{2,
                                        -1,
                                        {{Coll::AllReduce, 2 * mib},
                                         {Coll::ReduceScatter, 8 * mib},
                                         {Coll::AllGather, 8 * mib},
                                         {Coll::Broadcast, 128 * kib}}},
                                       {4,
                                        -1,
                                        {{Coll::AllReduce, 128 * kib},
                                         {Coll::ReduceScatter, 512 * kib},
                                         {Coll::AllGather, 128 * kib},
                                         {Coll::Broadcast, 128 * kib}}},
                                       {2,
                                        3 << 20,
                                        {{Coll::AllReduce, 3 * mib},
                                         {Coll::ReduceScatter, 3 * mib},
                                         {Coll::AllGather, 3 * mib},
                                         {Coll::Broadcast, 3 * mib}}}};
    for (const Setup& su : setups) {
      Ranks wd = world(su.n, [&](int, ncclz::CommConfig& c) { c.direct_from_bytes = su.set; });
      EXPECT_EQ(wd.comms[0]->config().direct_from_bytes, su.set > 0  ? su.set
                                                         : su.n == 2 ? int64_t(2) << 20
                                                                     : 128 << 10);
      for (const Case& cs : su.cases) {
        Call c;
        c.coll = cs.coll;
        c.t = DataType::I32;
        const size_t per = cs.coll == Coll::ReduceScatter || cs.coll == Coll::AllGather ? size_t(su.n) : 1;
        c.count = cs.from / 4 / per;
        const std::string where =
            std::string(name(cs.coll)) + " N=" + std::to_string(su.n) + (su.set < 0 ? " unset" : " set");
        const Outcome at = run(wd, c);
        for (int r = 0; r < su.n; ++r) {
          EXPECT_EQ(at.st[size_t(r)].algorithm, Algorithm::Latency) << where;
          EXPECT_TRUE(at.out[size_t(r)] == expected(c, at, r, su.n)) << where;  // (int32 sums: any order)
        }
        c.count -= 1;  // under it: the ring (above latency_bytes and two_hop_bytes)
        const Outcome under = run(wd, c);
        for (int r = 0; r < su.n; ++r) EXPECT_EQ(under.st[size_t(r)].algorithm, Algorithm::Ring) << where;
      }
    }
  }
  {
    // lossy requests do not take the two hops (no hint): the lossy ring
    Ranks w = world(N);
    EXPECT_EQ(w.comms[1]->config().two_hop_bytes, (2 * N - 3) * 65536 / 4);  // agreed: (2N-3) x slot_bytes / 4
    std::vector<float> x(5000, 1.f), y(5000);
    w.run([&](int, Communicator& comm) {
      CallStats st;
      comm.all_reduce(x.data(), y.data(), 5000, DataType::F32, RedOp::Sum, Compression::lossy_abs(1e-3), &st);
      EXPECT_EQ(st.algorithm, Algorithm::Ring);
      EXPECT_NEAR(y[3], 3.0, 1e-3);
    });
  }
  {
    // without point-to-point links: descriptors around the ring, no latency algorithm
    Ranks w = world(N, [](int, ncclz::CommConfig& c) { c.p2p = 0; });
    EXPECT_EQ(algos(w, k), Algorithm::Ring);
    w.run([](int, Communicator& comm) { comm.barrier(); });
  }
  // latency_bytes is agreed at creation, and lowered to fit a slot
  EXPECT_THROW(world(2, [](int r, ncclz::CommConfig& c) { c.latency_bytes = r == 0 ? 1024 : 2048; }),
               ncclz::InvalidArgument);
  try {
    world(2, [](int r, ncclz::CommConfig& c) { c.two_hop_bytes = r == 0 ? -1 : 100000; });
    ADD_FAILURE() << "two_hop_bytes unset on rank 0, set on rank 1: no error";
  } catch (const ncclz::InvalidArgument& e) {
    EXPECT_TRUE(std::string(e.what()).find("NCCLZ_TWO_HOP_BYTES (rank 0: unset, rank 1: 100000)") != std::string::npos)
        << e.what();
  }
  ncclz::CommConfig c;
  c.slot_bytes = 4096;
  c.latency_bytes = 1 << 20;
  EXPECT_EQ(c.resolved().latency_bytes, 4096 - 128);
  c.latency_bytes = -1;
  EXPECT_EQ(ncclz::CommConfig::defaults().latency_bytes, 65536);
}

// A lossy call whose hints expect an exact run (the policy's proposal of none
// for small messages) carries its data: where every rank carried and rank 0's
// proposal keeps the bound, the latency algorithm runs it exactly (the bits
// of the uncompressed call); where a rank did not carry, or the proposal is
// refused (a bound below the sum's rounding), the lossy ring runs as asked.
TEST(Latency, SmallLossyCallsThatRankZeroRunsExact) {
  const int N = 3;
  Ranks w = world(N);
  ncclz::PolicyHints none;
  none.lighter = int(Compression::Mode::None);
  Call k;
  k.t = DataType::F32;
  k.count = 500;
  k.seed = 4;
  const Outcome plain = run(w, k);
  for (Coll c : {Coll::AllReduce, Coll::ReduceScatter, Coll::Reduce, Coll::AllGather, Coll::Broadcast}) {
    Call l = k;
    l.coll = c;
    l.root = 1;
    l.comp = Compression::lossy_rel(1e-3);
    l.hints = [&](int) { return &none; };
    const Outcome o = run(w, l);
    for (int r = 0; r < N; ++r) {
      EXPECT_EQ(o.st[size_t(r)].algorithm, Algorithm::Latency) << what(l, N);
      EXPECT_EQ(o.st[size_t(r)].ran_mode, Compression::Mode::None) << what(l, N);
      EXPECT_TRUE(o.out[size_t(r)] == expected(l, o, r, N)) << what(l, N) << " rank " << r;
    }
  }
  // the same bits as the uncompressed call
  Call l = k;
  l.comp = Compression::lossy_rel(1e-3);
  l.hints = [&](int) { return &none; };
  const Outcome o = run(w, l);
  for (int r = 0; r < N; ++r) EXPECT_TRUE(o.out[size_t(r)] == plain.out[size_t(r)]) << "rank " << r;
  // rank 2 expected the lossy run (no hint): nobody takes the latency algorithm
  l.hints = [&](int r) { return r == 2 ? nullptr : &none; };
  const Outcome mixed = run(w, l);
  for (int r = 0; r < N; ++r) {
    EXPECT_EQ(mixed.st[size_t(r)].algorithm, Algorithm::Ring);
    EXPECT_EQ(mixed.st[size_t(r)].ran_mode, Compression::Mode::None);  // rank 0's proposal still holds
  }
  // a bound below the exact float sum's rounding: the proposal is refused,
  // the lossy ring runs (within the bound it reports), the same on every rank
  l.hints = [&](int) { return &none; };
  l.comp = Compression::lossy_rel(1e-12);
  const Outcome tiny = run(w, l);
  for (int r = 0; r < N; ++r) {
    EXPECT_EQ(tiny.st[size_t(r)].algorithm, Algorithm::Ring);
    EXPECT_EQ(tiny.st[size_t(r)].ran_mode, Compression::Mode::LossyRel);
    EXPECT_TRUE(tiny.out[size_t(r)] == tiny.out[0]) << "rank " << r;
  }
}

TEST(Latency, SendRecvAndCollectivesInterleave) {
  const int N = 3;
  Ranks w = world(N);
  w.run([&](int r, Communicator& comm) {
    for (int it = 0; it < 20; ++it) {
      std::vector<float> x(50, float(r + it)), y(50);
      comm.all_reduce(x.data(), y.data(), 50, DataType::F32, RedOp::Sum, Compression::none());
      ASSERT_EQ(y[7], float(3 * it + 3));
      // a ring of sends: even ranks send first
      std::vector<float> s(3000, float(r)), got(3000);
      const int to = (r + 1) % N, from = (r + N - 1) % N;
      if (r % 2 == 0) {
        comm.send(s.data(), s.size(), DataType::F32, to, Compression::none());
        comm.recv(got.data(), got.size(), DataType::F32, from, Compression::none());
      } else {
        comm.recv(got.data(), got.size(), DataType::F32, from, Compression::none());
        comm.send(s.data(), s.size(), DataType::F32, to, Compression::none());
      }
      ASSERT_EQ(got[11], float(from));
      comm.barrier();
    }
  });
}

// ---- errors ------------------------------------------------------------------------------------

std::vector<std::string> outcomes(Ranks& w, const std::function<void(int, Communicator&)>& fn) {
  std::vector<std::string> got(size_t(w.size()));
  w.run([&](int r, Communicator& comm) {
    try {
      fn(r, comm);
      got[size_t(r)] = "ok";
    } catch (const ncclz::InvalidArgument& e) {
      got[size_t(r)] = std::string("invalid: ") + e.what();
    } catch (const ncclz::Aborted& e) {
      got[size_t(r)] = std::string("aborted: ") + e.what();
    } catch (const ncclz::Timeout& e) {
      got[size_t(r)] = std::string("timeout: ") + e.what();
    } catch (const ncclz::RemoteError& e) {
      got[size_t(r)] = std::string("remote: ") + e.what();
    }
  });
  return got;
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

void expect_usable(Ranks& w) {
  Call k;
  k.count = 64;
  const Outcome o = run(w, k);
  for (int r = 0; r < w.size(); ++r) {
    EXPECT_EQ(o.st[size_t(r)].algorithm, Algorithm::Latency);
    EXPECT_TRUE(o.out[size_t(r)] == expected(k, o, r, w.size())) << "after the error, rank " << r;
  }
}

TEST(LatencyErrors, MismatchesRaiseOnEveryRankAndLeaveTheLinksInStep) {
  const int N = 4;
  Ranks w = world(N);
  std::vector<float> a(40000, 1.f), b(40000);
  // a carried call against one that is not (too large for the limit)
  auto got = outcomes(w, [&](int r, Communicator& comm) {
    comm.all_reduce(a.data(), b.data(), r == 2 ? 30000 : 64, DataType::F32, RedOp::Sum, Compression::none());
  });
  for (int r = 0; r < N; ++r) {
    EXPECT_TRUE(has(got[size_t(r)], "remote: ncclz rank " + std::to_string(r) + ": mismatched calls: rank 0 called"))
        << got[size_t(r)];
    EXPECT_TRUE(has(got[size_t(r)], "rank 2 called call #0 all_reduce(count=30000")) << got[size_t(r)];
  }
  expect_usable(w);
  // two small calls of different collectives, both carried
  got = outcomes(w, [&](int r, Communicator& comm) {
    if (r == 1) {
      comm.all_gather(a.data(), b.data(), 16, DataType::F32, Compression::none());
    } else {
      comm.all_reduce(a.data(), b.data(), 64, DataType::F32, RedOp::Sum, Compression::none());
    }
  });
  for (int r = 0; r < N; ++r)
    EXPECT_TRUE(has(got[size_t(r)], "remote: ") && has(got[size_t(r)], "all_gather(send_count=16")) << got[size_t(r)];
  expect_usable(w);
  // the same call in different modes (lossy exchanges statistics, the others carry data)
  got = outcomes(w, [&](int r, Communicator& comm) {
    comm.all_reduce(a.data(), b.data(), 64, DataType::F32, RedOp::Sum,
                    r == 3 ? Compression::lossy_abs(1e-3) : Compression::lossless());
  });
  for (int r = 0; r < N; ++r)
    EXPECT_TRUE(has(got[size_t(r)], "remote: ") && has(got[size_t(r)], "lossy_abs")) << got[size_t(r)];
  expect_usable(w);
  // a rank with a bad argument raises InvalidArgument, the others RemoteError
  got = outcomes(w, [&](int r, Communicator& comm) {
    comm.all_reduce(r == 0 ? nullptr : a.data(), b.data(), 64, DataType::F32, RedOp::Sum, Compression::none());
  });
  EXPECT_TRUE(has(got[0], "invalid: ")) << got[0];
  for (int r = 1; r < N; ++r)
    EXPECT_TRUE(has(got[size_t(r)], "remote: ") && has(got[size_t(r)], "rank 0 called")) << got[size_t(r)];
  expect_usable(w);
}

TEST(LatencyErrors, MismatchedTwoHopCallsRaiseOnEveryRank) {
  const int N = 4;
  Ranks w = world(N, [](int, ncclz::CommConfig& c) { c.two_hop_bytes = 4 * 65536; });  // two hops up to 256 KiB
  std::vector<float> a(100000, 1.f), b(100000);
  // both carried (two hops, pieces), another count
  auto got = outcomes(w, [&](int r, Communicator& comm) {
    comm.all_reduce(a.data(), b.data(), r == 1 ? 40000 : 60000, DataType::F32, RedOp::Sum, Compression::none());
  });
  for (int r = 0; r < N; ++r) {
    EXPECT_TRUE(has(got[size_t(r)], "remote: ") && has(got[size_t(r)], "mismatched calls") &&
                has(got[size_t(r)], "count=40000"))
        << got[size_t(r)];
  }
  expect_usable(w);
  // carried against not carried (over two_hop_bytes), and lossless against lossy
  got = outcomes(w, [&](int r, Communicator& comm) {
    comm.all_reduce(a.data(), b.data(), r == 3 ? 100000 : 60000, DataType::F32, RedOp::Sum, Compression::lossless());
  });
  for (int r = 0; r < N; ++r) EXPECT_TRUE(has(got[size_t(r)], "count=100000")) << got[size_t(r)];
  expect_usable(w);
  got = outcomes(w, [&](int r, Communicator& comm) {
    comm.all_reduce(a.data(), b.data(), 60000, DataType::F32, RedOp::Sum,
                    r == 0 ? Compression::lossy_rel(1e-3) : Compression::none());
  });
  for (int r = 0; r < N; ++r) {
    EXPECT_TRUE(has(got[size_t(r)], "remote: ") && has(got[size_t(r)], "lossy_rel")) << got[size_t(r)];
  }
  expect_usable(w);
}

// A rank aborts while the others run pieced two-hop calls (many pieces, 2
// slots per link): every rank raises within seconds, none hangs.
TEST(LatencyErrors, AbortDuringPiecedCallsEndsEveryRank) {
  const int N = 4;
  Ranks w = world(N, [](int, ncclz::CommConfig& c) {
    c.slot_bytes = 4096;
    c.nslots = 2;
    c.two_hop_bytes = 1 << 20;
  });
  std::atomic<int> calls{0};
  std::thread killer([&] {
    while (calls.load() < 10) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    w.comms[2]->abort("test abort mid-call");
  });
  const auto t0 = std::chrono::steady_clock::now();
  const auto got = outcomes(w, [&](int r, Communicator& comm) {
    std::vector<float> x(60000, float(r));  // blocks of 15000 floats: 15 pieces each
    for (int it = 0; it < 1000000; ++it) {
      comm.all_reduce(x.data(), x.data(), x.size(), DataType::F32, RedOp::Max, Compression::none());
      if (r == 0) calls.fetch_add(1);
    }
  });
  killer.join();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0);  // timeout: 30 s
  for (int r = 0; r < N; ++r) {
    EXPECT_TRUE(has(got[size_t(r)], "aborted: ") || has(got[size_t(r)], "remote: ")) << got[size_t(r)];
  }
  EXPECT_TRUE(has(got[2], "test abort mid-call")) << got[2];
}

TEST(LatencyErrors, ACollectiveAgainstASendAbortsEveryRankPromptly) {
  const int N = 3;
  Ranks w = world(N);
  std::vector<float> a(64, 1.f), b(64);
  const auto t0 = std::chrono::steady_clock::now();
  const auto got = outcomes(w, [&](int r, Communicator& comm) {
    if (r == 1) {
      comm.send(a.data(), 64, DataType::F32, 0, Compression::none());
    } else {
      comm.all_reduce(a.data(), b.data(), 64, DataType::F32, RedOp::Sum, Compression::none());
    }
  });
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0);  // timeout: 30 s
  for (int r = 0; r < N; ++r) {
    EXPECT_TRUE(has(got[size_t(r)], "remote: ") || has(got[size_t(r)], "aborted: ")) << got[size_t(r)];
  }
  // rank 0 read rank 1's send where it expected a descriptor (or heard rank 1's abort first)
  EXPECT_TRUE(has(got[0] + got[1], "mismatched calls: rank 1 called send(count=64") ||
              has(got[0] + got[1], "mismatched calls: rank 0 called all_reduce(count=64"))
      << got[0] << "\n"
      << got[1];
  w.run([](int, Communicator& comm) { EXPECT_THROW(comm.barrier(), ncclz::Aborted); });
}

// Rank 0 posts its small call's message to everyone, times out waiting for
// the others (who come late) and aborts: they find its message, but must not
// complete the call rank 0 failed (the ring could not have: it needs rank 0
// after the exchange), so they fail with its notice.
TEST(LatencyErrors, LatePeersOfACallTheFirstRankGaveUpOnFailToo) {
  Ranks w = world(3, [](int r, ncclz::CommConfig& c) { c.timeout_s = r == 0 ? 0.5 : 30; });
  std::vector<float> a(64, 1.f), b(64);
  const auto got = outcomes(w, [&](int r, Communicator& comm) {
    if (r != 0) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    comm.all_reduce(a.data(), b.data(), 64, DataType::F32, RedOp::Sum, Compression::none());
  });
  EXPECT_TRUE(has(got[0], "timeout: ")) << got[0];
  for (int r = 1; r < 3; ++r) {
    EXPECT_TRUE(has(got[size_t(r)], "aborted: ") && has(got[size_t(r)], "rank 0 aborted the communicator"))
        << got[size_t(r)];
  }
}

TEST(LatencyErrors, AMissingRankIsATimeoutAndAbortWakesTheOthers) {
  {
    Ranks w = world(3, [](int, ncclz::CommConfig& c) { c.timeout_s = 0.5; });
    std::vector<float> a(64, 1.f), b(64);
    const auto t0 = std::chrono::steady_clock::now();
    const auto got = outcomes(w, [&](int r, Communicator& comm) {
      if (r == 2) return;  // never calls
      comm.all_reduce(a.data(), b.data(), 64, DataType::F32, RedOp::Sum, Compression::none());
    });
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
    for (int r = 0; r < 2; ++r) {
      EXPECT_TRUE(has(got[size_t(r)], "timeout: ") || has(got[size_t(r)], "aborted: ")) << got[size_t(r)];
    }
    EXPECT_TRUE(has(got[0] + got[1], "peer rank 2")) << got[0] << "\n" << got[1];
    EXPECT_THROW(w.comms[0]->barrier(), ncclz::Aborted);
  }
  {
    Ranks w = world(3);
    std::vector<float> a(64, 1.f), b(64);
    std::thread killer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      w.comms[0]->abort("test abort");
    });
    const auto got = outcomes(w, [&](int r, Communicator& comm) {
      if (r == 0) return;  // aborts instead of calling
      comm.all_reduce(a.data(), b.data(), 64, DataType::F32, RedOp::Sum, Compression::none());
    });
    killer.join();
    for (int r = 1; r < 3; ++r) {
      EXPECT_TRUE(has(got[size_t(r)], "aborted: ") && has(got[size_t(r)], "test abort")) << got[size_t(r)];
    }
  }
}

}  // namespace
