// The bootstrap's wire messages and their authentication (protocol version 2).
//
// All integers little-endian (as this host lays them out); str = u32 length +
// bytes; every length is checked against what was received before use, and
// handshake bodies are at most kMaxHandshakeBody bytes.
//
// Rendezvous, rank r -> rank 0 (MASTER_ADDR:MASTER_PORT or the UniqueId's address):
//   Hello  u32 'NCZB' | u32 version | u32 len | i32 rank | i32 size | u32 generation | str job_id | 16B nonce_r
//          generation: how many rendezvous this process made at this address as this rank before
//          (communicators made one after the other: 0, 1, 2, ...)
//   rank 0 -> r:
//   Reply  u32 'NCZR' | u32 status | u32 len | body
//          status 3 (challenge): 16B nonce_0 | str job_id_0 | 32B mac_0
//   r -> rank 0:
//   Proof  u32 'NCZA' | u32 status | u32 len | body
//          status 0: RankInfo (str host | u32 port | str host_id | str process_id) | 32B mac_r
//          status 1: rank 0's mac_0 was wrong (another token); 2: job ids differ (empty body)
//   rank 0 -> r (when every rank is in, or at once on an error):
//   Reply  status 0 (table): str job_key | u32 n | n x RankInfo | 32B mac_t
//          status 1 refused, 2 timed out, 4 conflict: str message
//          status 5 (not yet): str message; the rank's generation is ahead of the finished
//            rendezvous still listening here: try again (the next one takes the port over)
//
//   with K = the job's token (possibly empty) and H = SHA-256 of the whole Hello:
//     mac_0 = HMAC(K, "ncclz-v2 root" | H | nonce_0 | str job_id_0)
//     mac_r = HMAC(K, "ncclz-v2 rank" | H | mac_0 | RankInfo bytes)
//     mac_t = HMAC(K, "ncclz-v2 table" | H | mac_0 | table bytes before mac_t)
//   Rank 0 proves the token first, bound to the rank's fresh nonce; a rank
//   sends nothing derived from the token (nor its addresses) unless that proof
//   holds, so a fake rank 0 learns the rank, size and job id it asked for and
//   nothing else. Each MAC has its own label, so none can be replayed as another.
//
// Point to point, rank a -> rank b (connection opened by a to b's listener, once):
//   PHello u32 'NCZP' | u32 version | u32 len | str job_key | i32 a | i32 b | 16B nonce | 32B mac
//          mac = HMAC(K, "ncclz-v2 p2p" | str job_key | i32 a | i32 b | nonce)
//          (b refuses a nonce it has seen, and a second connection from a)
//   PMsg   u32 'NCZM' | i32 tag | u64 len | bytes
//
// Star collectives, on the rendezvous connections (rank 0 <-> r), in call order:
//   Frame  u32 'NCZC' | u32 seq | u64 len | bytes
//   Error  u32 'NCZE' | u32 0   | u64 len | message   (rank 0 -> r: the job failed)
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "base/sha256.hpp"

namespace ncclz::bootstrap {

constexpr uint32_t kHelloMagic = 0x425a434e;   // "NCZB"
constexpr uint32_t kReplyMagic = 0x525a434e;   // "NCZR"
constexpr uint32_t kProofMagic = 0x415a434e;   // "NCZA"
constexpr uint32_t kFrameMagic = 0x435a434e;   // "NCZC"
constexpr uint32_t kErrorMagic = 0x455a434e;   // "NCZE"
constexpr uint32_t kPHelloMagic = 0x505a434e;  // "NCZP"
constexpr uint32_t kPMsgMagic = 0x4d5a434e;    // "NCZM"
constexpr uint32_t kVersion = 2;
constexpr uint32_t kMaxHandshakeBody = 4096;
constexpr size_t kNonceBytes = 16;
constexpr size_t kMacBytes = 32;
constexpr size_t kMaxJobId = 256;

enum Status : uint32_t { kTable = 0, kRefused = 1, kTimedOut = 2, kChallenge = 3, kConflict = 4, kNotYet = 5 };
enum ProofStatus : uint32_t { kProofOk = 0, kRootProofWrong = 1, kJobIdDiffers = 2 };

using Nonce = std::array<uint8_t, kNonceBytes>;
using base::Digest;

struct Writer {
  std::vector<uint8_t> b;
  void u32(uint32_t v) { raw(&v, 4); }
  void i32(int32_t v) { raw(&v, 4); }
  void u64(uint64_t v) { raw(&v, 8); }
  void str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    raw(s.data(), s.size());
  }
  void raw(const void* p, size_t n) {
    if (n == 0) return;
    const size_t at = b.size();
    b.resize(at + n);
    std::memcpy(b.data() + at, p, n);
  }
};

/// Bounds-checked reader: a malformed message sets ok = false, never overruns.
struct Reader {
  const uint8_t* p;
  size_t n;
  size_t off = 0;
  bool ok = true;
  void raw(void* out, size_t k) {
    if (!ok || n - off < k) {
      ok = false;
      std::memset(out, 0, k);
      return;
    }
    std::memcpy(out, p + off, k);
    off += k;
  }
  uint32_t u32() {
    uint32_t v;
    raw(&v, 4);
    return v;
  }
  int32_t i32() {
    int32_t v;
    raw(&v, 4);
    return v;
  }
  std::string str(size_t max = SIZE_MAX) {
    uint32_t len = u32();
    if (!ok || n - off < len || len > max) {
      ok = false;
      return {};
    }
    std::string s(reinterpret_cast<const char*>(p + off), len);
    off += len;
    return s;
  }
  bool done() const { return ok && off == n; }
};

/// magic | word | u32 len | body.
std::vector<uint8_t> frame(uint32_t magic, uint32_t word, const std::vector<uint8_t>& body);

struct RankInfo {
  std::string host;  ///< address of the rank's point-to-point listener
  int port = 0;
  std::string host_id;     ///< hostname/boot id
  std::string process_id;  ///< host_id/pid<pid>/<nonce>
  /// "host h, pid p" for messages.
  std::string describe() const;
};
void put_info(Writer& w, const RankInfo& r);
RankInfo get_info(Reader& rd);

struct Hello {
  int32_t rank = 0;
  int32_t size = 0;
  uint32_t generation = 0;
  std::string job_id;
  Nonce nonce{};
};
Writer hello_body(const Hello& h);
/// Parses a Hello body; false when malformed.
bool parse_hello(const uint8_t* body, size_t n, Hello* out);

Digest root_mac(const std::string& token, const Digest& hello_hash, const Nonce& nonce0, const std::string& job_id0);
Digest rank_mac(const std::string& token, const Digest& hello_hash, const Digest& mac0, const uint8_t* info,
                size_t info_len);
Digest table_mac(const std::string& token, const Digest& hello_hash, const Digest& mac0, const uint8_t* table,
                 size_t table_len);
Digest p2p_mac(const std::string& token, const std::string& job_key, int32_t src, int32_t dst, const Nonce& nonce);

Nonce random_nonce();
/// Constant-time equality of two MACs.
bool mac_equal(const uint8_t* a, const Digest& b);

}  // namespace ncclz::bootstrap
