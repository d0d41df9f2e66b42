// The device selector and Sparse slices on the device (cuda/select_kernels.cu,
// cuda/sparse_device.cuh) against the CPU codec: selecting encodes
// byte-identical to encode_slice with the same options and allow_rans =
// false, over data that makes each choice win (Raw, Block with each
// predictor, Sparse / zero elision); device slices decoding on the CPU and
// CPU Sparse slices on the device; corrupt Sparse slices getting the CPU
// decoder's status; the fused quantize + select against quantize + select.
//
// Built like test_cuda_codec.cpp: with CUDA (every test skips without a
// device, fails under NCCLZ_REQUIRE_GPU=1) and in the CPU emulator
// (tools/cuda_emu; `run.sh ci` runs these on every CPU CI run).
#if defined(NCCLZ_WITH_CUDA)

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "codec/slice.hpp"
#include "cuda_test_util.hpp"
#include "ncclz/cuda_codec.hpp"
#include "ncclz/cuda_support.hpp"

using namespace ncclz::codec;
namespace nc = ncclz::cuda;

namespace {

using ncclz_test::code_type;
using ncclz_test::DevBuf;
using ncclz_test::quick;
using ncclz_test::to_device;

nc::DeviceCodec& dev() {
  static nc::DeviceCodec* c = new nc::DeviceCodec(nullptr);
  return *c;
}

// Data that makes each choice win.
enum class Data { Zeros, Constant, MostlyZero, SteppedRuns, Smooth, Linear, SmallNoise, Random, Grid };
const char* data_name(Data d) {
  switch (d) {
    case Data::Zeros: return "zeros";               // Sparse with k = 0 (zero elision)
    case Data::Constant: return "constant";         // Sparse after Delta1 (one nonzero)
    case Data::MostlyZero: return "mostly-zero";    // Sparse, predictor None
    case Data::SteppedRuns: return "stepped-runs";  // Sparse after Delta1
    case Data::Smooth: return "smooth";             // Block, Delta1/Delta2
    case Data::Linear: return "kinked-linear";      // Delta2 residuals zero but at the kinks: Sparse
    case Data::SmallNoise: return "small-noise";    // Block, None
    case Data::Random: return "random";             // Raw
    case Data::Grid: return "grid";                 // a 2D field (Lorenzo candidates)
  }
  return "?";
}
constexpr Data kAllData[] = {Data::Zeros,  Data::Constant,   Data::MostlyZero, Data::SteppedRuns, Data::Smooth,
                             Data::Linear, Data::SmallNoise, Data::Random,     Data::Grid};

template <class Code>
std::vector<Code> make_data(size_t n, Data d, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Code> q(n);
  std::normal_distribution<double> g(0, 1);
  using U = std::make_unsigned_t<Code>;
  for (size_t i = 0; i < n; ++i) {
    switch (d) {
      case Data::Zeros: q[i] = 0; break;
      case Data::Constant: q[i] = Code(-123457); break;
      case Data::MostlyZero: {
        const uint64_t r = rng();
        q[i] = r % 100 < 4 ? Code(U(rng() >> (r % 2 ? 60 : 20))) - Code(r % 2 ? 8 : 0) : Code(0);
        if (q[i] == 0 && r % 100 < 4) q[i] = 1;
        break;
      }
      case Data::SteppedRuns:
        q[i] = i == 0 ? Code(5) : (rng() % 50 == 0 ? Code(q[i - 1] + Code(rng() % 1000) - 500) : q[i - 1]);
        break;
      case Data::Smooth: q[i] = Code(std::llround(3000.0 * std::sin(double(i) * 0.001 + seed) + g(rng) * 2)); break;
      case Data::Linear: {  // slope changes every ~60 codes
        static thread_local int64_t slope = 0;
        if (i == 0 || rng() % 60 == 0) slope = int64_t(rng() % 2001) - 1000;
        q[i] = i == 0 ? Code(7) : Code(U(U(q[i - 1]) + U(slope)));
        break;
      }
      case Data::SmallNoise: q[i] = Code(std::llround(g(rng) * 5)); break;
      case Data::Random: q[i] = Code(U(rng())); break;
      case Data::Grid: {
        const size_t x = i % 50, y = i / 50;
        q[i] = Code(std::llround(100.0 * std::sin(0.05 * double(x)) * std::cos(0.03 * double(y)) * 40));
        break;
      }
    }
  }
  return q;
}

// The CPU's slices of a batch: slice k of q (slice_len codes, the last one
// shorter) encoded by encode_slice(opt) into a slot of `slot` bytes; sizes
// (0 where not Ok) and statuses.
template <class Code>
void cpu_batch(const std::vector<Code>& q, uint32_t L, size_t slot, const EncodeOptions& opt, std::vector<uint8_t>* out,
               std::vector<uint64_t>* sizes, std::vector<int>* status, std::vector<SliceInfo>* infos) {
  const size_t S = (q.size() + L - 1) / L;
  out->assign(S * slot, 0);
  sizes->assign(S, 0);
  status->assign(S, 0);
  infos->assign(S, SliceInfo{});
  for (size_t k = 0; k < S; ++k) {
    const size_t cnt = std::min<size_t>(L, q.size() - k * L);
    SliceInfo info;
    const Status s =
        encode_slice(q.data() + k * L, code_type<Code>(), uint32_t(cnt), out->data() + k * slot, slot, opt, &info);
    (*status)[k] = int(s);
    (*sizes)[k] = s == Status::Ok ? info.bytes : 0;
    (*infos)[k] = info;
  }
}

using Tally = std::map<std::pair<int, int>, int>;  // (codec, predictor) -> slices

// Device selecting encode of q vs the CPU's encode_slice with allow_rans =
// false: sizes, statuses, bytes; then the device's slices decode on the CPU
// and on the device to q. Adds the choices to *tally.
template <class Code>
void select_matches_cpu(const std::vector<Code>& q, uint32_t L, const EncodeOptions& opt_in, size_t slot, Tally* tally,
                        const std::string& what) {
  SCOPED_TRACE(what);
  EncodeOptions opt = opt_in;
  opt.allow_rans = false;
  const size_t n = q.size(), S = (n + L - 1) / L;
  std::vector<uint8_t> want;
  std::vector<uint64_t> wsizes;
  std::vector<int> wstatus;
  std::vector<SliceInfo> infos;
  cpu_batch(q, L, slot, opt, &want, &wsizes, &wstatus, &infos);
  auto dq = to_device(q);
  DevBuf ddst(S * slot, 0), dsizes(S * 8), dstatus(S * 4);
  LAUNCH_OK(dev().encode_slices_select_async(dq->get(), code_type<Code>(), n, L, opt_in, ddst.get<uint8_t>(), slot,
                                             dsizes.get<uint64_t>(), dstatus.get<int>()));
  const auto got = ddst.download<uint8_t>(S * slot);
  const auto gsizes = dsizes.download<uint64_t>(S);
  const auto gstatus = dstatus.download<int>(S);
  for (size_t k = 0; k < S; ++k) {
    ASSERT_EQ(gstatus[k], wstatus[k]) << "slice " << k;
    SliceHeader gh;
    const bool gh_ok = read_header(got.data() + k * slot, slot, &gh) == Status::Ok;
    ASSERT_EQ(gsizes[k], wsizes[k]) << "slice " << k << " cpu codec " << int(infos[k].codec) << " predictor "
                                    << int(infos[k].predictor) << "; device codec " << (gh_ok ? int(gh.codec) : -1)
                                    << " predictor " << (gh_ok ? int(gh.predictor) : -1);
    for (size_t b = 0; b < wsizes[k]; ++b)
      ASSERT_EQ(got[k * slot + b], want[k * slot + b])
          << "slice " << k << ": first difference at byte " << b << " (cpu codec " << int(infos[k].codec)
          << ", predictor " << int(infos[k].predictor) << ", " << wsizes[k] << " bytes)";
    if (wstatus[k] == int(Status::Ok)) ++(*tally)[{int(infos[k].codec), int(infos[k].predictor)}];
  }
  if (std::count(wstatus.begin(), wstatus.end(), int(Status::Ok)) != long(S)) return;  // NoSpace: nothing to decode
  // The device's slices on the CPU.
  for (size_t k = 0; k < S; ++k) {
    const size_t cnt = std::min<size_t>(L, n - k * L);
    std::vector<Code> back(cnt);
    ASSERT_EQ(decode_slice(got.data() + k * slot, gsizes[k], code_type<Code>(), uint32_t(cnt), back.data()),
              Status::Ok);
    ASSERT_TRUE(std::equal(back.begin(), back.end(), q.begin() + long(k * L))) << "slice " << k;
  }
  // And on the device (exact lengths per slot).
  auto dlens = to_device(gsizes);
  DevBuf dout(n * sizeof(Code)), dst2(S * 4);
  LAUNCH_OK(dev().decode_slices_async(ddst.get<uint8_t>(), slot, dlens->get<uint64_t>(), n, L, code_type<Code>(),
                                      dout.get(), dst2.get<int>()));
  const auto st2 = dst2.download<int>(S);
  for (size_t k = 0; k < S; ++k) ASSERT_EQ(st2[k], int(Status::Ok)) << "device decode, slice " << k;
  ASSERT_TRUE(dout.download<Code>(n) == q) << "device decode";
}

// (Sparse with Delta1/Delta2 wins only on slices of tens of thousands of
// codes: on short ones Rans's estimate beats Sparse's, and without Rans the
// choice is Block.)
template <class Code>
void select_over_data(uint32_t seed0) {
  Tally tally;
  uint32_t seed = seed0;
  const std::vector<std::pair<size_t, uint32_t>> shapes =
      quick() ? std::vector<std::pair<size_t, uint32_t>>{{5000, 2048}, {700, 256}, {65537, 32768}}
              : std::vector<std::pair<size_t, uint32_t>>{{5000, 2048},   {20001, 20001}, {700, 256},
                                                         {65537, 16384}, {100, 7},       {131072, 65536}};
  for (auto [n, L] : shapes) {
    for (Data d : kAllData) {
      const auto q = make_data<Code>(n, d, seed++);
      EncodeOptions opt;
      if (d == Data::Grid) opt.row = 50;  // Lorenzo2D is a candidate
      select_matches_cpu(q, L, opt, nc::slice_slot_bytes(code_type<Code>(), L), &tally,
                         std::string("n=") + std::to_string(n) + " L=" + std::to_string(L) + " " + data_name(d));
      if (testing::Test::HasFatalFailure()) return;
    }
  }
  // Each choice was made at least once (else the data above does not test it).
  auto made = [&](Codec c, Predictor p) { return tally.count({int(c), int(p)}) > 0; };
  EXPECT_TRUE(made(Codec::Raw, Predictor::None));
  EXPECT_TRUE(made(Codec::Block, Predictor::None));
  EXPECT_TRUE(made(Codec::Block, Predictor::Delta1) || made(Codec::Block, Predictor::Delta2));
  EXPECT_TRUE(made(Codec::Sparse, Predictor::None));
  EXPECT_TRUE(made(Codec::Sparse, Predictor::Delta1));
  EXPECT_TRUE(made(Codec::Sparse, Predictor::Delta2));
  std::string seen;
  for (auto& [cp, count] : tally)
    seen +=
        " (codec " + std::to_string(cp.first) + ", pred " + std::to_string(cp.second) + "): " + std::to_string(count);
  testing::Test::RecordProperty("choices", seen);
  std::printf("choices (codec, predictor): slices:%s\n", seen.c_str());
}

TEST(CudaSelect, SlicesMatchCpuI32) {
  SKIP_WITHOUT_GPU();
  select_over_data<int32_t>(1);
}

TEST(CudaSelect, SlicesMatchCpuI64) {
  SKIP_WITHOUT_GPU();
  select_over_data<int64_t>(1000);
}

// Every option the rule reads: forced codecs and predictors, the margins, the
// sample's stride and cap, a grid (Lorenzo2D/3D), a slot too small for Raw.
TEST(CudaSelect, OptionsMatchCpu) {
  SKIP_WITHOUT_GPU();
  Tally tally;
  const size_t n = 12000;
  const uint32_t L = 3000;
  for (Data d : {Data::MostlyZero, Data::Smooth, Data::Random, Data::Grid, Data::SteppedRuns}) {
    const auto q = make_data<int32_t>(n, d, 77 + uint32_t(d));
    std::vector<std::pair<std::string, EncodeOptions>> cases;
    EncodeOptions o;
    o.choice = EncodeOptions::Choice::Block;
    cases.push_back({"block", o});
    o.predictor = 2;
    cases.push_back({"block+delta2", o});
    o = EncodeOptions{};
    o.choice = EncodeOptions::Choice::Sparse;
    cases.push_back({"sparse", o});
    o.predictor = 1;
    cases.push_back({"sparse+delta1", o});
    o = EncodeOptions{};
    o.choice = EncodeOptions::Choice::Raw;
    cases.push_back({"raw", o});
    o = EncodeOptions{};
    o.predictor = 1;
    cases.push_back({"auto+delta1", o});
    o = EncodeOptions{};
    o.sample_every = 1;
    o.max_sample_blocks = 0;
    cases.push_back({"every block", o});
    o = EncodeOptions{};
    o.sample_every = 3;
    o.max_sample_blocks = 5;
    cases.push_back({"5 blocks", o});
    o = EncodeOptions{};
    o.sparse_min_zeros = 0.2;
    o.sparse_fast_zeros = 0.3;
    o.rans_margin = 0;
    cases.push_back({"eager sparse", o});
    o = EncodeOptions{};
    o.sparse_min_zeros = 2;
    cases.push_back({"no sparse", o});
    o = EncodeOptions{};
    o.row = 50;
    o.plane = 1000;
    cases.push_back({"grid 3d", o});
    o.choice = EncodeOptions::Choice::Sparse;
    o.predictor = 4;
    cases.push_back({"sparse+lorenzo3d", o});
    for (auto& [name, opt] : cases) {
      select_matches_cpu(q, L, opt, nc::slice_slot_bytes(ElemType::I32, L), &tally,
                         std::string(data_name(d)) + " " + name);
      if (HasFatalFailure()) return;
    }
    // A slot that holds no Raw slice: NoSpace where the coder does not fit either.
    select_matches_cpu(q, L, EncodeOptions{}, kHeaderBytes + L, &tally, std::string(data_name(d)) + " small slot");
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(tally.count({int(Codec::Block), int(Predictor::Lorenzo2D)}) +
                tally.count({int(Codec::Block), int(Predictor::Lorenzo3D)}) +
                tally.count({int(Codec::Sparse), int(Predictor::Lorenzo3D)}),
            0u);
}

// allow_rans = false changes only the slices where the CPU would pick Rans.
TEST(CudaSelect, AllowRansOnlyRemovesRans) {
  const size_t n = 4096;
  int rans = 0;
  for (int seed = 0; seed < 40; ++seed) {
    std::mt19937 rng{uint32_t(seed)};
    std::geometric_distribution<int> geo(0.02 + 0.02 * (seed % 10));
    std::vector<int32_t> q(n);
    for (auto& v : q) v = (rng() % 2 ? 1 : -1) * geo(rng);
    std::vector<uint8_t> a(max_slice_bytes(ElemType::I32, n)), b(a.size());
    EncodeOptions on, off;
    off.allow_rans = false;
    SliceInfo ia, ib;
    ASSERT_EQ(encode_slice(q.data(), ElemType::I32, n, a.data(), a.size(), on, &ia), Status::Ok);
    ASSERT_EQ(encode_slice(q.data(), ElemType::I32, n, b.data(), b.size(), off, &ib), Status::Ok);
    EXPECT_NE(ib.codec, Codec::Rans);
    if (ia.codec == Codec::Rans) {
      ++rans;
      EXPECT_TRUE(ib.codec == Codec::Block || ib.codec == Codec::Raw);
    } else {
      ASSERT_EQ(ia.bytes, ib.bytes);
      EXPECT_TRUE(std::equal(a.begin(), a.begin() + long(ia.bytes), b.begin()));
    }
  }
  EXPECT_GT(rans, 0) << "no slice chose Rans: the test does not test allow_rans";
}

// CPU Sparse slices (every predictor) decode on the device to the CPU's codes.
TEST(CudaSelect, CpuSparseSlicesDecodeOnDevice) {
  SKIP_WITHOUT_GPU();
  for (Data d : kAllData) {
    for (int pred = 0; pred < kNumPredictors; ++pred) {
      for (size_t n : {size_t(1), size_t(37), size_t(5000)}) {
        const auto q = make_data<int64_t>(n, d, uint32_t(n) + uint32_t(pred));
        EncodeOptions opt;
        opt.choice = EncodeOptions::Choice::Sparse;
        opt.predictor = pred;
        opt.row = 10;
        opt.plane = 100;
        std::vector<uint8_t> buf(max_slice_bytes(ElemType::I64, n));
        SliceInfo info;
        ASSERT_EQ(encode_slice(q.data(), ElemType::I64, uint32_t(n), buf.data(), buf.size(), opt, &info), Status::Ok);
        buf.resize(info.bytes);
        auto dsrc = to_device(buf);
        DevBuf dout(n * 8), dstat(4);
        LAUNCH_OK(dev().decode_slice_async(dsrc->get<uint8_t>(), buf.size(), ElemType::I64, uint32_t(n), dout.get(),
                                           dstat.get<int>()));
        SCOPED_TRACE(testing::Message() << data_name(d) << " pred " << pred << " n " << n << " codec "
                                        << int(info.codec));
        ASSERT_EQ(dstat.download<int>(1)[0], int(Status::Ok));
        ASSERT_TRUE(dout.download<int64_t>(n) == q);
      }
    }
  }
}

// Corrupt Sparse slices: truncated, bit flips, random bytes in the payload's
// head (k, shifts, gap frame length), in the frames, a retyped count: the
// device gives the CPU decoder's status, and where both accept, its codes.
TEST(CudaSelect, CorruptSparseSlicesGiveTheCpuStatus) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(11);
  int accepted = 0, rejected = 0;
  for (Data d : {Data::MostlyZero, Data::SteppedRuns, Data::Random}) {
    for (int pred : {0, 1}) {
      const uint32_t n = 3000;
      const auto q = make_data<int32_t>(n, d, 5 + uint32_t(pred));
      EncodeOptions opt;
      opt.choice = EncodeOptions::Choice::Sparse;
      opt.predictor = pred;
      std::vector<uint8_t> good(max_slice_bytes(ElemType::I32, n));
      SliceInfo info;
      ASSERT_EQ(encode_slice(q.data(), ElemType::I32, n, good.data(), good.size(), opt, &info), Status::Ok);
      good.resize(info.bytes);
      if (info.codec != Codec::Sparse) continue;  // Raw fallback (random data)
      const int trials = quick() ? 40 : 200;
      for (int trial = 0; trial < trials; ++trial) {
        std::vector<uint8_t> bad = good;
        size_t len = bad.size();
        uint32_t count = n;
        const size_t pl = bad.size() - kHeaderBytes;
        switch (trial % 6) {
          case 0: len = kHeaderBytes + rng() % pl; break;                                        // truncated
          case 1: bad[kHeaderBytes + rng() % pl] ^= uint8_t(1u << (rng() % 8)); break;           // one bit
          case 2: bad[kHeaderBytes + rng() % std::min<size_t>(pl, 10)] = uint8_t(rng()); break;  // k, gs, vs, G
          case 3: bad[kHeaderBytes + 10 + rng() % (pl - 10)] = uint8_t(rng()); break;            // bits and frames
          case 4: bad[kHeaderBytes + pl - 1 - rng() % std::min<size_t>(pl, 40)] ^= uint8_t(1u << (rng() % 8)); break;
          case 5: count = n - 1; break;
        }
        // A shorter length in the header too (truncations the header agrees with).
        if (trial % 12 == 0 && len > kHeaderBytes) store_u32(bad.data() + 12, uint32_t(len - kHeaderBytes));
        bad.resize(len);
        std::vector<int32_t> cpu_out(count);
        const Status want = decode_slice(bad.data(), len, ElemType::I32, count, cpu_out.data());
        auto dsrc = to_device(bad);
        DevBuf dout(size_t(count) * 4), dstat(4);
        LAUNCH_OK(
            dev().decode_slice_async(dsrc->get<uint8_t>(), len, ElemType::I32, count, dout.get(), dstat.get<int>()));
        ASSERT_EQ(dstat.download<int>(1)[0], int(want))
            << data_name(d) << " pred " << pred << " trial " << trial << " cpu: " << status_string(want);
        if (want == Status::Ok) {
          ++accepted;
          ASSERT_TRUE(dout.download<int32_t>(count) == cpu_out) << "trial " << trial;
        } else {
          ++rejected;
        }
      }
    }
  }
  EXPECT_GT(rejected, 0);
  RecordProperty("accepted", accepted);
}

// The fused quantize + select: the slices of quantize_async's codes encoded by
// the CPU with the same options, and the same outlier count.
template <class T, class Code>
void fused_matches(Tally* tally_out) {
  Tally& tally = *tally_out;
  constexpr ElemType kT = sizeof(T) == 4 ? ElemType::F32 : ElemType::F64;
  SCOPED_TRACE(testing::Message() << "value bytes " << sizeof(T) << ", code bytes " << sizeof(Code));
  const size_t n = quick() ? 20000 : 100000;
  const uint32_t L = 8192;
  for (int kind = 0; kind < 4; ++kind) {
    std::mt19937 rng{uint32_t(kind)};
    std::normal_distribution<T> g(0, 1);
    std::vector<T> x(n);
    for (size_t i = 0; i < n; ++i) {
      switch (kind) {
        case 0: x[i] = T(0); break;                                                     // zeros: Sparse k = 0
        case 1: x[i] = rng() % 50 == 0 ? g(rng) : T(0); break;                          // mostly zero: Sparse
        case 2: x[i] = T(std::sin(double(i) * 0.001) + 0.001 * double(g(rng))); break;  // smooth: Block, Delta
        default: x[i] = g(rng); break;                                                  // Gaussian: Block None
      }
    }
    if (kind == 3) x[17] = T(std::nan(""));  // an outlier
    const double eb = 1e-3;
    const int64_t limit = 1 << 20;
    auto dx = to_device(x);
    DevBuf dq(n * sizeof(Code)), dcount(8), didx(64 * 8);
    LAUNCH_OK(dev().quantize_async(dx->get(), kT, n, eb, limit, dq.get(), code_type<Code>(), dcount.get<uint64_t>(),
                                   didx.get<uint64_t>(), 64));
    const auto q = dq.download<Code>(n);
    const uint64_t outliers = dcount.download<uint64_t>(1)[0];
    EncodeOptions opt;
    opt.allow_rans = false;
    const size_t slot = nc::slice_slot_bytes(code_type<Code>(), L), S = (n + L - 1) / L;
    std::vector<uint8_t> want;
    std::vector<uint64_t> wsizes;
    std::vector<int> wstatus;
    std::vector<SliceInfo> infos;
    cpu_batch(q, L, slot, opt, &want, &wsizes, &wstatus, &infos);
    DevBuf ddst(S * slot, 0), dsizes(S * 8), dstatus(S * 4), dout(8);
    LAUNCH_OK(dev().quantize_encode_slices_select_async(
        dx->get(), kT, n, eb, limit, code_type<Code>(), L, EncodeOptions{}, ddst.get<uint8_t>(), slot,
        dsizes.get<uint64_t>(), dstatus.get<int>(), dout.get<uint64_t>()));
    EXPECT_EQ(dout.download<uint64_t>(1)[0], outliers);
    const auto got = ddst.download<uint8_t>(S * slot);
    const auto gsizes = dsizes.download<uint64_t>(S);
    const auto gstatus = dstatus.download<int>(S);
    for (size_t k = 0; k < S; ++k) {
      ASSERT_EQ(gstatus[k], wstatus[k]) << "kind " << kind << " slice " << k;
      ASSERT_EQ(gsizes[k], wsizes[k]) << "kind " << kind << " slice " << k;
      ASSERT_TRUE(std::equal(got.begin() + long(k * slot), got.begin() + long(k * slot + wsizes[k]),
                             want.begin() + long(k * slot)))
          << "kind " << kind << " slice " << k;
      ++tally[{int(infos[k].codec), int(infos[k].predictor)}];
    }
  }
}

TEST(CudaSelect, FusedMatchesQuantizeThenCpuSelect) {
  SKIP_WITHOUT_GPU();
  Tally tally;
  fused_matches<float, int32_t>(&tally);
  if (testing::Test::HasFatalFailure()) return;
  fused_matches<double, int64_t>(&tally);
  if (testing::Test::HasFatalFailure()) return;
  EXPECT_GT(tally.count({int(Codec::Sparse), int(Predictor::None)}), 0u);
  EXPECT_GT(tally.count({int(Codec::Block), int(Predictor::None)}), 0u);
}

// Arguments the selecting encodes refuse on the host.
TEST(CudaSelect, RejectsBadOptions) {
  SKIP_WITHOUT_GPU();
  DevBuf d(1024);
  EncodeOptions o;
  o.choice = EncodeOptions::Choice::Rans;
  EXPECT_EQ(
      dev().encode_slices_select_async(d.get(), ElemType::I32, 10, 10, o, d.get<uint8_t>(), 100, nullptr, nullptr),
      -int(Status::Unsupported));
  o.choice = EncodeOptions::Choice::FloatExp;
  EXPECT_EQ(
      dev().encode_slices_select_async(d.get(), ElemType::I32, 10, 10, o, d.get<uint8_t>(), 100, nullptr, nullptr),
      -int(Status::Unsupported));
  o = EncodeOptions{};
  o.predictor = kNumPredictors;
  EXPECT_EQ(
      dev().encode_slices_select_async(d.get(), ElemType::I32, 10, 10, o, d.get<uint8_t>(), 100, nullptr, nullptr),
      -int(Status::BadHeader));
  o = EncodeOptions{};
  EXPECT_EQ(
      dev().encode_slices_select_async(d.get(), ElemType::F32, 10, 10, o, d.get<uint8_t>(), 100, nullptr, nullptr),
      -int(Status::Unsupported));
  o.row = 10;
  EXPECT_EQ(dev().quantize_encode_slices_select_async(d.get(), ElemType::F32, 10, 0.1, 100, ElemType::I32, 10, o,
                                                      d.get<uint8_t>(), 100, nullptr, nullptr, d.get<uint64_t>()),
            -int(Status::Unsupported));
  o.row = 0;
  EXPECT_EQ(dev().quantize_encode_slices_select_async(d.get(), ElemType::I32, 10, 0.1, 100, ElemType::I32, 10, o,
                                                      d.get<uint8_t>(), 100, nullptr, nullptr, d.get<uint64_t>()),
            -int(Status::Unsupported));
  EXPECT_EQ(dev().quantize_encode_slices_select_async(d.get(), ElemType::F32, 10, 0.0, 100, ElemType::I32, 10, o,
                                                      d.get<uint8_t>(), 100, nullptr, nullptr, d.get<uint64_t>()),
            -int(Status::BadHeader));
  // n = 0: nothing to do.
  EXPECT_EQ(dev().encode_slices_select_async(d.get(), ElemType::I32, 0, 10, o, d.get<uint8_t>(), 100, nullptr, nullptr),
            0);
}

}  // namespace

#endif  // NCCLZ_WITH_CUDA
