// The primitives (prims.hpp) over a tiny test-only FIFO connection: slicing,
// the raw and coded slot formats, the reduction verbs, forwarding compressed
// slices unchanged, and corrupt-slice detection.
#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <limits>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "algorithms/ring.hpp"
#include "codec/slice.hpp"
#include "ncclz/error.hpp"
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

prims::PrimsArgs args(ElemType t, prims::WireMode m, RedOp op = RedOp::Sum) {
  prims::PrimsArgs a;
  a.type = t;
  a.mode = m;
  a.reduce = prims::reduce_fn(t, op);
  a.raw_esize = codec::elem_size(t);
  a.deadline = Clock::now() + std::chrono::seconds(30);
  return a;
}

std::vector<int32_t> codes(size_t n, int salt) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = int32_t((i * 7 + size_t(salt)) % 50) - 25;
  return v;
}

TEST(PrimsSliceElems, HeaderRoomInEveryMode) {
  EXPECT_EQ(prims::slice_elems_for(1024, 4), (1024 - codec::kHeaderBytes) / 4);
  EXPECT_GE(prims::slice_elems_for(1024, 4) * 4 + codec::kHeaderBytes, size_t(1000));
  EXPECT_LE(codec::max_slice_bytes(ElemType::I64, prims::slice_elems_for(4096, 8)), size_t(4096));
}

class PrimsModes : public ::testing::TestWithParam<prims::WireMode> {};

TEST_P(PrimsModes, SendRecvManySlices) {
  // 256-byte slots: 58 int32 per slice; 1000 elements take 18 slices through 2 slots.
  Fifo f(256, 2);
  FakeSend s(&f);
  FakeRecv r(&f);
  const auto in = codes(1000, 3);
  std::vector<int32_t> out(1000, 77);
  prims::ChannelStats st_s, st_r;
  std::vector<uint64_t> scr_s(64), scr_r(64);
  std::thread tx([&] {
    prims::Prims p(&s, nullptr, args(ElemType::I32, GetParam()), &st_s, scr_s.data());
    p.send(in.data(), in.size());
  });
  prims::Prims p(nullptr, &r, args(ElemType::I32, GetParam()), &st_r, scr_r.data());
  p.recv(out.data(), out.size());
  tx.join();
  EXPECT_EQ(in, out);
  EXPECT_EQ(f.log.size(), (1000 + 57) / 58);
  EXPECT_EQ(st_s.raw_bytes, 4000u);
  if (GetParam() == prims::WireMode::Raw) {
    EXPECT_EQ(st_s.wire_bytes, 4000u);
  }
}

TEST_P(PrimsModes, ReduceVerbsAndForwarding) {
  // A chain a -> b -> c: a sends x; b recvReduceSends (x + y); c recvReduceCopies
  // ((x + y) + z) into its output. Then the same chain with recvCopySend at b:
  // b's outgoing slots must equal its incoming ones byte for byte.
  Fifo ab(512, 3), bc(512, 3);
  FakeSend a_s(&ab), b_s(&bc);
  FakeRecv b_r(&ab), c_r(&bc);
  const size_t n = 700;
  const auto x = codes(n, 1), y = codes(n, 2), z = codes(n, 3);
  std::vector<int32_t> out(n), fwd_b(n), fwd_c(n);
  prims::ChannelStats st[3];
  std::vector<uint64_t> scr[3] = {std::vector<uint64_t>(128), std::vector<uint64_t>(128), std::vector<uint64_t>(128)};
  const auto m = GetParam();
  std::thread ta([&] {
    prims::Prims p(&a_s, nullptr, args(ElemType::I32, m), &st[0], scr[0].data());
    p.send(x.data(), n);
    p.send(x.data(), n);
  });
  std::thread tb([&] {
    prims::Prims p(&b_s, &b_r, args(ElemType::I32, m), &st[1], scr[1].data());
    p.recvReduceSend(y.data(), n);
    p.recvCopySend(fwd_b.data(), n);
  });
  prims::Prims p(nullptr, &c_r, args(ElemType::I32, m), &st[2], scr[2].data());
  p.recvReduceCopy(z.data(), out.data(), n);
  p.recv(fwd_c.data(), n);
  ta.join();
  tb.join();
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], x[i] + y[i] + z[i]);
  EXPECT_EQ(fwd_b, x);
  EXPECT_EQ(fwd_c, x);
  // The second half of each log is the forwarded message: identical bytes.
  const size_t k = ab.log.size() / 2;
  ASSERT_EQ(bc.log.size(), ab.log.size());
  for (size_t i = 0; i < k; ++i) EXPECT_EQ(ab.log[k + i], bc.log[k + i]);
}

TEST(PrimsCoded, ReduceStepsKeepTheIncomingPredictor) {
  // a -> b -> c in Coded mode. a codes a smooth ramp with the predictor forced
  // to None; b adds its own ramp and sends the sum on with the selector free:
  // b keeps None (the incoming slices' predictor) where the selector on its own
  // picks a delta predictor for the same sum. The sums arrive exact.
  Fifo ab(4096, 3), bc(4096, 3);
  FakeSend a_s(&ab), b_s(&bc);
  FakeRecv b_r(&ab), c_r(&bc);
  const size_t n = 5000;
  std::vector<int32_t> x(n), y(n), sum(n), out(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = int32_t(3 * i) - 4000;
    y[i] = int32_t(i / 2);
    sum[i] = x[i] + y[i];
  }
  // The selector alone, on a slice of the sum: not None.
  const size_t slice = prims::slice_elems_for(4096, 4);
  std::vector<uint8_t> buf(4096);
  codec::SliceInfo info;
  ASSERT_EQ(codec::encode_slice(sum.data(), ElemType::I32, uint32_t(slice), buf.data(), buf.size(),
                                codec::EncodeOptions{}, &info),
            codec::Status::Ok);
  codec::SliceHeader h0;
  ASSERT_EQ(codec::read_header(buf.data(), info.bytes, &h0), codec::Status::Ok);
  ASSERT_NE(h0.predictor, codec::Predictor::None);

  prims::ChannelStats st[3];
  std::vector<uint64_t> scr[3] = {std::vector<uint64_t>(512), std::vector<uint64_t>(512), std::vector<uint64_t>(512)};
  std::thread ta([&] {
    auto a = args(ElemType::I32, prims::WireMode::Coded);
    a.enc.predictor = int(codec::Predictor::None);
    prims::Prims p(&a_s, nullptr, a, &st[0], scr[0].data());
    p.send(x.data(), n);
  });
  std::thread tb([&] {
    prims::Prims p(&b_s, &b_r, args(ElemType::I32, prims::WireMode::Coded), &st[1], scr[1].data());
    p.recvReduceSend(y.data(), n);
  });
  prims::Prims p(nullptr, &c_r, args(ElemType::I32, prims::WireMode::Coded), &st[2], scr[2].data());
  p.recv(out.data(), n);
  ta.join();
  tb.join();
  EXPECT_EQ(out, sum);
  ASSERT_EQ(bc.log.size(), (n + slice - 1) / slice);
  for (const auto& b : bc.log) {
    codec::SliceHeader h;
    ASSERT_EQ(codec::read_header(b.data(), b.size(), &h), codec::Status::Ok);
    EXPECT_NE(h.codec, codec::Codec::Raw);
    EXPECT_EQ(h.predictor, codec::Predictor::None);
  }
}

TEST(PrimsCoded, SparseIntegerSumsAddInPlace) {
  // a -> b -> c in Coded mode over mostly-zero codes (the Sparse coder's
  // slices), int32 and int64, with sums that wrap. b reduces with int_sum on
  // (the incoming nonzeros added to a copy of its slice) and off (dense decode
  // and reduce): the same slices go on to c, byte for byte, and c receives
  // the exact wrapped sums; b's output (recvReduceCopySend) holds them too.
  // With a stage whose prepared slices are writable, b adds into them.
  for (ElemType t : {ElemType::I32, ElemType::I64}) {
    const size_t es = codec::elem_size(t);
    const size_t n = 7001;
    std::mt19937_64 rng{uint64_t(es)};
    std::vector<int64_t> x(n, 0), y(n, 0);
    for (size_t i = 0; i < n; ++i) {
      if (rng() % 50 == 0) x[i] = int64_t(rng() % 601) - 300;
      if (rng() % 50 == 0) y[i] = int64_t(rng() % 601) - 300;
    }
    x[10] = 5;
    y[10] = es == 4 ? int64_t(std::numeric_limits<int32_t>::max()) : std::numeric_limits<int64_t>::max();
    auto as_type = [&](const std::vector<int64_t>& v) {
      std::vector<uint8_t> b(v.size() * es);
      for (size_t i = 0; i < v.size(); ++i) {
        if (es == 4) {
          const int32_t c = int32_t(v[i]);
          std::memcpy(&b[i * 4], &c, 4);
        } else {
          std::memcpy(&b[i * 8], &v[i], 8);
        }
      }
      return b;
    };
    const auto xb = as_type(x), yb = as_type(y);
    std::vector<uint8_t> want(n * es);
    for (size_t i = 0; i < n; ++i) {
      if (es == 4) {
        const int32_t c = int32_t(uint32_t(x[i]) + uint32_t(y[i]));
        std::memcpy(&want[i * 4], &c, 4);
      } else {
        const int64_t c = int64_t(uint64_t(x[i]) + uint64_t(y[i]));
        std::memcpy(&want[i * 8], &c, 8);
      }
    }
    // Variant 2: recvReduceSend through a stage whose prepared copy of the
    // input is writable: the nonzeros are added into that copy.
    struct CopyStage : prims::Stage {
      size_t es = 4;
      std::vector<uint64_t> buf;
      void* prepare(const void* src, size_t n) override {
        buf.resize((n * es + 7) / 8);
        std::memcpy(buf.data(), src, n * es);
        return buf.data();
      }
      void finish(const void*, const void*, size_t) override {}
    } stage;
    stage.es = es;
    const auto y_before = yb;
    std::vector<std::vector<uint8_t>> sent[3];
    for (int fused = 0; fused < 3; ++fused) {
      SCOPED_TRACE(testing::Message() << "esize " << es << " int_sum " << fused);
      Fifo ab(4096, 3), bc(4096, 3);
      FakeSend a_s(&ab), b_s(&bc);
      FakeRecv b_r(&ab), c_r(&bc);
      std::vector<uint8_t> b_out(n * es), got(n * es);
      prims::ChannelStats st[3];
      std::vector<uint64_t> scr[3] = {std::vector<uint64_t>(512), std::vector<uint64_t>(512),
                                      std::vector<uint64_t>(512)};
      std::thread ta([&] {
        auto a = args(t, prims::WireMode::Coded);
        a.enc.choice = codec::EncodeOptions::Choice::Sparse;
        a.enc.predictor = int(codec::Predictor::None);
        prims::Prims p(&a_s, nullptr, a, &st[0], scr[0].data());
        p.send(xb.data(), n);
      });
      std::thread tb([&] {
        auto a = args(t, prims::WireMode::Coded);
        a.int_sum = fused != 0;
        if (fused == 2) a.stage = &stage;
        prims::Prims p(&b_s, &b_r, a, &st[1], scr[1].data());
        if (fused == 2) {
          p.recvReduceSend(yb.data(), n);
        } else {
          p.recvReduceCopySend(yb.data(), b_out.data(), n);
        }
      });
      prims::Prims p(nullptr, &c_r, args(t, prims::WireMode::Coded), &st[2], scr[2].data());
      p.recv(got.data(), n);
      ta.join();
      tb.join();
      EXPECT_EQ(got, want);
      if (fused < 2) {
        EXPECT_EQ(b_out, want);
      }
      EXPECT_EQ(yb, y_before);  // the input itself is never written
      // a's slices are Sparse without a predictor: the fused path's input.
      for (const auto& b : ab.log) EXPECT_TRUE(codec::slice_adds_sparse(b.data(), b.size()));
      sent[fused] = bc.log;
    }
    EXPECT_EQ(sent[0], sent[1]);
    EXPECT_EQ(sent[0], sent[2]);
  }
}

TEST_P(PrimsModes, RecvReduceCopySendInPlace) {
  Fifo ab(1024, 2), bc(1024, 2);
  FakeSend a_s(&ab), b_s(&bc);
  FakeRecv b_r(&ab), c_r(&bc);
  const size_t n = 999;
  std::vector<float> x(n), y(n), got(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = float(i) * 0.5f;
    y[i] = 1.0f - float(i);
  }
  auto y_inplace = y;
  prims::ChannelStats st[3];
  std::vector<uint64_t> scr[3] = {std::vector<uint64_t>(256), std::vector<uint64_t>(256), std::vector<uint64_t>(256)};
  const auto m = GetParam();
  std::thread ta([&] {
    prims::Prims p(&a_s, nullptr, args(ElemType::F32, m, RedOp::Max), &st[0], scr[0].data());
    p.send(x.data(), n);
  });
  std::thread tb([&] {
    prims::Prims p(&b_s, &b_r, args(ElemType::F32, m, RedOp::Max), &st[1], scr[1].data());
    p.recvReduceCopySend(y_inplace.data(), y_inplace.data(), n);
  });
  prims::Prims p(nullptr, &c_r, args(ElemType::F32, m, RedOp::Max), &st[2], scr[2].data());
  p.recv(got.data(), n);
  ta.join();
  tb.join();
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(y_inplace[i], std::max(x[i], y[i]));
    ASSERT_EQ(got[i], y_inplace[i]);
  }
}

INSTANTIATE_TEST_SUITE_P(PrimsWire, PrimsModes, ::testing::Values(prims::WireMode::Raw, prims::WireMode::Coded));

TEST(PrimsErrors, CorruptSliceIsCorruptData) {
  Fifo f(256, 2);
  FakeSend s(&f);
  FakeRecv r(&f);
  uint8_t* slot = s.acquire(Clock::now() + std::chrono::seconds(1));
  std::memset(slot, 0x5A, 100);
  s.post(100);
  std::vector<int32_t> out(10);
  prims::ChannelStats st;
  std::vector<uint64_t> scr(64);
  prims::Prims p(nullptr, &r, args(ElemType::I32, prims::WireMode::Coded), &st, scr.data());
  EXPECT_THROW(p.recv(out.data(), 10), CorruptData);
}

TEST(PrimsErrors, WrongRawSizeIsCorruptData) {
  Fifo f(256, 2);
  FakeSend s(&f);
  FakeRecv r(&f);
  s.acquire(Clock::now() + std::chrono::seconds(1));
  s.post(12);
  std::vector<int32_t> out(10);
  prims::ChannelStats st;
  std::vector<uint64_t> scr(64);
  prims::Prims p(nullptr, &r, args(ElemType::I32, prims::WireMode::Raw), &st, scr.data());
  EXPECT_THROW(p.recv(out.data(), 10), CorruptData);
}

TEST(PrimsReduce, FloatMaxPropagatesNaNAndIntsWrap) {
  float a[3] = {1, std::nanf(""), 3}, b[3] = {std::nanf(""), 2, 1}, o[3];
  prims::reduce_fn(ElemType::F32, RedOp::Max)(o, a, b, 3);
  EXPECT_TRUE(std::isnan(o[0]));
  EXPECT_TRUE(std::isnan(o[1]));
  EXPECT_EQ(o[2], 3);
  int32_t x = INT32_MAX, y = 1, z;
  prims::reduce_fn(ElemType::I32, RedOp::Sum)(&z, &x, &y, 1);
  EXPECT_EQ(z, INT32_MIN);
  uint8_t p = 200, q = 100, s;
  prims::reduce_fn(ElemType::U8, RedOp::Sum)(&s, &p, &q, 1);
  EXPECT_EQ(s, 44);
}

}  // namespace
