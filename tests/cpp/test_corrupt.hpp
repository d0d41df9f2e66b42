// Shared by the decoder fuzz tests: decode a possibly corrupt blob.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <string>

#include "base/crc32c.hpp"
#include "ncclz/codec/container.hpp"
#include "ncclz/codec/format.hpp"
#include "ncclz/error.hpp"

/// Recomputes the CRC-32C trailer of a version-2 blob (docs/FORMAT.md,
/// "Container (blob)") after a test changed it, so that the change reaches
/// the field checks and decoders behind the checksum, as a crafted blob
/// would. Blobs too short to have one, or of version 1, are left alone.
inline ncclz::codec::ByteBuffer resealed(ncclz::codec::ByteBuffer b) {
  if (b.size() >= 8 && b[4] == 2) {
    ncclz::codec::store_u32(b.data() + b.size() - 4, ncclz::base::crc32c(b.data(), b.size() - 4));
  }
  return b;
}

/// Decodes and inspects a possibly corrupt blob: it must either throw
/// CorruptData or return (with any contents). Anything else fails the test.
/// Twice: as given (the checksum sees any change), and resealed (the checks
/// behind it must hold on their own).
inline void poke(const ncclz::codec::ByteBuffer& blob, const std::string& what) {
  for (const ncclz::codec::ByteBuffer* b : {&blob, static_cast<const ncclz::codec::ByteBuffer*>(nullptr)}) {
    const ncclz::codec::ByteBuffer sealed = b ? ncclz::codec::ByteBuffer() : resealed(blob);
    const ncclz::codec::ByteBuffer& x = b ? *b : sealed;
    try {
      const ncclz::codec::Decoded d = ncclz::codec::decompress(x.data(), x.size());
      (void)d;
      (void)ncclz::codec::inspect(x.data(), x.size());
    } catch (const ncclz::CorruptData&) {
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << (b ? "" : " (resealed)") << ": unexpected exception: " << e.what();
    }
  }
}
