// The hierarchical all-reduce and reduce-scatter in rounds (algorithms/
// hierarchical.cpp: hier_all_reduce_rounds, the exchange of two hosts;
// hier_all_reduce_ring_rounds, around the inter-host ring of any H;
// hier_reduce_scatter_rounds, two hosts): the same result bits and the same
// inter-host slots as the phases one after the other, a staged input quantized once per
// element, and the intra-host work really done between the pieces the hosts
// exchange. Ranks are threads; every connection
// is an in-memory FIFO (test_fifo.hpp).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/hierarchical.hpp"
#include "prims/prims.hpp"
#include "prims/reduce.hpp"
#include "test_fifo.hpp"

using namespace ncclz;
using codec::ElemType;
using ncclz_test::FakeRecv;
using ncclz_test::FakeSend;
using ncclz_test::Fifo;
using transport::Clock;

namespace {

constexpr size_t kSlotBytes = 256;

/// Every post of every connection, in the order they happened: (rank, ring).
struct Events {
  std::mutex mu;
  std::vector<std::pair<int, char>> seq;
};

class LoggedSend final : public FakeSend {
 public:
  LoggedSend(Fifo* f, Events* ev, int rank, char ring) : FakeSend(f), ev_(ev), rank_(rank), ring_(ring) {}
  void post(size_t bytes) override {
    FakeSend::post(bytes);
    std::lock_guard<std::mutex> lk(ev_->mu);
    ev_->seq.emplace_back(rank_, ring_);
  }

 private:
  Events* ev_;
  int rank_;
  char ring_;
};

/// A stage as the lossy call's (core::LossyStage): the "codes" of a slice of
/// the code buffer are the host sums at the same offset of `x` (all_reduce:
/// its output; reduce_scatter: the work buffer), prepared into one of two
/// buffers in turn; final slices of the output codes are written to `out`
/// at their offset. Counts the elements it prepares.
class HostSumStage final : public prims::Stage {
 public:
  HostSumStage(const int32_t* x, const int32_t* codes, int32_t* out, const int32_t* out_codes)
      : x_(x), codes_(codes), out_(out), out_codes_(out_codes) {}
  void* prepare(const void* src, size_t n) override {
    const size_t off = size_t(static_cast<const int32_t*>(src) - codes_);
    turn_ ^= 1;
    bufs_[turn_].assign(x_ + off, x_ + off + n);
    prepared_ += n;
    return bufs_[turn_].data();
  }
  void finish(const void* at, const void* data, size_t n) override {
    std::memcpy(out_ + (static_cast<const int32_t*>(at) - out_codes_), data, n * sizeof(int32_t));
  }
  size_t prepared() const { return prepared_; }

 private:
  const int32_t* x_;
  const int32_t* codes_;
  int32_t* out_;
  const int32_t* out_codes_;
  std::vector<int32_t> bufs_[2];
  int turn_ = 0;
  size_t prepared_ = 0;
};

prims::PrimsArgs wire_args(prims::WireMode m) { return ncclz_test::wire_args(ElemType::I32, m, RedOp::Sum); }

int32_t value(int rank, size_t i) { return int32_t((i * 7 + size_t(rank) * 13) % 61) - 30 + int32_t(i / 40); }

enum class Schedule { Rounds, Phases };
enum class Coll { AllReduce, ReduceScatter, AllGather };

/// One all-reduce (count elements) or reduce-scatter (count elements of each
/// of the 2L blocks) of 2 x L ranks: every rank's output, the bytes of every
/// inter-host slot in the order posted (per rank), the elements each rank's
/// stage prepared, and the order of all posts.
struct Outcome {
  std::vector<std::vector<int32_t>> out;
  std::vector<std::vector<std::vector<uint8_t>>> inter_slots;
  std::vector<size_t> prepared;
  std::vector<std::pair<int, char>> posts;
};

/// What a run does: H hosts of L ranks; the inter-host wire's mode (int32
/// elements, summed; a stage only on a coded one).
struct Opts {
  int H = 2, L = 2;
  size_t count = 0;
  int nslots = 4;
  bool staged = false, in_place = false;
  Coll coll = Coll::AllReduce;
  prims::WireMode inter = prims::WireMode::Coded;
};

Outcome run(Schedule s, const Opts& op) {
  const int H = op.H, L = op.L, N = H * L;
  const size_t count = op.count;
  auto rank_of = [L](int h, int l) { return h * L + l; };
  // intra[r]: r -> its host's next rank; inter[r]: r -> the next host's rank (., l)
  std::vector<std::unique_ptr<Fifo>> intra, inter;
  for (int r = 0; r < N; ++r) {
    intra.push_back(std::make_unique<Fifo>(kSlotBytes, op.nslots));
    inter.push_back(std::make_unique<Fifo>(kSlotBytes, op.nslots));
  }
  Events ev;
  Outcome o;
  o.out.resize(size_t(N));
  o.prepared.assign(size_t(N), 0);
  std::vector<int> grid(static_cast<size_t>(N));
  for (int r = 0; r < N; ++r) grid[size_t(r)] = r;
  auto rank = [&](int h, int l) {
    const int r = rank_of(h, l);
    LoggedSend si(intra[size_t(r)].get(), &ev, r, 'i'), se(inter[size_t(r)].get(), &ev, r, 'e');
    FakeRecv ri(intra[size_t(rank_of(h, (l + L - 1) % L))].get()), re(inter[size_t(rank_of((h + H - 1) % H, l))].get());
    const bool rs = op.coll == Coll::ReduceScatter;
    const size_t in_count = rs ? count * size_t(N) : count;
    std::vector<int32_t> src(in_count), dst(count, -7), codes(count);
    for (size_t i = 0; i < in_count; ++i) src[i] = value(r, i);
    if (op.in_place) dst = src;
    // reduce_scatter: the host sums (H blocks), their codes, then the output's codes
    std::vector<int32_t> work(size_t(H) * count, -5), rs_codes(size_t(H + 1) * count);
    HostSumStage stage(rs ? work.data() : dst.data(), rs ? rs_codes.data() : codes.data(), dst.data(),
                       rs ? rs_codes.data() + size_t(H) * count : codes.data());
    prims::PrimsArgs ai = wire_args(prims::WireMode::Raw), ae = wire_args(op.inter);
    ai.rank = ae.rank = r;
    if (op.staged) ae.stage = &stage;
    prims::ChannelStats sti, ste;
    std::vector<uint64_t> scratch_i(kSlotBytes / 8 + 8), scratch_e(kSlotBytes / 8 + 8);
    prims::Prims pi(&si, &ri, ai, &sti, scratch_i.data()), pe(&se, &re, ae, &ste, scratch_e.data());
    algorithms::HierPos pos;
    pos.host = h;
    pos.nhosts = H;
    pos.local = l;
    pos.nlocal = L;
    pos.grid = grid.data();
    const size_t seg_i = algorithms::ring_segment_elems(pi, op.nslots);
    const size_t seg_e = algorithms::ring_segment_elems(pe, op.nslots);
    if (op.coll == Coll::AllGather) {
      std::vector<int32_t> out(size_t(N) * count, -3);
      if (s == Schedule::Rounds) {
        algorithms::hier_all_gather(pi, pe, pos, src.data(), out.data(), count, count, seg_i, seg_e);
      } else {
        algorithms::hier_all_gather_phases(pi, pe, pos, src.data(), out.data(), count, count, seg_i, seg_e);
      }
      o.out[size_t(r)] = out;
      return;
    }
    if (rs) {
      ASSERT_EQ(algorithms::hier_reduce_scatter_in_rounds(pos), H == 2);  // else around the ring (H > 2)
      int32_t* mid = op.staged ? rs_codes.data() : work.data();
      int32_t* mid_out = op.staged ? rs_codes.data() + size_t(H) * count : dst.data();
      if (s == Schedule::Rounds) {
        algorithms::hier_reduce_scatter(pi, pe, pos, src.data(), count, work.data(), mid, mid_out, count, seg_i, seg_e);
      } else {
        algorithms::hier_reduce_scatter_phases(pi, pe, pos, src.data(), count, work.data(), mid, mid_out, count, seg_i,
                                               seg_e);
      }
      o.out[size_t(r)] = dst;
      o.prepared[size_t(r)] = stage.prepared();
      return;
    }
    ASSERT_EQ(algorithms::hier_all_reduce_in_rounds(pos, pe), H == 2 && op.inter == prims::WireMode::Coded);
    const void* in = op.in_place ? dst.data() : src.data();
    void* mid = op.staged ? static_cast<void*>(codes.data()) : static_cast<void*>(dst.data());
    if (s == Schedule::Rounds) {
      algorithms::hier_all_reduce(pi, pe, pos, in, dst.data(), mid, count, seg_i, seg_e);
    } else {
      algorithms::hier_all_reduce_phases(pi, pe, pos, in, dst.data(), mid, count, seg_i, seg_e);
    }
    o.out[size_t(r)] = dst;
    o.prepared[size_t(r)] = stage.prepared();
  };
  std::vector<std::thread> th;
  for (int r = 1; r < N; ++r) th.emplace_back([&, r] { rank(r / L, r % L); });
  rank(0, 0);
  for (auto& t : th) t.join();
  for (int r = 0; r < N; ++r) o.inter_slots.push_back(inter[size_t(r)]->log);
  o.posts = ev.seq;
  return o;
}

/// Rounds against phases: the exact sums on every rank, the same bits and
/// inter-host slots, and (staged) each host sum of the rank's block(s)
/// prepared once.
void expect_as_phases(const Opts& op) {
  const Outcome a = run(Schedule::Rounds, op);
  const Outcome b = run(Schedule::Phases, op);
  const int N = op.H * op.L;
  const bool rs = op.coll == Coll::ReduceScatter;
  for (int r = 0; r < N; ++r) {
    if (op.coll == Coll::AllGather) {
      for (int j = 0; j < N; ++j) {
        for (size_t i = 0; i < op.count; ++i) {
          ASSERT_EQ(a.out[size_t(r)][size_t(j) * op.count + i], value(j, i)) << "rank " << r << " block " << j;
        }
      }
    }
    for (size_t i = 0; i < op.count && op.coll != Coll::AllGather; ++i) {
      int64_t sum = 0;
      for (int k = 0; k < N; ++k) sum += value(k, (rs ? size_t(r) * op.count : 0) + i);
      ASSERT_EQ(a.out[size_t(r)][i], int32_t(sum)) << "rank " << r << " element " << i;
    }
    ASSERT_EQ(a.out[size_t(r)], b.out[size_t(r)]) << "rank " << r;
    EXPECT_EQ(a.inter_slots[size_t(r)], b.inter_slots[size_t(r)]) << "rank " << r;
    if (op.staged) {
      const size_t l = size_t(r % op.L), L = size_t(op.L);
      const size_t block = rs ? size_t(op.H) * op.count : op.count * (l + 1) / L - op.count * l / L;
      EXPECT_EQ(a.prepared[size_t(r)], block) << "rank " << r;
    }
  }
}

/// Whether rank r posted on its intra-host ring between its first and last
/// inter-host post.
bool intra_between_inter(const Outcome& o, int r) {
  long first = -1, last = -1;
  for (size_t k = 0; k < o.posts.size(); ++k) {
    if (o.posts[k] == std::make_pair(r, 'e')) {
      if (first < 0) first = long(k);
      last = long(k);
    }
  }
  for (long k = first + 1; k < last; ++k) {
    if (o.posts[size_t(k)] == std::make_pair(r, 'i')) return true;
  }
  return false;
}

TEST(HierRounds, SameBitsAndSlotsAsThePhases) {
  // Two hosts exchanging codes (hier_all_reduce_rounds), with and without a
  // stage, in place or not.
  for (const int L : {2, 3}) {
    for (const int nslots : {2, 4}) {
      for (const size_t count : {size_t(1), size_t(2), size_t(7), size_t(300), size_t(1003), size_t(4099)}) {
        for (const bool staged : {false, true}) {
          for (const bool in_place : {false, true}) {
            SCOPED_TRACE(::testing::Message() << "2x" << L << " slots " << nslots << " count " << count << " staged "
                                              << staged << " in place " << in_place);
            Opts op;
            op.L = L, op.nslots = nslots, op.count = count, op.staged = staged, op.in_place = in_place;
            expect_as_phases(op);
          }
        }
      }
    }
  }
}

/// expect_as_phases on H x L layouts, raw and coded inter-host wires, several
/// counts (two slots for one of them), staged where the wire is coded and
/// the collective has a stage, in place for one all_reduce count. The
/// exchange of two hosts (coded all_reduce) is left to the test above.
void sweep(Coll coll, std::initializer_list<int> hosts, std::initializer_list<int> locals) {
  for (const int H : hosts) {
    for (const int L : locals) {
      for (const prims::WireMode m : {prims::WireMode::Raw, prims::WireMode::Coded}) {
        if (coll == Coll::AllReduce && H == 2 && m == prims::WireMode::Coded) continue;
        for (const size_t count : {size_t(1), size_t(5), size_t(300), size_t(1003)}) {
          for (const bool staged : {false, true}) {
            if (staged && (m != prims::WireMode::Coded || coll == Coll::AllGather)) continue;
            SCOPED_TRACE(::testing::Message() << H << "x" << L << " " << (m == prims::WireMode::Raw ? "raw" : "coded")
                                              << " count " << count << " staged " << staged);
            Opts op;
            op.H = H, op.L = L, op.count = count, op.staged = staged, op.inter = m, op.coll = coll;
            op.nslots = count == 300 ? 2 : 4;
            op.in_place = coll == Coll::AllReduce && count == 1003;
            expect_as_phases(op);
          }
        }
      }
    }
  }
}

// Around the inter-host ring: the all_reduce of three and four hosts on any
// wire, of two on a raw one (the ring of two, not the exchange:
// hier_all_reduce_ring_rounds); the reduce_scatter of three and four
// (hier_reduce_scatter_ring_rounds); the all_gather of any
// (hier_all_gather_rounds).
TEST(HierRounds, RingRoundsSameBitsAndSlotsAsThePhases) { sweep(Coll::AllReduce, {2, 3, 4}, {2}); }
TEST(HierRounds, ReduceScatterRingRoundsSameBitsAndSlotsAsThePhases) { sweep(Coll::ReduceScatter, {3, 4}, {2}); }
TEST(HierRounds, AllGatherSameBitsAndSlotsAsThePhases) { sweep(Coll::AllGather, {2, 3}, {2, 3}); }

TEST(HierRounds, ReduceScatterSameBitsAndSlotsAsThePhases) {
  for (const int L : {2, 3}) {
    for (const int nslots : {2, 4}) {
      for (const size_t count : {size_t(1), size_t(7), size_t(300), size_t(1003)}) {
        for (const bool staged : {false, true}) {
          SCOPED_TRACE(::testing::Message()
                       << "2x" << L << " slots " << nslots << " count " << count << " staged " << staged);
          Opts op;
          op.L = L, op.nslots = nslots, op.count = count, op.staged = staged, op.coll = Coll::ReduceScatter;
          expect_as_phases(op);
        }
      }
    }
  }
}

TEST(HierRounds, IntraHostWorkBetweenThePieces) {
  // Many pieces per block: in rounds, every rank posts on its host's ring
  // while it is still exchanging pieces with the other hosts; the phases post
  // all of A before the inter-host phase and all of C after it (this check
  // fails for them).
  struct Case {
    int H;
    Coll coll;
    prims::WireMode m;
    const char* what;
  };
  for (const Case& c : {Case{2, Coll::AllReduce, prims::WireMode::Coded, "all_reduce, exchange"},
                        Case{2, Coll::AllReduce, prims::WireMode::Raw, "all_reduce, ring of two"},
                        Case{3, Coll::AllReduce, prims::WireMode::Coded, "all_reduce, ring of three"},
                        Case{2, Coll::ReduceScatter, prims::WireMode::Coded, "reduce_scatter, two hosts"},
                        Case{3, Coll::ReduceScatter, prims::WireMode::Coded, "reduce_scatter, ring of three"},
                        Case{2, Coll::AllGather, prims::WireMode::Coded, "all_gather, two hosts"},
                        Case{3, Coll::AllGather, prims::WireMode::Raw, "all_gather, ring of three"}}) {
    for (const bool staged : {false, true}) {
      if (staged && (c.m != prims::WireMode::Coded || c.coll == Coll::AllGather)) continue;
      Opts op;
      op.H = c.H, op.count = 4000, op.staged = staged, op.coll = c.coll, op.inter = c.m;
      const Outcome a = run(Schedule::Rounds, op);
      const Outcome b = run(Schedule::Phases, op);
      for (int r = 0; r < c.H * 2; ++r) {
        const std::string what =
            std::string(c.what) + ", rank " + std::to_string(r) + " staged " + std::to_string(staged);
        EXPECT_TRUE(intra_between_inter(a, r)) << "rounds, " << what;
        EXPECT_FALSE(intra_between_inter(b, r)) << "phases, " << what;
      }
    }
  }
}

TEST(HierRounds, OnlyTwoHostsExchangingCodes) {
  std::vector<int> grid = {0, 1, 2, 3, 4, 5};
  Fifo f(kSlotBytes, 4);
  FakeSend s(&f);
  FakeRecv rc(&f);
  std::vector<uint64_t> scratch(kSlotBytes / 8 + 8);
  auto pairs = [&](prims::WireMode m, ElemType t, int H, int L) {
    prims::PrimsArgs a = wire_args(m);
    a.type = t;
    a.raw_esize = codec::elem_size(t);
    prims::ChannelStats st;
    prims::Prims p(&s, &rc, a, &st, scratch.data());
    algorithms::HierPos pos;
    pos.nhosts = H;
    pos.nlocal = L;
    pos.grid = grid.data();
    return algorithms::hier_all_reduce_in_rounds(pos, p);
  };
  EXPECT_TRUE(pairs(prims::WireMode::Coded, ElemType::I32, 2, 2));
  EXPECT_TRUE(pairs(prims::WireMode::Coded, ElemType::I64, 2, 3));
  EXPECT_FALSE(pairs(prims::WireMode::Coded, ElemType::I32, 3, 2));  // a ring of three hosts (ring rounds)
  EXPECT_FALSE(pairs(prims::WireMode::Coded, ElemType::I32, 2, 1));  // one rank per host: no intra phases
  EXPECT_FALSE(pairs(prims::WireMode::Raw, ElemType::F32, 2, 2));    // floats: the ring of two (NaN payloads)
  // reduce_scatter: any wire (its ring of two sends one block, reduces into the other)
  algorithms::HierPos pos;
  pos.grid = grid.data();
  pos.nhosts = 2, pos.nlocal = 2;
  EXPECT_TRUE(algorithms::hier_reduce_scatter_in_rounds(pos));
  pos.nhosts = 3;
  EXPECT_FALSE(algorithms::hier_reduce_scatter_in_rounds(pos));  // around the ring instead
  pos.nhosts = 2, pos.nlocal = 1;
  EXPECT_FALSE(algorithms::hier_reduce_scatter_in_rounds(pos));
}

}  // namespace
