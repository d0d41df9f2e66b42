// CRC-32C (base/crc32c.hpp): the published check values, the hardware and
// table versions agreeing on every length and alignment (the interleaved
// blocks, their joins and the tails), continuation, and detection of every
// single-bit flip.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/crc32c.hpp"

using ncclz::base::crc32c;
using ncclz::base::crc32c_portable;

namespace {

// Bit by bit, straight from the definition: the reference the fast versions are checked against.
uint32_t crc32c_bitwise(const uint8_t* p, size_t n) {
  uint32_t r = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    r ^= p[i];
    for (int k = 0; k < 8; ++k) r = (r >> 1) ^ (0x82F63B78u & (0u - (r & 1u)));
  }
  return ~r;
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = uint8_t(rng());
  return v;
}

}  // namespace

TEST(Crc32c, CheckValues) {
  // RFC 3720 (iSCSI), appendix B.4, and the "123456789" check value of the CRC catalogue.
  const std::string digits = "123456789";
  EXPECT_EQ(crc32c(digits.data(), digits.size()), 0xE3069283u);
  EXPECT_EQ(crc32c_portable(digits.data(), digits.size()), 0xE3069283u);
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF), inc(32), dec(32);
  for (int i = 0; i < 32; ++i) {
    inc[size_t(i)] = uint8_t(i);
    dec[size_t(i)] = uint8_t(31 - i);
  }
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(crc32c(inc.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(crc32c(dec.data(), 32), 0x113FDB5Cu);
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
  std::printf("crc32c runs the %s version on this CPU\n", ncclz::base::crc32c_impl());
}

TEST(Crc32c, FastVersionsMatchTheDefinitionAtEveryLengthAndAlignment) {
  const auto buf = random_bytes(3 * 8192 * 2 + 3 * 256 * 3 + 100, 7);
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 800; ++n) lengths.push_back(n);
  for (size_t n : {3 * 256 - 1, 3 * 256 + 0, 3 * 256 + 7, 3 * 8192 - 8, 3 * 8192, 3 * 8192 + 3 * 256 + 5,
                   2 * 3 * 8192 + 1, 2 * 3 * 8192 + 3 * 3 * 256 + 9})
    lengths.push_back(n);
  for (size_t n : lengths) {
    for (size_t off = 0; off < 8; ++off) {
      if (off + n > buf.size()) continue;
      const uint32_t want = crc32c_bitwise(buf.data() + off, n);
      ASSERT_EQ(crc32c(buf.data() + off, n), want) << "length " << n << " offset " << off;
      ASSERT_EQ(crc32c_portable(buf.data() + off, n), want) << "length " << n << " offset " << off;
    }
  }
}

TEST(Crc32c, Continues) {
  const auto buf = random_bytes(100000, 11);
  const uint32_t whole = crc32c(buf.data(), buf.size());
  for (size_t cut : {size_t(0), size_t(1), size_t(7), size_t(777), size_t(24576), size_t(99999), buf.size()}) {
    const uint32_t a = crc32c(buf.data(), cut);
    EXPECT_EQ(crc32c(buf.data() + cut, buf.size() - cut, a), whole) << cut;
    EXPECT_EQ(crc32c_portable(buf.data() + cut, buf.size() - cut, crc32c_portable(buf.data(), cut)), whole) << cut;
  }
}

TEST(Crc32c, EverySingleBitFlipChangesIt) {
  for (size_t n : {size_t(1), size_t(24), size_t(1000), size_t(3 * 8192 + 17)}) {
    auto buf = random_bytes(n, uint32_t(n));
    const uint32_t base = crc32c(buf.data(), n);
    for (size_t bit = 0; bit < 8 * n; bit += (n > 1000 ? 7 : 1)) {
      buf[bit / 8] ^= uint8_t(1u << (bit % 8));
      ASSERT_NE(crc32c(buf.data(), n), base) << "length " << n << " bit " << bit;
      buf[bit / 8] ^= uint8_t(1u << (bit % 8));
    }
  }
}
