// CRC-32C, the checksum of the transports' slots and of the codec's blobs.
//
// CRC-32C (Castagnoli): reflected polynomial 0x82F63B78, initial value and
// final xor 0xFFFFFFFF, as in iSCSI, ext4 and the SSE4.2 `crc32` instruction.
// It detects every single-bit error and every burst of up to 32 bits at any
// length, every error of up to 3 bits in messages below 256 MiB (Hamming
// distance 4 up to 2^31 bits), and any other error with probability
// 1 - 2^-32.
//
// Speed: where the CPU has SSE4.2 (checked once at run time) three streams of
// the `crc32` instruction run interleaved over three parts of the buffer and
// are combined with a table that shifts a CRC over a fixed number of zero
// bytes (about memory speed); elsewhere a slicing-by-8 table version, about a
// tenth of that (docs/BENCHMARKS.md, "Measurements behind the code"). Both give
// the same values.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ncclz::base {

/// CRC-32C of `n` bytes at `p`, continued from `crc` (the CRC of the bytes
/// before them; 0 to start): crc32c(b, nb, crc32c(a, na)) == crc32c(a||b).
uint32_t crc32c(const void* p, size_t n, uint32_t crc = 0);

/// The portable version (no special instructions), for tests and benchmarks.
uint32_t crc32c_portable(const void* p, size_t n, uint32_t crc = 0);

/// Which version crc32c() runs on this CPU: "sse4.2" or "table".
const char* crc32c_impl();

}  // namespace ncclz::base
