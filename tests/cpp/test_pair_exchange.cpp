// Two ranks' all-reduce on coded integers (algorithms/ring.cpp, "Two ranks
// exchanging coded integers"): each rank sends only its own values and adds
// the other's, with the ring's result bits on both ranks; other wires keep the
// ring, whose second half sends sums.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "algorithms/ring.hpp"
#include "prims/prims.hpp"
#include "prims/reduce.hpp"
#include "test_fifo.hpp"

using namespace ncclz;
using codec::ElemType;
using ncclz_test::FakeRecv;
using ncclz_test::FakeSend;
using ncclz_test::Fifo;
using ncclz_test::wire_args;
using transport::Clock;

namespace {

constexpr size_t kSlotBytes = 256;

template <class T>
std::vector<T> values(size_t n, int salt) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = T(int64_t((i * 7 + size_t(salt) * 13) % 61) - 30 + int64_t(i / 50));
  return v;
}

/// What one run of two ranks did: each rank's output and the bytes of every
/// slot rank 0 posted.
template <class T>
struct Outcome {
  std::vector<T> out[2];
  std::vector<std::vector<uint8_t>> rank0_slots;
};

template <class T>
Outcome<T> two_ranks(ElemType t, prims::WireMode m, RedOp op, const std::vector<T>& a, const std::vector<T>& b,
                     int nslots, bool in_place) {
  Fifo ab(kSlotBytes, nslots), ba(kSlotBytes, nslots);
  FakeSend s0(&ab), s1(&ba);
  FakeRecv r0(&ba), r1(&ab);
  Outcome<T> run;
  const std::vector<T>* in[2] = {&a, &b};
  auto rank = [&](int r, FakeSend* s, FakeRecv* rc) {
    const prims::PrimsArgs pa = wire_args(t, m, op);
    prims::ChannelStats st;
    std::vector<uint64_t> scratch(kSlotBytes / 8 + 8);
    prims::Prims p(s, rc, pa, &st, scratch.data());
    std::vector<T> src = *in[r];
    std::vector<T>& out = run.out[r];
    out.assign(src.size(), T(99));
    const size_t seg = algorithms::ring_segment_elems(p, nslots);
    if (in_place) {
      algorithms::ring_all_reduce(p, {r, 2}, src.data(), src.data(), src.size(), seg);
      out = src;
    } else {
      algorithms::ring_all_reduce(p, {r, 2}, src.data(), out.data(), src.size(), seg);
    }
  };
  std::thread t1([&] { rank(1, &s1, &r1); });
  rank(0, &s0, &r0);
  t1.join();
  run.rank0_slots = ab.log;
  return run;
}

template <class T>
T combine(RedOp op, T x, T y) {
  if (op == RedOp::Max) return x > y ? x : y;
  if (op == RedOp::Min) return x < y ? x : y;
  return T(uint64_t(x) + uint64_t(y));  // wrapping, as the reduction
}

template <class T>
void check_exchange(ElemType t, RedOp op) {
  for (const int nslots : {2, 4}) {
    for (const size_t n : {size_t(1), size_t(57), size_t(300), size_t(1000 + 3)}) {
      for (const bool in_place : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "slots " << nslots << " n " << n << " in place " << in_place);
        const auto a = values<T>(n, 1), b = values<T>(n, 2), b2 = values<T>(n, 5);
        const Outcome<T> x = two_ranks<T>(t, prims::WireMode::Coded, op, a, b, nslots, in_place);
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(x.out[0][i], combine(op, a[i], b[i])) << i;
          ASSERT_EQ(x.out[1][i], x.out[0][i]) << i;
        }
        // Rank 0's slots carry its own values alone: the same bytes whatever
        // rank 1's input (the ring's second half would send sums).
        const Outcome<T> y = two_ranks<T>(t, prims::WireMode::Coded, op, a, b2, nslots, in_place);
        EXPECT_EQ(x.rank0_slots, y.rank0_slots);
      }
    }
  }
}

TEST(PairExchange, CodedInt32SumsMaxAndMin) {
  for (const RedOp op : {RedOp::Sum, RedOp::Max, RedOp::Min}) check_exchange<int32_t>(ElemType::I32, op);
}

TEST(PairExchange, CodedInt64Sums) { check_exchange<int64_t>(ElemType::I64, RedOp::Sum); }

TEST(PairExchange, OnlyCodedIntegers) {
  // The exchange for coded integers only: a raw wire runs the ring, whose
  // sums depend on the other rank's input (this test's check can fail).
  const size_t n = 300;
  const auto a = values<int32_t>(n, 1), b = values<int32_t>(n, 2), b2 = values<int32_t>(n, 5);
  const Outcome<int32_t> x = two_ranks<int32_t>(ElemType::I32, prims::WireMode::Raw, RedOp::Sum, a, b, 2, false);
  const Outcome<int32_t> y = two_ranks<int32_t>(ElemType::I32, prims::WireMode::Raw, RedOp::Sum, a, b2, 2, false);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(x.out[0][i], a[i] + b[i]);
  EXPECT_NE(x.rank0_slots, y.rank0_slots);
}

/// A stage as the lossy call's (core::LossyStage): the "codes" of a slice are
/// read from the rank's input at the slice's offset into one of two buffers in
/// turn; final slices are written to `out`. Counts the elements it prepares.
class CountingStage final : public prims::Stage {
 public:
  CountingStage(const int32_t* input, const int32_t* base, int32_t* out) : in_(input), base_(base), out_(out) {}
  void* prepare(const void* src, size_t n) override {
    const size_t off = size_t(static_cast<const int32_t*>(src) - base_);
    turn_ ^= 1;
    bufs_[turn_].assign(in_ + off, in_ + off + n);
    prepared_ += n;
    return bufs_[turn_].data();
  }
  void finish(const void* dst, const void* data, size_t n) override {
    const size_t off = size_t(static_cast<const int32_t*>(dst) - base_);
    std::memcpy(out_ + off, data, n * sizeof(int32_t));
  }
  size_t prepared() const { return prepared_; }

 private:
  const int32_t* in_;
  const int32_t* base_;
  int32_t* out_;
  std::vector<int32_t> bufs_[2];
  int turn_ = 0;
  size_t prepared_ = 0;
};

TEST(PairExchange, AStagedInputIsPreparedOncePerElement) {
  // Sent, then added to: the slice sent is kept for the reduction (two
  // buffers in turn), so the stage quantizes each element once, as on the
  // ring; the sums are right on both ranks.
  for (const size_t n : {size_t(1), size_t(58), size_t(1000 + 3)}) {
    SCOPED_TRACE(::testing::Message() << "n " << n);
    const auto a = values<int32_t>(n, 1), b = values<int32_t>(n, 2);
    const std::vector<int32_t>* in[2] = {&a, &b};
    std::vector<int32_t> out[2] = {std::vector<int32_t>(n, 7), std::vector<int32_t>(n, 7)};
    size_t prepared[2] = {0, 0};
    Fifo ab(kSlotBytes, 4), ba(kSlotBytes, 4);
    FakeSend s0(&ab), s1(&ba);
    FakeRecv r0(&ba), r1(&ab);
    auto rank = [&](int r, FakeSend* s, FakeRecv* rc) {
      std::vector<int32_t> codes(n);  // the code buffer: an address range only
      CountingStage stage(in[r]->data(), codes.data(), out[r].data());
      prims::PrimsArgs pa = wire_args(ElemType::I32, prims::WireMode::Coded, RedOp::Sum);
      pa.stage = &stage;
      prims::ChannelStats st;
      std::vector<uint64_t> scratch(kSlotBytes / 8 + 8);
      prims::Prims p(s, rc, pa, &st, scratch.data());
      algorithms::ring_all_reduce(p, {r, 2}, codes.data(), codes.data(), n, algorithms::ring_segment_elems(p, 4));
      prepared[r] = stage.prepared();
    };
    std::thread t1([&] { rank(1, &s1, &r1); });
    rank(0, &s0, &r0);
    t1.join();
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(out[0][i], a[i] + b[i]) << i;
      ASSERT_EQ(out[1][i], out[0][i]) << i;
    }
    EXPECT_EQ(prepared[0], n);
    EXPECT_EQ(prepared[1], n);
  }
}

}  // namespace
