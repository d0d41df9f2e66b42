#include "base/sha256.hpp"

#include <algorithm>
#include <cstring>

namespace ncclz::base {
namespace {

// FIPS 180-4, 4.2.2: the first 32 bits of the fractional parts of the cube
// roots of the first 64 primes.
constexpr uint32_t kK[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

}  // namespace

Sha256::Sha256() {
  // FIPS 180-4, 5.3.3: the first 32 bits of the fractional parts of the square
  // roots of the first 8 primes.
  static constexpr uint32_t kInit[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                        0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::memcpy(h_, kInit, sizeof h_);
}

void Sha256::block(const uint8_t* p) {
  uint32_t w[64];
  for (int t = 0; t < 16; ++t) {
    w[t] = (uint32_t(p[4 * t]) << 24) | (uint32_t(p[4 * t + 1]) << 16) | (uint32_t(p[4 * t + 2]) << 8) |
           uint32_t(p[4 * t + 3]);
  }
  for (int t = 16; t < 64; ++t) {
    uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
  for (int t = 0; t < 64; ++t) {
    uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kK[t] + w[t];
    uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h_[0] += a;
  h_[1] += b;
  h_[2] += c;
  h_[3] += d;
  h_[4] += e;
  h_[5] += f;
  h_[6] += g;
  h_[7] += h;
}

void Sha256::update(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  total_ += n;
  if (used_ > 0) {
    size_t take = std::min(n, sizeof buf_ - used_);
    std::memcpy(buf_ + used_, p, take);
    used_ += take;
    p += take;
    n -= take;
    if (used_ < sizeof buf_) return;
    block(buf_);
    used_ = 0;
  }
  for (; n >= 64; p += 64, n -= 64) block(p);
  if (n > 0) {
    std::memcpy(buf_, p, n);
    used_ = n;
  }
}

Digest Sha256::final() {
  // FIPS 180-4, 5.1.1: a 1 bit, zeros up to 56 mod 64 bytes, the bit length
  // as a 64-bit big-endian number.
  const uint64_t bits = total_ * 8;
  const uint8_t one = 0x80, zero = 0;
  update(&one, 1);
  while (used_ != 56) update(&zero, 1);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(bits >> (56 - 8 * i));
  update(len, 8);
  Digest d;
  for (int i = 0; i < 8; ++i) {
    d[4 * i] = uint8_t(h_[i] >> 24);
    d[4 * i + 1] = uint8_t(h_[i] >> 16);
    d[4 * i + 2] = uint8_t(h_[i] >> 8);
    d[4 * i + 3] = uint8_t(h_[i]);
  }
  return d;
}

Digest sha256(const void* data, size_t n) {
  Sha256 s;
  s.update(data, n);
  return s.final();
}

HmacSha256::HmacSha256(const void* key, size_t key_len) {
  // RFC 2104: keys longer than the block are hashed first; then
  // H((K ^ opad) || H((K ^ ipad) || message)).
  uint8_t k[64] = {0};
  if (key_len > sizeof k) {
    Digest d = sha256(key, key_len);
    std::memcpy(k, d.data(), d.size());
  } else if (key_len > 0) {
    std::memcpy(k, key, key_len);
  }
  uint8_t ikey[64];
  for (int i = 0; i < 64; ++i) {
    ikey[i] = k[i] ^ 0x36;
    okey_[i] = k[i] ^ 0x5c;
  }
  inner_.update(ikey, sizeof ikey);
}

Digest HmacSha256::final() {
  Digest in = inner_.final();
  Sha256 outer;
  outer.update(okey_, sizeof okey_);
  outer.update(in.data(), in.size());
  return outer.final();
}

Digest hmac_sha256(const std::string& key, const void* data, size_t n) {
  HmacSha256 h(key);
  h.update(data, n);
  return h.final();
}

std::string to_hex(const void* data, size_t n) {
  static const char* digits = "0123456789abcdef";
  const auto* p = static_cast<const uint8_t*>(data);
  std::string s;
  s.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}

}  // namespace ncclz::base
