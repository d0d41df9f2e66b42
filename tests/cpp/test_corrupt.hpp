// Shared by the decoder fuzz tests: decode a possibly corrupt blob.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <string>

#include "ncclz/codec/container.hpp"
#include "ncclz/error.hpp"

/// Decodes and inspects a possibly corrupt blob: it must either throw
/// CorruptData or return (with any contents). Anything else fails the test.
inline void poke(const ncclz::codec::ByteBuffer& blob, const std::string& what) {
  try {
    const ncclz::codec::Decoded d = ncclz::codec::decompress(blob.data(), blob.size());
    (void)d;
    (void)ncclz::codec::inspect(blob.data(), blob.size());
  } catch (const ncclz::CorruptData&) {
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": unexpected exception: " << e.what();
  }
}
