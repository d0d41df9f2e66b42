// The C API (ncclz.h): ranks as threads, unique id from ncclzGetUniqueId,
// result codes instead of exceptions, the error strings.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "ncclz/cuda_support.hpp"
#include "ncclz/ncclz.h"

namespace {

struct CWorld {
  int n;
  std::vector<ncclzComm_t> comms;
  explicit CWorld(int nranks) : n(nranks), comms(static_cast<size_t>(nranks), nullptr) {
    ncclzUniqueId id;
    EXPECT_EQ(ncclzGetUniqueId(&id), ncclzSuccess);
    std::vector<std::thread> th;
    std::vector<ncclzResult_t> res(static_cast<size_t>(n), ncclzInternalError);
    for (int r = 0; r < n; ++r) {
      th.emplace_back([&, r] { res[size_t(r)] = ncclzCommInitRank(&comms[size_t(r)], n, id, r); });
    }
    for (auto& t : th) t.join();
    for (int r = 0; r < n; ++r) EXPECT_EQ(res[size_t(r)], ncclzSuccess) << ncclzGetLastError(nullptr);
  }
  ~CWorld() {
    for (auto c : comms) ncclzCommDestroy(c);
  }
  void run(const std::function<void(int, ncclzComm_t)>& fn) {
    std::vector<std::thread> th;
    for (int r = 0; r < n; ++r) th.emplace_back([&, r] { fn(r, comms[size_t(r)]); });
    for (auto& t : th) t.join();
  }
};

TEST(CApi, CollectivesAndStats) {
  CWorld w(3);
  const size_t n = 10001;
  w.run([&](int r, ncclzComm_t comm) {
    int count = 0, rank = -1;
    ASSERT_EQ(ncclzCommCount(comm, &count), ncclzSuccess);
    ASSERT_EQ(ncclzCommUserRank(comm, &rank), ncclzSuccess);
    EXPECT_EQ(count, 3);
    EXPECT_EQ(rank, r);

    // allreduce, lossy: within E of the exact sum.
    std::vector<float> x(n), y(n);
    for (size_t i = 0; i < n; ++i) x[i] = float(std::sin(0.001 * double(i) * (r + 1)));
    const double E = 1e-3;
    ASSERT_EQ(ncclzAllReduce(x.data(), y.data(), n, ncclzFloat32, ncclzSum, ncclzCompressionLossyAbs(E), comm),
              ncclzSuccess)
        << ncclzGetLastError(comm);
    for (size_t i = 0; i < n; ++i) {
      double ref = 0;
      for (int k = 0; k < 3; ++k) ref += double(float(std::sin(0.001 * double(i) * (k + 1))));
      ASSERT_LE(std::fabs(double(y[i]) - ref), E);
    }
    ncclzCallStats_t st;
    ASSERT_EQ(ncclzCommGetLastStats(comm, &st), ncclzSuccess);
    EXPECT_EQ(st.errorBound, E);
    EXPECT_GT(st.wireBytes, 0u);
    EXPECT_EQ(st.exactFallback, 0);
    EXPECT_EQ(st.onDevice, 0);  // host buffers
    EXPECT_GE(st.channels, 1);
    EXPECT_GT(st.sliceBytes, 0u);

    // allreduce, lossless: bit-identical to none.
    std::vector<float> a(n), b(n);
    ASSERT_EQ(ncclzAllReduce(x.data(), a.data(), n, ncclzFloat32, ncclzSum, ncclzCompressionNone(), comm),
              ncclzSuccess);
    ASSERT_EQ(ncclzAllReduce(x.data(), b.data(), n, ncclzFloat32, ncclzSum, ncclzCompressionLossless(), comm),
              ncclzSuccess);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), n * 4));

    // broadcast from rank 2, separate send/recv buffers.
    std::vector<int32_t> src(100), dst(100, -1);
    for (int i = 0; i < 100; ++i) src[size_t(i)] = r == 2 ? i * 3 : -7;
    ASSERT_EQ(ncclzBroadcast(src.data(), dst.data(), 100, ncclzInt32, 2, ncclzCompressionLossless(), comm),
              ncclzSuccess);
    for (int i = 0; i < 100; ++i) ASSERT_EQ(dst[size_t(i)], i * 3);

    // allgather and reduce-scatter.
    std::vector<double> mine(5, double(r)), all(15);
    ASSERT_EQ(ncclzAllGather(mine.data(), all.data(), 5, ncclzFloat64, ncclzCompressionNone(), comm), ncclzSuccess);
    for (int k = 0; k < 3; ++k) EXPECT_EQ(all[size_t(k) * 5 + 4], double(k));
    std::vector<double> part(5);
    ASSERT_EQ(ncclzReduceScatter(all.data(), part.data(), 5, ncclzFloat64, ncclzMax, ncclzCompressionNone(), comm),
              ncclzSuccess);
    EXPECT_EQ(part[0], double(r));

    // send/recv around the ring (even ranks send first).
    std::vector<float> out(50, float(r)), in(50);
    const int next = (r + 1) % 3, prev = (r + 2) % 3;
    if (r % 2 == 0) {
      ASSERT_EQ(ncclzSend(out.data(), 50, ncclzFloat32, next, ncclzCompressionNone(), comm), ncclzSuccess);
      ASSERT_EQ(ncclzRecv(in.data(), 50, ncclzFloat32, prev, ncclzCompressionNone(), comm), ncclzSuccess);
    } else {
      ASSERT_EQ(ncclzRecv(in.data(), 50, ncclzFloat32, prev, ncclzCompressionNone(), comm), ncclzSuccess);
      ASSERT_EQ(ncclzSend(out.data(), 50, ncclzFloat32, next, ncclzCompressionNone(), comm), ncclzSuccess);
    }
    EXPECT_EQ(in[7], float(prev));
    ASSERT_EQ(ncclzBarrier(comm), ncclzSuccess);
  });
}

// NCCL's int8, uint32 and uint64: reduced in their own order (a uint32 of
// 2^31 is the larger, an int8 of -100 the smaller), exact in both modes.
TEST(CApi, Int8Uint32AndUint64) {
  CWorld w(2);
  w.run([&](int r, ncclzComm_t comm) {
    for (ncclzCompression_t c : {ncclzCompressionNone(), ncclzCompressionLossless()}) {
      const uint32_t u[3] = {r ? 1u : 0x80000000u, 7u, r ? 0xffffffffu : 2u};
      uint32_t um[3];
      ASSERT_EQ(ncclzAllReduce(u, um, 3, ncclzUint32, ncclzMax, c, comm), ncclzSuccess) << ncclzGetLastError(comm);
      EXPECT_EQ(um[0], 0x80000000u);
      EXPECT_EQ(um[2], 0xffffffffu);
      ASSERT_EQ(ncclzAllReduce(u, um, 3, ncclzUint32, ncclzSum, c, comm), ncclzSuccess);
      EXPECT_EQ(um[2], 1u);  // wraps
      const int8_t s[2] = {int8_t(r ? -100 : 20), int8_t(r ? 100 : 50)};
      int8_t sm[2];
      ASSERT_EQ(ncclzAllReduce(s, sm, 2, ncclzInt8, ncclzMin, c, comm), ncclzSuccess);
      EXPECT_EQ(sm[0], int8_t(-100));
      ASSERT_EQ(ncclzAllReduce(s, sm, 2, ncclzInt8, ncclzAvg, c, comm), ncclzSuccess);
      EXPECT_EQ(sm[0], int8_t(-40));
      EXPECT_EQ(sm[1], int8_t(-53));  // the sum wraps (150 is -106), then divides
      const uint64_t v[1] = {r ? 3u : ~uint64_t(0)};
      uint64_t vm[1];
      ASSERT_EQ(ncclzAllReduce(v, vm, 1, ncclzUint64, ncclzAvg, c, comm), ncclzSuccess);
      EXPECT_EQ(vm[0], uint64_t(1));  // (2^64 - 1 + 3) mod 2^64 = 2, halved
    }
    uint32_t x = 1, y = 0;
    EXPECT_EQ(ncclzAllReduce(&x, &y, 1, ncclzUint32, ncclzSum, ncclzCompressionLossyAbs(0.5), comm),
              ncclzInvalidArgument);
    EXPECT_NE(std::string(ncclzGetLastError(comm)).find("uint32"), std::string::npos) << ncclzGetLastError(comm);
  });
}

// The 8-bit floats: codes as bytes (e4m3fn: 1.0 is 0x38, 1.5 0x3C, 3.0 0x44, 448 0x7E; e5m2: 1.0 is
// 0x3C), reduced in their own arithmetic; overflow gives NaN (e4m3fn); lossy refused.
TEST(CApi, Float8) {
  CWorld w(2);
  w.run([&](int r, ncclzComm_t comm) {
    const uint8_t a[3] = {0x38, uint8_t(r ? 0x3C : 0x38), 0x7E}, b[1] = {0x3C};  // 1, 1 or 1.5, 448; e5m2 1
    uint8_t s[3], m[3], e[1];
    ASSERT_EQ(ncclzAllReduce(a, s, 3, ncclzFloat8e4m3, ncclzSum, ncclzCompressionLossless(), comm), ncclzSuccess)
        << ncclzGetLastError(comm);
    EXPECT_EQ(s[0], 0x40);  // 2.0
    EXPECT_EQ(s[1], 0x42);  // 2.5
    EXPECT_EQ(s[2], 0x7F);  // 896: NaN, not 448
    ASSERT_EQ(ncclzAllReduce(a, m, 3, ncclzFloat8e4m3, ncclzMax, ncclzCompressionNone(), comm), ncclzSuccess);
    EXPECT_EQ(m[1], 0x3C);
    ASSERT_EQ(ncclzAllReduce(b, e, 1, ncclzFloat8e5m2, ncclzAvg, ncclzCompressionNone(), comm), ncclzSuccess);
    EXPECT_EQ(e[0], 0x3C);  // (1 + 1) / 2
    EXPECT_EQ(ncclzAllReduce(a, s, 3, ncclzFloat8e4m3, ncclzSum, ncclzCompressionLossyAbs(0.5), comm),
              ncclzInvalidArgument);
  });
}

// ncclzCommSplit: odd and even ranks, one rank in none; a null newcomm is an
// error on its rank only (which joins none).
TEST(CApi, CommSplit) {
  CWorld w(4);
  std::vector<ncclzComm_t> made(4, nullptr);
  std::vector<ncclzResult_t> res(4);
  w.run([&](int r, ncclzComm_t comm) {
    res[size_t(r)] = ncclzCommSplit(comm, r == 3 ? NCCLZ_SPLIT_NOCOLOR : r % 2, -r, &made[size_t(r)]);
  });
  for (int r = 0; r < 4; ++r) EXPECT_EQ(res[size_t(r)], ncclzSuccess) << ncclzGetLastError(nullptr);
  EXPECT_EQ(made[3], nullptr);
  int n = 0, rank = -1;
  ASSERT_EQ(ncclzCommCount(made[0], &n), ncclzSuccess);
  EXPECT_EQ(n, 2);  // ranks 0 and 2
  ASSERT_EQ(ncclzCommUserRank(made[0], &rank), ncclzSuccess);
  EXPECT_EQ(rank, 1);  // key -r: rank 2 first
  std::vector<std::thread> th;
  std::vector<float> sums(3);
  for (int r = 0; r < 3; ++r) {
    th.emplace_back([&, r] {
      float x = float(r + 1);
      EXPECT_EQ(
          ncclzAllReduce(&x, &sums[size_t(r)], 1, ncclzFloat32, ncclzSum, ncclzCompressionNone(), made[size_t(r)]),
          ncclzSuccess);
    });
  }
  for (auto& t : th) t.join();
  EXPECT_EQ(sums[0], 1.0f + 3.0f);
  EXPECT_EQ(sums[1], 2.0f);  // rank 1 alone
  for (ncclzComm_t c : made) ncclzCommDestroy(c);
  w.run([&](int r, ncclzComm_t comm) {
    ncclzComm_t mine = nullptr;
    res[size_t(r)] = ncclzCommSplit(comm, 0, 0, r == 0 ? nullptr : &mine);
    made[size_t(r)] = mine;
  });
  EXPECT_EQ(res[0], ncclzInvalidArgument);
  for (int r = 1; r < 4; ++r) {
    EXPECT_EQ(res[size_t(r)], ncclzSuccess);
    ASSERT_EQ(ncclzCommCount(made[size_t(r)], &n), ncclzSuccess);
    EXPECT_EQ(n, 3);
    ncclzCommDestroy(made[size_t(r)]);
  }
}

TEST(CApi, Version) {
  int v = -1;
  ASSERT_EQ(ncclzGetVersion(&v), ncclzSuccess);
  EXPECT_EQ(v, NCCLZ_VERSION_CODE);
  EXPECT_EQ(ncclzGetVersion(nullptr), ncclzInvalidArgument);
}

TEST(CApi, ErrorsAreResultCodes) {
  CWorld w(2);
  w.run([&](int r, ncclzComm_t comm) {
    std::vector<int32_t> a(8), b(8);
    EXPECT_EQ(ncclzAllReduce(a.data(), b.data(), 8, ncclzInt32, ncclzSum, ncclzCompressionLossyAbs(1), comm),
              ncclzInvalidArgument);
    EXPECT_NE(std::string(ncclzGetLastError(comm)).find("floating-point"), std::string::npos)
        << ncclzGetLastError(comm);
    EXPECT_EQ(ncclzAllReduce(a.data(), b.data(), 8, ncclzFloat32, ncclzProd, ncclzCompressionLossyAbs(1), comm),
              ncclzInvalidArgument);
    EXPECT_EQ(ncclzAllReduce(a.data(), b.data(), 8, ncclzDataType_t(99), ncclzSum, ncclzCompressionNone(), comm),
              ncclzInvalidArgument);
    EXPECT_EQ(ncclzBroadcast(a.data(), b.data(), 8, ncclzInt32, 5, ncclzCompressionNone(), comm), ncclzInvalidArgument);
    EXPECT_EQ(ncclzSend(a.data(), 8, ncclzInt32, r, ncclzCompressionNone(), comm), ncclzInvalidArgument);
    // Mismatched counts: a remote error on both ranks.
    EXPECT_EQ(ncclzAllReduce(a.data(), b.data(), r == 0 ? 8 : 7, ncclzInt32, ncclzSum, ncclzCompressionNone(), comm),
              ncclzRemoteError);
    EXPECT_EQ(ncclzAllReduce(a.data(), b.data(), 8, ncclzInt32, ncclzSum, ncclzCompressionNone(), comm), ncclzSuccess);
  });
  EXPECT_EQ(ncclzAllReduce(nullptr, nullptr, 0, ncclzFloat32, ncclzSum, ncclzCompressionNone(), nullptr),
            ncclzInvalidArgument);
  int count = 0;
  EXPECT_EQ(ncclzCommCount(nullptr, &count), ncclzInvalidArgument);
  EXPECT_STREQ(ncclzGetErrorString(ncclzSuccess), "no error");
  EXPECT_STRNE(ncclzGetErrorString(ncclzAborted), "");
}

// A call whose arguments the C API cannot convert (an unknown type, op or
// compression mode) on one rank only: that rank returns InvalidArgument, the
// others RemoteError naming it, and the next calls meet (before, that rank
// took no part: its next call met the others' refused one, and their sums
// came out of two different calls).
TEST(CApi, ACallOneRankCannotConvertKeepsTheRanksInStep) {
  CWorld w(3);
  w.run([&](int r, ncclzComm_t comm) {
    std::vector<float> a(100), b(100);
    auto fill = [&](int k) { std::fill(a.begin(), a.end(), float(10 * k + r)); };
    for (int bad = 0; bad < 3; ++bad) {  // three kinds of argument, each refused on another rank
      fill(0);
      ncclzDataType_t t = ncclzFloat32;
      ncclzRedOp_t op = ncclzSum;
      ncclzCompression_t z = ncclzCompressionNone();
      if (r == bad && bad == 0) t = ncclzDataType_t(99);
      if (r == bad && bad == 1) op = ncclzRedOp_t(42);
      if (r == bad && bad == 2) z.mode = ncclzCompressionMode_t(9);
      const ncclzResult_t res = ncclzAllReduce(a.data(), b.data(), 100, t, op, z, comm);
      if (r == bad) {
        EXPECT_EQ(res, ncclzInvalidArgument) << ncclzGetLastError(comm);
      } else {
        EXPECT_EQ(res, ncclzRemoteError) << ncclzGetLastError(comm);
        EXPECT_NE(std::string(ncclzGetLastError(comm)).find("rank " + std::to_string(bad)), std::string::npos)
            << ncclzGetLastError(comm);
      }
      fill(1);
      ASSERT_EQ(ncclzAllReduce(a.data(), b.data(), 100, ncclzFloat32, ncclzSum, ncclzCompressionNone(), comm),
                ncclzSuccess)
          << ncclzGetLastError(comm);
      EXPECT_EQ(b[0], 33.0f) << "rank " << r << " after a refusal on rank " << bad;
    }
    // A send of an unknown type: the receiver's recv fails, the next send meets the next recv.
    fill(2);
    if (r == 0) {
      EXPECT_EQ(ncclzSend(a.data(), 100, ncclzDataType_t(77), 1, ncclzCompressionNone(), comm), ncclzInvalidArgument);
      EXPECT_EQ(ncclzSend(a.data(), 100, ncclzFloat32, 1, ncclzCompressionNone(), comm), ncclzSuccess);
    } else if (r == 1) {
      EXPECT_EQ(ncclzRecv(b.data(), 100, ncclzFloat32, 0, ncclzCompressionNone(), comm), ncclzRemoteError);
      EXPECT_EQ(ncclzRecv(b.data(), 100, ncclzFloat32, 0, ncclzCompressionNone(), comm), ncclzSuccess)
          << ncclzGetLastError(comm);
      EXPECT_EQ(b[0], 20.0f);
    }
  });
}

TEST(CApi, RootedAndAllToAllCollectives) {
  CWorld w(3);
  w.run([&](int r, ncclzComm_t comm) {
    // reduce to rank 1, lossy: within E of the exact sum on the root; recvbuff unused elsewhere.
    const size_t n = 5000;
    std::vector<float> x(n), y(n, -1.f);
    auto value = [](int k, size_t i) { return float(std::cos(0.002 * double(i)) + 0.5 * k); };
    for (size_t i = 0; i < n; ++i) x[i] = value(r, i);
    const double E = 1e-3;
    ASSERT_EQ(ncclzReduce(x.data(), r == 1 ? y.data() : nullptr, n, ncclzFloat32, ncclzSum, 1,
                          ncclzCompressionLossyAbs(E), comm),
              ncclzSuccess)
        << ncclzGetLastError(comm);
    if (r == 1) {
      for (size_t i = 0; i < n; ++i) {
        double ref = 0;
        for (int k = 0; k < 3; ++k) ref += double(value(k, i));
        ASSERT_LE(std::fabs(double(y[i]) - ref), E);
      }
    }
    ncclzCallStats_t st;
    ASSERT_EQ(ncclzCommGetLastStats(comm, &st), ncclzSuccess);
    EXPECT_EQ(st.errorBound, E);

    // gather to rank 0 and scatter from rank 2, lossless (exact).
    std::vector<int64_t> mine(4, int64_t(r) * 10 + 1), gathered(12, -1), block(4, -1);
    ASSERT_EQ(ncclzGather(mine.data(), gathered.data(), 4, ncclzInt64, 0, ncclzCompressionLossless(), comm),
              ncclzSuccess);
    if (r == 0) {
      for (int k = 0; k < 3; ++k) EXPECT_EQ(gathered[size_t(k) * 4 + 3], int64_t(k) * 10 + 1);
    }
    std::vector<int64_t> blocks(12);
    for (size_t i = 0; i < 12; ++i) blocks[i] = int64_t(i) * (r == 2 ? 1 : -1);
    ASSERT_EQ(
        ncclzScatter(r == 2 ? blocks.data() : nullptr, block.data(), 4, ncclzInt64, 2, ncclzCompressionNone(), comm),
        ncclzSuccess);
    EXPECT_EQ(block[0], int64_t(r) * 4);

    // all_to_all and all_to_allv: block j to rank j.
    std::vector<int32_t> a(6), b(6, -1);
    for (int i = 0; i < 6; ++i) a[size_t(i)] = r * 100 + i;
    ASSERT_EQ(ncclzAllToAll(a.data(), b.data(), 2, ncclzInt32, ncclzCompressionLossless(), comm), ncclzSuccess);
    for (int j = 0; j < 3; ++j) EXPECT_EQ(b[size_t(j) * 2 + 1], j * 100 + r * 2 + 1);
    // rank i sends i+j elements to rank j
    std::vector<size_t> sc(3), rc(3);
    for (int j = 0; j < 3; ++j) {
      sc[size_t(j)] = size_t(r + j);
      rc[size_t(j)] = size_t(j + r);
    }
    std::vector<int32_t> vin(size_t(3 * r + 3), r), vout(size_t(3 * r + 3), -1);
    ASSERT_EQ(ncclzAllToAllv(vin.data(), sc.data(), vout.data(), rc.data(), ncclzInt32, ncclzCompressionNone(), comm),
              ncclzSuccess)
        << ncclzGetLastError(comm);
    size_t at = 0;
    for (int j = 0; j < 3; ++j) {
      for (size_t i = 0; i < rc[size_t(j)]; ++i) EXPECT_EQ(vout[at++], j);
    }
    // mismatched counts: a remote error on every rank, the communicator still usable
    if (r == 0) sc[1] += 1;
    EXPECT_EQ(ncclzAllToAllv(vin.data(), sc.data(), vout.data(), rc.data(), ncclzInt32, ncclzCompressionNone(), comm),
              ncclzRemoteError);
    EXPECT_NE(std::string(ncclzGetLastError(comm)).find("rank 0 sends 2 elements to rank 1"), std::string::npos)
        << ncclzGetLastError(comm);
    EXPECT_EQ(ncclzReduce(x.data(), x.data(), n, ncclzFloat32, ncclzProd, 0, ncclzCompressionLossyAbs(1), comm),
              ncclzInvalidArgument);
    ASSERT_EQ(ncclzBarrier(comm), ncclzSuccess);
  });
}

TEST(CApi, AbortWakesABlockedCall) {
  CWorld w(2);
  ncclzResult_t res = ncclzSuccess;
  std::thread blocked([&] {
    std::vector<float> a(16), b(16);
    // Rank 1 never joins.
    res = ncclzAllReduce(a.data(), b.data(), 16, ncclzFloat32, ncclzSum, ncclzCompressionNone(), w.comms[0]);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(ncclzCommAbort(w.comms[0]), ncclzSuccess);  // aborts, waits for the call to leave, frees
  blocked.join();
  w.comms[0] = nullptr;
  EXPECT_EQ(res, ncclzAborted);
}

TEST(CApi, InitFromEnvNeedsRankAndWorldSize) {
  // No defaults (docs/ENVIRONMENT.md): without a launcher's RANK/WORLD_SIZE it
  // is an error, not a silent job of one rank.
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  ncclzComm_t comm = nullptr;
  EXPECT_EQ(ncclzCommInitFromEnv(&comm), ncclzInvalidArgument);
  EXPECT_EQ(comm, nullptr);
  EXPECT_NE(std::string(ncclzGetLastError(nullptr)).find("RANK and WORLD_SIZE must be set"), std::string::npos);
}

TEST(CApi, InitFromEnvSingleRank) {
  // One rank: RANK/WORLD_SIZE/MASTER_* from the environment (restored after).
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "1", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", "0", 1);
  ncclzComm_t comm = nullptr;
  const ncclzResult_t r = ncclzCommInitFromEnv(&comm);
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  unsetenv("MASTER_ADDR");
  unsetenv("MASTER_PORT");
  ASSERT_EQ(r, ncclzSuccess) << ncclzGetLastError(nullptr);
  int n = 0;
  ASSERT_EQ(ncclzCommCount(comm, &n), ncclzSuccess);
  EXPECT_EQ(n, 1);
  float x[3] = {1, 2, 3}, y[3] = {0, 0, 0};
  ASSERT_EQ(ncclzAllReduce(x, y, 3, ncclzFloat32, ncclzAvg, ncclzCompressionLossyRel(1e-3), comm), ncclzSuccess);
  EXPECT_NEAR(y[2], 3.0f, 2e-3);
  EXPECT_EQ(ncclzCommDestroy(comm), ncclzSuccess);
}

}  // namespace

namespace {

// ncclzSetBufferDevice: host memory again with -1; device buffers need a CUDA
// build, and a device that is there: on a machine without one a call fails on
// every rank, naming the device, and the communicator goes on with host buffers.
TEST(CApi, SetBufferDevice) {
  EXPECT_EQ(ncclzSetBufferDevice(-1), ncclzSuccess);
  if (!ncclz::cuda::built_with_cuda()) {
    EXPECT_EQ(ncclzSetBufferDevice(0), ncclzInvalidArgument);
    EXPECT_NE(std::string(ncclzGetLastError(nullptr)).find("without CUDA"), std::string::npos);
    return;
  }
  if (ncclz::cuda::device_count() > 0) GTEST_SKIP() << "a GPU is there (tests/cpp/test_cuda_comm.cpp uses it)";
  CWorld w(2);
  const size_t n = 64;
  w.run([&](int r, ncclzComm_t comm) {
    std::vector<float> x(n, float(r + 1)), y(n);
    ASSERT_EQ(ncclzSetBufferDevice(0), ncclzSuccess);
    EXPECT_EQ(ncclzAllReduce(x.data(), y.data(), n, ncclzFloat32, ncclzSum, ncclzCompressionLossyAbs(1e-3), comm),
              ncclzInvalidArgument);
    EXPECT_NE(std::string(ncclzGetLastError(comm)).find("CUDA device 0"), std::string::npos) << ncclzGetLastError(comm);
    ASSERT_EQ(ncclzSetBufferDevice(-1), ncclzSuccess);
    ASSERT_EQ(ncclzAllReduce(x.data(), y.data(), n, ncclzFloat32, ncclzSum, ncclzCompressionNone(), comm),
              ncclzSuccess);
    for (float v : y) EXPECT_EQ(v, 3.0f);
  });
}

}  // namespace

// ncclzGroupStart / ncclzGroupEnd: a ring shift that single calls could not
// complete, with a collective after it in the same group (in order).
TEST(CApi, GroupRingShiftAndACollective) {
  CWorld w(3);
  const size_t n = 20000;
  const double E = 1e-3;
  std::vector<ncclzResult_t> res(3, ncclzInternalError);
  w.run([&](int r, ncclzComm_t comm) {
    std::vector<float> x(n), y(n, 0.0f);
    for (size_t i = 0; i < n; ++i) x[i] = float(std::sin(0.001 * double(i)) + r);
    float one = 1.0f, total = 0.0f;
    const ncclzCompression_t c = ncclzCompressionLossyAbs(E);
    EXPECT_EQ(ncclzGroupStart(), ncclzSuccess);
    EXPECT_EQ(ncclzSend(x.data(), n, ncclzFloat32, (r + 1) % 3, c, comm), ncclzSuccess);
    EXPECT_EQ(ncclzRecv(y.data(), n, ncclzFloat32, (r + 2) % 3, c, comm), ncclzSuccess);
    EXPECT_EQ(ncclzAllReduce(&one, &total, 1, ncclzFloat32, ncclzSum, ncclzCompressionNone(), comm), ncclzSuccess);
    EXPECT_EQ(total, 0.0f) << "queued until ncclzGroupEnd";
    res[size_t(r)] = ncclzGroupEnd();
    EXPECT_EQ(total, 3.0f);
    const int from = (r + 2) % 3;
    for (size_t i = 0; i < n; ++i) {
      ASSERT_LE(std::fabs(double(y[i]) - (std::sin(0.001 * double(i)) + from)), E + 1e-6) << i;
    }
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(res[size_t(r)], ncclzSuccess) << ncclzGetLastError(nullptr);
  EXPECT_EQ(ncclzGroupEnd(), ncclzInvalidArgument);
  EXPECT_NE(std::string(ncclzGetLastError(nullptr)).find("no group is open"), std::string::npos);
}

// NCCL's grouped and ungrouped calls on the two ends of a pair: rank 0
// groups a send and a recv, rank 1 calls ncclzSend then ncclzRecv (and then
// the other way round); lossless, every byte.
TEST(CApi, AGroupMeetsUngroupedCalls) {
  CWorld w(2);
  const size_t n = 30000;
  for (bool recv_first : {false, true}) {
    w.run([&](int r, ncclzComm_t comm) {
      const int peer = 1 - r;
      std::vector<int32_t> x(n), y(n, -1);
      for (size_t i = 0; i < n; ++i) x[i] = int32_t(i % 1000) * (r + 1);
      const ncclzCompression_t c = ncclzCompressionLossless();
      if (r == 0) {
        EXPECT_EQ(ncclzGroupStart(), ncclzSuccess);
        EXPECT_EQ(ncclzSend(x.data(), n, ncclzInt32, peer, c, comm), ncclzSuccess);
        EXPECT_EQ(ncclzRecv(y.data(), n, ncclzInt32, peer, c, comm), ncclzSuccess);
        EXPECT_EQ(ncclzGroupEnd(), ncclzSuccess) << ncclzGetLastError(nullptr);
      } else if (recv_first) {
        EXPECT_EQ(ncclzRecv(y.data(), n, ncclzInt32, peer, c, comm), ncclzSuccess) << ncclzGetLastError(nullptr);
        EXPECT_EQ(ncclzSend(x.data(), n, ncclzInt32, peer, c, comm), ncclzSuccess) << ncclzGetLastError(nullptr);
      } else {
        EXPECT_EQ(ncclzSend(x.data(), n, ncclzInt32, peer, c, comm), ncclzSuccess) << ncclzGetLastError(nullptr);
        EXPECT_EQ(ncclzRecv(y.data(), n, ncclzInt32, peer, c, comm), ncclzSuccess) << ncclzGetLastError(nullptr);
      }
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(y[i], int32_t(i % 1000) * (peer + 1)) << "rank " << r << ", " << i;
    });
  }
}

// One thread drives every rank's communicator (NCCL's single-process,
// several-devices pattern): the group runs them at once.
TEST(CApi, GroupDrivesSeveralCommunicatorsFromOneThread) {
  CWorld w(3);
  float x[3] = {1.0f, 2.0f, 4.0f}, y[3] = {};
  ASSERT_EQ(ncclzGroupStart(), ncclzSuccess);
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(ncclzAllReduce(&x[r], &y[r], 1, ncclzFloat32, ncclzSum, ncclzCompressionNone(), w.comms[size_t(r)]),
              ncclzSuccess);
  }
  ASSERT_EQ(ncclzGroupEnd(), ncclzSuccess) << ncclzGetLastError(nullptr);
  for (float v : y) EXPECT_EQ(v, 7.0f);
  // A grouped send with a type this API cannot take fails at once, and its
  // peer's recv fails at ncclzGroupEnd naming it.
  std::vector<ncclzResult_t> at_call(2), at_end(2);
  ASSERT_EQ(ncclzGroupStart(), ncclzSuccess);
  at_call[0] = ncclzSend(x, 1, ncclzDataType_t(99), 1, ncclzCompressionNone(), w.comms[0]);
  at_call[1] = ncclzRecv(y, 1, ncclzFloat32, 0, ncclzCompressionNone(), w.comms[1]);
  at_end[0] = ncclzGroupEnd();
  EXPECT_EQ(at_call[0], ncclzInvalidArgument);
  EXPECT_EQ(at_call[1], ncclzSuccess);
  EXPECT_EQ(at_end[0], ncclzInvalidArgument);
}

// NCCL's single-thread creation: ncclzCommInitRank of every rank inside a
// group returns handles at once and creates the communicators at
// ncclzGroupEnd, concurrently (outside a group the first would wait for the
// others until its timeout); a call queued for them in the same group runs
// after; ncclzCommSplit of every rank from one thread in a group; destroy is
// refused while the thread's open group holds calls of the communicator, and
// abort cancels them.
TEST(CApi, GroupCreatesAndSplitsSeveralRanksFromOneThread) {
  const int n = 3;
  ncclzUniqueId id;
  ASSERT_EQ(ncclzGetUniqueId(&id), ncclzSuccess);
  std::vector<ncclzComm_t> comms(n, nullptr);
  float x[n] = {1.0f, 2.0f, 4.0f}, y[n] = {};
  ASSERT_EQ(ncclzGroupStart(), ncclzSuccess);
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(ncclzCommInitRank(&comms[size_t(r)], n, id, r), ncclzSuccess);
    ASSERT_NE(comms[size_t(r)], nullptr);
    int size = 0;
    EXPECT_EQ(ncclzCommCount(comms[size_t(r)], &size), ncclzInvalidArgument) << "made before the group's end";
    ASSERT_EQ(ncclzAllReduce(&x[r], &y[r], 1, ncclzFloat32, ncclzSum, ncclzCompressionNone(), comms[size_t(r)]),
              ncclzSuccess);
  }
  ASSERT_EQ(ncclzGroupEnd(), ncclzSuccess) << ncclzGetLastError(nullptr);
  for (int r = 0; r < n; ++r) {
    int size = 0, rank = -1;
    ASSERT_EQ(ncclzCommCount(comms[size_t(r)], &size), ncclzSuccess);
    ASSERT_EQ(ncclzCommUserRank(comms[size_t(r)], &rank), ncclzSuccess);
    EXPECT_EQ(size, n);
    EXPECT_EQ(rank, r);
    EXPECT_EQ(y[r], 7.0f) << "rank " << r;
  }
  // Split every rank from this thread: ranks 0 and 2 (color 0), rank 1 alone (color 1).
  std::vector<ncclzComm_t> sub(n, nullptr);
  ASSERT_EQ(ncclzGroupStart(), ncclzSuccess);
  for (int r = 0; r < n; ++r) ASSERT_EQ(ncclzCommSplit(comms[size_t(r)], r % 2, r, &sub[size_t(r)]), ncclzSuccess);
  ASSERT_EQ(ncclzGroupEnd(), ncclzSuccess) << ncclzGetLastError(nullptr);
  for (int r = 0; r < n; ++r) {
    int size = 0;
    ASSERT_NE(sub[size_t(r)], nullptr) << "rank " << r;
    ASSERT_EQ(ncclzCommCount(sub[size_t(r)], &size), ncclzSuccess);
    EXPECT_EQ(size, r % 2 ? 1 : 2);
  }
  ASSERT_EQ(ncclzGroupStart(), ncclzSuccess);
  for (int r = 0; r < n; ++r) {
    y[r] = 0;
    ASSERT_EQ(ncclzAllReduce(&x[r], &y[r], 1, ncclzFloat32, ncclzSum, ncclzCompressionNone(), sub[size_t(r)]),
              ncclzSuccess);
  }
  // Destroying a communicator with a call queued here is refused; the group still runs it.
  EXPECT_EQ(ncclzCommDestroy(sub[0]), ncclzInvalidArgument);
  EXPECT_NE(std::string(ncclzGetLastError(nullptr)).find("end the group first"), std::string::npos);
  ASSERT_EQ(ncclzGroupEnd(), ncclzSuccess) << ncclzGetLastError(nullptr);
  EXPECT_EQ(y[0], 5.0f);
  EXPECT_EQ(y[2], 5.0f);
  EXPECT_EQ(y[1], 2.0f);
  // Abort cancels the calls queued for it (rank 1's communicator of one rank).
  ASSERT_EQ(ncclzGroupStart(), ncclzSuccess);
  ASSERT_EQ(ncclzAllReduce(&x[1], &y[1], 1, ncclzFloat32, ncclzSum, ncclzCompressionNone(), sub[1]), ncclzSuccess);
  ASSERT_EQ(ncclzCommAbort(sub[1]), ncclzSuccess);
  ASSERT_EQ(ncclzGroupEnd(), ncclzSuccess);
  for (int r : {0, 2}) EXPECT_EQ(ncclzCommDestroy(sub[size_t(r)]), ncclzSuccess);
  for (ncclzComm_t c : comms) EXPECT_EQ(ncclzCommDestroy(c), ncclzSuccess);
}

// A creation that fails at ncclzGroupEnd (a rank of 2 whose peer never
// comes: the timeout) is the group's error, and the handle says why.
TEST(CApi, GroupCreationThatFailsIsTheGroupsError) {
  ncclzUniqueId id;
  ASSERT_EQ(ncclzGetUniqueId(&id), ncclzSuccess);
  const char* old = std::getenv("NCCLZ_TIMEOUT");
  const std::string saved = old ? old : "";
  setenv("NCCLZ_TIMEOUT", "1", 1);
  ncclzComm_t c = nullptr;
  ASSERT_EQ(ncclzGroupStart(), ncclzSuccess);
  const ncclzResult_t made = ncclzCommInitRank(&c, 2, id, 1);
  if (old) {
    setenv("NCCLZ_TIMEOUT", saved.c_str(), 1);
  } else {
    unsetenv("NCCLZ_TIMEOUT");
  }
  ASSERT_EQ(made, ncclzSuccess);
  const ncclzResult_t end = ncclzGroupEnd();
  EXPECT_NE(end, ncclzSuccess);
  int size = 0;
  EXPECT_EQ(ncclzCommCount(c, &size), ncclzInvalidArgument);
  EXPECT_NE(std::string(ncclzGetLastError(c)).find("was not created"), std::string::npos) << ncclzGetLastError(c);
  EXPECT_EQ(ncclzCommDestroy(c), ncclzSuccess);
}
