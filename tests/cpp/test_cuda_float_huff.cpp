// The device FloatHuff coder (ncclz/cuda_float_huff.hpp) against the CPU one
// (codec/float_huff.hpp): the device's payload equals the CPU's byte for
// byte, the device decodes CPU payloads bit-exact, and damaged payloads give
// Corrupt on both sides alike, with every kernel set (FloatHuffCoder::set_kernels
// 1, 2 and 3, kVersions). Runs on a GPU and in the CPU emulator
// (tools/cuda_emu/run.sh); skips without a device (fails under NCCLZ_REQUIRE_GPU=1).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "codec/block_coder.hpp"
#include "codec/float_huff.hpp"
#include "codec/slice.hpp"
#include "cuda_test_util.hpp"
#include "ncclz/cuda_float_huff.hpp"

using namespace ncclz::codec;
using ncclz_test::DevBuf;

namespace {

std::vector<uint8_t> values(ElemType t, size_t n, int kind, uint32_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, 1e-2f);
  std::vector<uint8_t> v(n * elem_size(t));
  if (t == ElemType::U8) {  // bytes: a Gaussian of about 6 (int8, ~4.6 bits), zeros, random
    for (auto& b : v) b = kind == 0 ? uint8_t(std::lround(d(g) * 600.0f) & 0xFF) : kind == 1 ? 0 : uint8_t(g());
    return v;
  }
  for (size_t i = 0; i < n; ++i) {
    float f = kind == 0 ? d(g) : kind == 1 ? 0.0f : 0.0f;
    uint32_t b;
    std::memcpy(&b, &f, 4);
    if (kind == 2) b = uint32_t(g());  // random bits
    if (t == ElemType::F32) {
      std::memcpy(&v[4 * i], &b, 4);
    } else {
      // bf16: the top half; f16 from the same Gaussian, truncated (enough as data).
      uint16_t h = uint16_t(b >> 16);
      if (t == ElemType::F16 && kind != 2) {
        const int e = int((b >> 23) & 0xFF) - 112;
        h = uint16_t(((b >> 16) & 0x8000u) | (e <= 0    ? 0u
                                              : e >= 31 ? 0x7C00u
                                                        : (uint32_t(e) << 10) | ((b >> 13) & 0x3FFu)));
      }
      std::memcpy(&v[2 * i], &h, 2);
    }
  }
  return v;
}

std::vector<uint8_t> cpu_encode(const std::vector<uint8_t>& v, ElemType t) {
  std::vector<uint8_t> p(4096 + 2 * v.size());
  const size_t b = floathuff_encode(v.data(), t, v.size() / elem_size(t), p.data(), p.size());
  EXPECT_NE(b, kNoFit);
  p.resize(b == kNoFit ? 0 : b);
  return p;
}

const ElemType kTypes[] = {ElemType::F32, ElemType::BF16, ElemType::F16, ElemType::U8};
const int kVersions[] = {1, 2, 3};

// Sizes: below, at and past one sub-stream (256) and one CTA's 128
// sub-streams (32768), past 256 sub-streams (70000: the emulator's v2 decode
// grid of 2 CTAs loops), past 16 groups of 32 sub-streams (140000: the
// emulator's v3 decode grid of 2 CTAs x 8 warps loops); multiples of 8 and
// not (v2's lanes take 8 values); a last sub-stream of 66 values (322: v3's
// last lookup of the first 64-value window may end past it, on the last value).
std::vector<size_t> sizes() {
  std::vector<size_t> s = {1, 7, 8, 9, 255, 256, 257, 264, 322, 8193, 32768, 40000, 70000, 140000};
  if (!ncclz_test::quick()) s.push_back((size_t(1) << 20) + 3);
  return s;
}

/// fn(version, type, n, kind, at) for every FloatHuff kernel set, type, size
/// and value kind, with `at` (an offset in elements of the device buffer the
/// kernels read or write: 1 is not 16-byte aligned, v2's scalar path) 0, and
/// also 1 for two sizes; the coder runs the version's kernels.
void for_each_case(ncclz::cuda::FloatHuffCoder& coder,
                   const std::function<void(int, ElemType, size_t, int, size_t)>& fn) {
  for (int ver : kVersions) {
    coder.set_kernels(ver);
    for (ElemType t : kTypes) {
      for (size_t n : sizes()) {
        for (int kind : {0, 1, 2}) {
          for (size_t at : {size_t(0), size_t(1)}) {
            if (at && n != 8193 && n != 9) continue;
            SCOPED_TRACE("v" + std::to_string(ver) + " type " + std::to_string(int(t)) + " n " + std::to_string(n) +
                         " kind " + std::to_string(kind) + " at " + std::to_string(at));
            fn(ver, t, n, kind, at);
          }
        }
      }
    }
  }
}

}  // namespace

TEST(CudaFloatHuff, EncodeMatchesCpuBytes) {
  SKIP_WITHOUT_GPU();
  ncclz::cuda::FloatHuffCoder coder;
  // at: the input's offset
  for_each_case(coder, [&](int, ElemType t, size_t n, int kind, size_t at) {
    const auto v = values(t, n, kind, uint32_t(n * 3 + kind));
    const auto want = cpu_encode(v, t);
    const size_t es = elem_size(t);
    DevBuf x(v.size() + at * es), out(want.size() + 64), bytes(8);
    uint8_t* xp = static_cast<uint8_t*>(x.get()) + at * es;
    ASSERT_EQ(cudaMemcpy(xp, v.data(), v.size(), cudaMemcpyHostToDevice), cudaSuccess);
    LAUNCH_OK(coder.encode(xp, t, n, out.get(), want.size() + 64, bytes.get<unsigned long long>()));
    const auto b = bytes.download<unsigned long long>(1)[0];
    ASSERT_EQ(b, want.size());
    EXPECT_EQ(ncclz_test::from_device(out.get(), b), want);
    // One byte less than needed: no fit.
    LAUNCH_OK(coder.encode(xp, t, n, out.get(), want.size() - 1, bytes.get<unsigned long long>()));
    EXPECT_EQ(bytes.download<unsigned long long>(1)[0], ~0ull);
  });
  // Empty: size 0; other types: rejected on the host.
  DevBuf out(64), bytes(8);
  LAUNCH_OK(coder.encode(out.get(), ElemType::F32, 0, out.get(), 64, bytes.get<unsigned long long>()));
  EXPECT_EQ(bytes.download<unsigned long long>(1)[0], 0u);
  EXPECT_EQ(coder.encode(out.get(), ElemType::I32, 4, out.get(), 64, bytes.get<unsigned long long>()),
            -int(Status::Unsupported));
}

TEST(CudaFloatHuff, DecodesCpuPayloads) {
  SKIP_WITHOUT_GPU();
  ncclz::cuda::FloatHuffCoder coder;
  // at: the output's offset
  for_each_case(coder, [&](int, ElemType t, size_t n, int kind, size_t at) {
    const auto v = values(t, n, kind, uint32_t(n * 5 + kind));
    const auto p = cpu_encode(v, t);
    const size_t es = elem_size(t);
    DevBuf in(p.size()), out(v.size() + at * es), st(4);
    in.upload(p.data(), p.size());
    uint8_t* op = static_cast<uint8_t*>(out.get()) + at * es;
    LAUNCH_OK(coder.decode(in.get(), p.size(), t, n, op, st.get<int>()));
    ASSERT_EQ(st.download<int>(1)[0], int(Status::Ok));
    EXPECT_EQ(ncclz_test::from_device(op, v.size()), v);
  });
}

TEST(CudaFloatHuff, DamagedPayloadsAsCpu) {
  // Every truncation and many byte flips of a small payload: the device says
  // Corrupt exactly where the CPU does, and decodes the same values elsewhere.
  SKIP_WITHOUT_GPU();
  ncclz::cuda::FloatHuffCoder coder;
  std::mt19937 g(17);
  for (int ver : kVersions)
    for (ElemType t : kTypes) {
      coder.set_kernels(ver);
      const size_t n = 700;
      const auto v = values(t, n, 0, 99);
      const auto p = cpu_encode(v, t);
      std::vector<std::vector<uint8_t>> cases;
      for (size_t len = 0; len < p.size(); len += ncclz_test::quick() ? 7 : 1)
        cases.emplace_back(p.begin(), p.begin() + ptrdiff_t(len));
      for (int rep = 0; rep < (ncclz_test::quick() ? 150 : 1000); ++rep) {
        auto d = p;
        const size_t at = g() % d.size();
        d[at] = uint8_t(d[at] ^ (1u + g() % 255u));
        cases.push_back(d);
      }
      for (const auto& d : cases) {
        std::vector<uint8_t> cpu(v.size());
        const Status cs = floathuff_decode(d.data(), d.size(), t, n, cpu.data());
        DevBuf in(d.size()), out(v.size()), st(4);
        in.upload(d.data(), d.size());
        LAUNCH_OK(coder.decode(in.get(), d.size(), t, n, out.get(), st.get<int>()));
        const int ds = st.download<int>(1)[0];
        ASSERT_EQ(ds, int(cs)) << "v" << ver << " type " << int(t) << " len " << d.size();
        if (cs == Status::Ok) {
          EXPECT_EQ(ncclz_test::from_device(out.get(), v.size()), cpu);
        }
      }
    }
}

// Whole slices (FloatHuffCoder::encode_slice): the bytes of the CPU's
// encode_slice with allow_rans = false (and with FloatHuff forced; raw_only:
// with Raw forced), FloatHuff where it is smaller, Raw where it is not (random
// bits), NoSpace where the slot cannot hold the Raw slice; the CPU decodes
// every device slice to the input.
TEST(CudaFloatHuff, SlicesMatchEncodeSlice) {
  SKIP_WITHOUT_GPU();
  ncclz::cuda::FloatHuffCoder coder;
  for (int ver : kVersions)
    for (ElemType t : kTypes) {
      coder.set_kernels(ver);
      for (size_t n : {size_t(0), size_t(1), size_t(300), size_t(8193), size_t(40000)}) {
        for (int kind : {0, 1, 2}) {
          const auto v = values(t, n, kind, uint32_t(n * 7 + kind));
          const size_t full = max_slice_bytes(t, n);
          for (int form = 0; form < 3; ++form) {  // 0: Auto without rANS, 1: FloatHuff forced, 2: Raw (raw_only)
            EncodeOptions opt;
            opt.allow_rans = form != 0;
            opt.choice = form == 1   ? EncodeOptions::Choice::FloatHuff
                         : form == 2 ? EncodeOptions::Choice::Raw
                                     : EncodeOptions::Choice::Auto;
            for (size_t cap : {full, full + 40, full > 0 ? full - 1 : size_t(0)}) {
              SCOPED_TRACE("v" + std::to_string(ver) + " type " + std::to_string(int(t)) + " n " + std::to_string(n) +
                           " kind " + std::to_string(kind) + " form " + std::to_string(form) + " cap " +
                           std::to_string(cap));
              std::vector<uint8_t> want(cap + 8);
              SliceInfo info;
              const Status ws = encode_slice(v.data(), t, uint32_t(n), want.data(), cap, opt, &info);
              DevBuf x(v.size() + 8), out(cap + 8), bytes(8), st(4);
              x.upload(v.data(), v.size());
              LAUNCH_OK(coder.encode_slice(x.get(), t, n, out.get(), cap, bytes.get<unsigned long long>(),
                                           st.get<int>(), form == 2));
              ASSERT_EQ(st.download<int>(1)[0], int(ws));
              if (ws != Status::Ok) {
                EXPECT_EQ(bytes.download<unsigned long long>(1)[0], 0u);
                continue;
              }
              const auto b = bytes.download<unsigned long long>(1)[0];
              ASSERT_EQ(b, info.bytes);
              want.resize(info.bytes);
              const auto got = ncclz_test::from_device(out.get(), b);
              EXPECT_EQ(got, want) << "the device's slice differs from encode_slice's";
              // (bytes: 300 of them code to more than 300 with the 136-byte index)
              if (form == 0 && kind == 0 && n >= (t == ElemType::U8 ? 8193u : 300u)) {
                EXPECT_EQ(info.codec, Codec::FloatHuff);
              }
              if (kind == 2 && n >= 300) {
                EXPECT_EQ(info.codec, Codec::Raw);
              }
              std::vector<uint8_t> back(v.size() + 1);
              size_t used = 0;
              ASSERT_EQ(decode_slice(got.data(), got.size(), t, uint32_t(n), back.data(), &used), Status::Ok);
              EXPECT_EQ(used, got.size());
              back.resize(v.size());
              EXPECT_EQ(back, v);
            }
          }
        }
      }
    }
  DevBuf out(64), bytes(8), st(4);
  EXPECT_EQ(
      coder.encode_slice(out.get(), ElemType::F64, 4, out.get(), 64, bytes.get<unsigned long long>(), st.get<int>()),
      -int(Status::Unsupported));
}

namespace {

// Values of type t whose exponents have histogram hist (hist.size() <= the
// alphabet), shuffled, with random signs and mantissas.
std::vector<uint8_t> with_histogram(ElemType t, const std::vector<uint32_t>& hist, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<uint32_t> e;
  for (uint32_t s = 0; s < hist.size(); ++s) e.insert(e.end(), hist[s], s);
  std::shuffle(e.begin(), e.end(), g);
  const size_t es = elem_size(t);
  std::vector<uint8_t> v(e.size() * es);
  for (size_t i = 0; i < e.size(); ++i) {
    const uint32_t r = uint32_t(g());
    if (t == ElemType::U8) {
      v[i] = uint8_t(e[i]);
    } else if (t == ElemType::F32) {
      const uint32_t b = (r & 0x807FFFFFu) | e[i] << 23;
      std::memcpy(&v[4 * i], &b, 4);
    } else {
      const uint16_t b =
          t == ElemType::BF16 ? uint16_t((r & 0x807Fu) | e[i] << 7) : uint16_t((r & 0x83FFu) | e[i] << 10);
      std::memcpy(&v[2 * i], &b, 2);
    }
  }
  return v;
}

struct TableCase {
  std::string name;
  ElemType t;
  std::vector<uint32_t> hist;
  bool limited;  // Huffman's depths exceed kFhMaxLen (the length limit runs)
};

// Histograms that stress the table rule: every symbol, ties, skewed counts
// whose Huffman depths pass kFhMaxLen, one to three symbols, random ones.
std::vector<TableCase> table_cases() {
  std::vector<TableCase> c;
  auto fib = [](uint32_t k) {  // 1, 1, 2, 3, 5, ...: Huffman's depth k - 1
    std::vector<uint32_t> f = {1, 1};
    while (f.size() < k) f.push_back(f[f.size() - 1] + f[f.size() - 2]);
    return f;
  };
  std::mt19937 g(2024);
  c.push_back({"one symbol", ElemType::F32, std::vector<uint32_t>(200, 0), false});
  c.back().hist[127] = 1000;
  c.push_back({"one symbol 0", ElemType::F32, {5}, false});
  c.push_back({"two symbols", ElemType::F32, std::vector<uint32_t>(256, 0), false});
  c.back().hist[3] = 900;
  c.back().hist[250] = 1;
  c.push_back({"two equal", ElemType::F32, std::vector<uint32_t>(256, 0), false});
  c.back().hist[255] = 40;
  c.back().hist[0] = 40;
  // Eight codes of 3 bits: every v3 table entry holds 3 symbols, so the
  // second sub-stream's (66 values) lookups end at 63 and then 66, past its
  // first 64-value window, on its last value.
  c.push_back({"eight, 322 values", ElemType::BF16, std::vector<uint32_t>(256, 0), false});
  for (uint32_t s : {3u, 17u, 40u, 77u, 100u, 150u, 201u, 250u}) c.back().hist[s] = s < 20 ? 41 : 40;
  c.push_back({"three", ElemType::BF16, {0, 7, 0, 7, 14}, false});
  c.push_back({"256 equal", ElemType::F32, std::vector<uint32_t>(256, 37), false});
  c.push_back({"255 equal, one large", ElemType::F32, std::vector<uint32_t>(256, 3), false});
  c.back().hist[100] = 5000;
  {
    std::vector<uint32_t> h(256);
    for (auto& x : h) x = 1 + g() % 3;  // many ties among three counts
    c.push_back({"256 ties 1..3", ElemType::F32, h, false});
  }
  {
    std::vector<uint32_t> h(256);
    for (uint32_t s = 0; s < 256; ++s) h[s] = 1u + s % 7u * 5u;  // ties, leaves equal to internal nodes
    c.push_back({"256 ties mod 7", ElemType::BF16, h, false});
  }
  for (uint32_t k : {14u, 20u, 24u}) {
    // Fibonacci counts on scattered symbols: depth k - 1 > kFhMaxLen.
    std::vector<uint32_t> h(256, 0);
    const auto f = fib(k);
    for (uint32_t i = 0; i < k; ++i) h[(i * 97 + 11) % 256] = f[i];
    c.push_back({"fibonacci " + std::to_string(k), ElemType::F32, h, true});
  }
  {
    // Fibonacci down to depth 22 plus 200 symbols of count 1: all 256 used.
    std::vector<uint32_t> h(256, 1);
    const auto f = fib(23);
    for (uint32_t i = 0; i < 23; ++i) h[255 - 11 * i] = f[i] * 64;
    c.push_back({"fibonacci 23 and 233 ones", ElemType::F32, h, true});
  }
  {
    // Powers of two: depth 16.
    std::vector<uint32_t> h(256, 0);
    for (uint32_t i = 0; i < 17; ++i) h[i * 15] = i == 0 ? 1u : 1u << (i - 1);
    c.push_back({"powers of two", ElemType::BF16, h, true});
  }
  {
    std::vector<uint32_t> h(32, 0);  // F16: 5-bit exponents
    const auto f = fib(20);
    for (uint32_t i = 0; i < 20; ++i) h[31 - i] = f[i];
    c.push_back({"f16 fibonacci 20", ElemType::F16, h, true});
  }
  c.push_back({"f16 32 equal", ElemType::F16, std::vector<uint32_t>(32, 9), false});
  {
    std::vector<uint32_t> h(256, 0);  // bytes
    const auto f = fib(22);
    for (uint32_t i = 0; i < 22; ++i) h[(i * 37 + 5) % 256] = f[i];
    c.push_back({"u8 fibonacci 22", ElemType::U8, h, true});
  }
  c.push_back({"u8 256 equal", ElemType::U8, std::vector<uint32_t>(256, 11), false});
  const int randoms = ncclz_test::quick() ? 12 : 60;
  for (int r = 0; r < randoms; ++r) {
    const ElemType t = r % 5 == 4 ? ElemType::F16 : r % 6 == 3 ? ElemType::U8 : r % 2 ? ElemType::BF16 : ElemType::F32;
    const uint32_t A = fh_alphabet(t);
    std::vector<uint32_t> h(A, 0);
    const uint32_t used = 1 + g() % A;
    for (uint32_t i = 0; i < used; ++i) {
      const uint32_t s = g() % A;
      // Skewed: counts over several orders of magnitude, or a few small values (ties).
      h[s] = r % 3 == 0 ? 1 + g() % 4 : 1 + uint32_t(std::exp2(double(g() % 1400) / 100.0));
    }
    c.push_back({"random " + std::to_string(r), t, h, false});
  }
  return c;
}

}  // namespace

// The device's table (the v2 table kernel's parallel build, v1's one thread)
// against the CPU's fh_build_lengths / fh_canonical_codes: through the
// payload (its 4-bit lengths, then words coded with the codes), byte for byte
// the CPU encoder's, on histograms chosen to stress the rule; and each
// decoder's table (v3's multi-symbol one: codes of every length up to 12)
// decodes the CPU's payload to the values.
TEST(CudaFloatHuff, TableMatchesCpuOnStressHistograms) {
  SKIP_WITHOUT_GPU();
  ncclz::cuda::FloatHuffCoder coder;
  int limited = 0;
  for (const auto& tc : table_cases()) {
    const ElemType t = tc.t;
    const uint32_t A = fh_alphabet(t);
    std::vector<uint32_t> hist(A, 0);
    std::copy(tc.hist.begin(), tc.hist.end(), hist.begin());
    uint8_t len[256];
    uint16_t code[256];
    fh_build_lengths(hist.data(), A, len);
    const uint32_t kraft = fh_canonical_codes(len, A, code);
    uint32_t m = 0, maxlen = 0;
    for (uint32_t s = 0; s < A; ++s) {
      m += hist[s] != 0;
      maxlen = std::max<uint32_t>(maxlen, len[s]);
    }
    ASSERT_TRUE(fh_lengths_valid(len, A)) << tc.name;
    if (m >= 2) {
      ASSERT_EQ(kraft, kFhLutSize) << tc.name;
    }
    if (tc.limited) {
      EXPECT_EQ(maxlen, uint32_t(kFhMaxLen)) << tc.name;
      ++limited;
    }
    const auto v = with_histogram(t, hist, m * 31 + A);
    const size_t n = v.size() / elem_size(t);
    const auto want = cpu_encode(v, t);
    ASSERT_GE(want.size(), A / 2);
    for (uint32_t s = 0; s < A; s += 2) ASSERT_EQ(want[s / 2], uint8_t(len[s] | len[s + 1] << 4)) << tc.name;
    for (int ver : kVersions) {
      SCOPED_TRACE(tc.name + " v" + std::to_string(ver) + " n " + std::to_string(n));
      coder.set_kernels(ver);
      DevBuf x(v.size()), out(want.size() + 64), bytes(8);
      x.upload(v.data(), v.size());
      LAUNCH_OK(coder.encode(x.get(), t, n, out.get(), want.size() + 64, bytes.get<unsigned long long>()));
      const auto b = bytes.download<unsigned long long>(1)[0];
      ASSERT_EQ(b, want.size());
      EXPECT_EQ(ncclz_test::from_device(out.get(), b), want);
      DevBuf in(want.size()), y(v.size()), st(4);
      in.upload(want.data(), want.size());
      LAUNCH_OK(coder.decode(in.get(), want.size(), t, n, y.get(), st.get<int>()));
      ASSERT_EQ(st.download<int>(1)[0], int(Status::Ok));
      EXPECT_EQ(ncclz_test::from_device(y.get(), v.size()), v);
    }
  }
  EXPECT_GE(limited, 5);
}
