// SHA-256 and HMAC-SHA-256 (cpp/src/base/sha256.hpp) against the published
// test vectors: the FIPS 180-4 examples (NIST's "SHA256.pdf" and
// "SHA2_Additional.pdf": "abc", the 448- and 896-bit messages, the empty
// string, a million 'a's) and the seven HMAC-SHA-256 cases of RFC 4231.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/sha256.hpp"

using namespace ncclz::base;

namespace {

std::string hex_of(const std::string& s) { return to_hex(sha256(s)); }

std::string hmac_hex(const std::string& key, const std::string& data) {
  return to_hex(hmac_sha256(key, data.data(), data.size()));
}

}  // namespace

TEST(Sha256, Fips180Examples) {
  EXPECT_EQ(hex_of("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex_of(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex_of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(hex_of("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsm"
                   "nopqrstnopqrstu"),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(hex_of(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, IncrementalEqualsOneShotAtEverySplit) {
  // Lengths around the 55/56/64-byte padding boundaries, fed in two pieces
  // split at every position.
  for (size_t n : {0, 1, 55, 56, 57, 63, 64, 65, 119, 120, 128, 200}) {
    std::string m(n, '\0');
    for (size_t i = 0; i < n; ++i) m[i] = char(i * 31 + 7);
    Digest whole = sha256(m);
    for (size_t cut = 0; cut <= n; ++cut) {
      Sha256 s;
      s.update(m.data(), cut);
      s.update(m.data() + cut, n - cut);
      ASSERT_EQ(s.final(), whole) << "n " << n << " cut " << cut;
    }
  }
}

TEST(HmacSha256, Rfc4231) {
  auto bytes = [](int v, size_t n) { return std::string(n, char(v)); };
  std::string key4;
  for (int i = 1; i <= 25; ++i) key4 += char(i);
  // Test cases 1-7 of RFC 4231, section 4.
  EXPECT_EQ(hmac_hex(bytes(0x0b, 20), "Hi There"), "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(hmac_hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(hmac_hex(bytes(0xaa, 20), bytes(0xdd, 50)),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  EXPECT_EQ(hmac_hex(key4, bytes(0xcd, 50)), "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  // Case 5 publishes the first 128 bits only.
  EXPECT_EQ(hmac_hex(bytes(0x0c, 20), "Test With Truncation").substr(0, 32), "a3b6167473100ee06e0c796c2955552b");
  EXPECT_EQ(hmac_hex(bytes(0xaa, 131), "Test Using Larger Than Block-Size Key - Hash Key First"),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  EXPECT_EQ(hmac_hex(bytes(0xaa, 131),
                     "This is a test using a larger than block-size key and a larger than block-size data. The key "
                     "needs to be hashed before being used by the HMAC algorithm."),
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

TEST(HmacSha256, KeyAndMessageMatter) {
  // An empty key is a key (jobs without a token still run the handshake);
  // any change of key or message changes the MAC.
  const std::string m = "ncclz";
  Digest a = hmac_sha256("", m.data(), m.size());
  Digest b = hmac_sha256("k", m.data(), m.size());
  Digest c = hmac_sha256("", "ncclZ", 5);
  EXPECT_NE(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(a, hmac_sha256("", m.data(), m.size()));
  HmacSha256 h("");
  h.update("ncc", 3);
  h.update("lz", 2);
  EXPECT_EQ(h.final(), a);
}
