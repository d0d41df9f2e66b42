// SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104), for the bootstrap's
// challenge and response (cpp/src/bootstrap/tcp_bootstrap.cpp): small, with no
// outside dependency, checked against the published test vectors of FIPS
// 180-4 and RFC 4231 (tests/cpp/test_sha256.cpp). Not constant-time in the
// data (it has no data-dependent branches or table lookups, but makes no
// promise); compare MACs with net::equal_ct.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace ncclz::base {

using Digest = std::array<uint8_t, 32>;

/// Incremental SHA-256: update() any number of times, then final() once.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  void update(const std::string& s) { update(s.data(), s.size()); }
  Digest final();

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t used_ = 0;     // bytes in buf_
  uint64_t total_ = 0;  // bytes hashed so far
};

Digest sha256(const void* data, size_t n);
inline Digest sha256(const std::string& s) { return sha256(s.data(), s.size()); }

/// Incremental HMAC-SHA-256 with a key of any length (empty included).
class HmacSha256 {
 public:
  HmacSha256(const void* key, size_t key_len);
  explicit HmacSha256(const std::string& key) : HmacSha256(key.data(), key.size()) {}
  void update(const void* data, size_t n) { inner_.update(data, n); }
  void update(const std::string& s) { inner_.update(s); }
  Digest final();

 private:
  Sha256 inner_;
  uint8_t okey_[64];
};

Digest hmac_sha256(const std::string& key, const void* data, size_t n);

/// Lowercase hex of a byte string.
std::string to_hex(const void* data, size_t n);
inline std::string to_hex(const Digest& d) { return to_hex(d.data(), d.size()); }

}  // namespace ncclz::base
