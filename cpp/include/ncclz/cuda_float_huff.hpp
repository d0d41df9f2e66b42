// Device coder for FloatHuff (codec 5, docs/FORMAT.md "FloatHuff"): lossless
// F32 / BF16 / F16 with the exponents in canonical Huffman sub-streams of 256
// values, one GPU thread per sub-stream; U8 (uint8, int8, the 8-bit floats)
// with each byte as the symbol. Writes the same payload bytes as the
// CPU coder (cpp/src/codec/float_huff.cpp) and decodes its payloads. Built
// only with CUDA (cuda/float_huff.cu); declared here without CUDA headers.
//
// Conventions as ncclz/cuda_codec.hpp's: d_* pointers are device memory; the
// calls are asynchronous on the coder's stream and write their results
// (payload size, status) to device memory, read after synchronize(); the
// return value is 0 when enqueued, a positive cudaError_t, or minus a
// codec::Status for arguments rejected on the host. The coder owns its
// scratch (grown by cudaMallocAsync in stream order; reserve() sizes it once).
//
// The encode is, per call: a histogram kernel, a one-thread table kernel
// (float_huff.hpp's rule), a word-count kernel, a device scan of the counts,
// the index kernel, and the kernel that writes the code words and the
// sign+mantissa plane. The decode is one kernel: each CTA builds the
// 4096-entry table in shared memory, checks its part of the index, decodes
// 128 sub-streams (one per thread) into shared memory and writes the values,
// merged with the plane, with coalesced stores.
//
// Three sets of kernels, byte-identical (an A/B switch: set_kernels, or
// NCCLZ_FLOATHUFF_KERNELS=v1|v2|v3 read at construction; default v2):
// - v1: one CTA per 128 sub-streams; a histogram of shared-memory atomics
//   into 256 bins, the exponents staged in shared memory for the count and
//   write kernels (2- or 4-byte loads), each thread storing its sub-stream's
//   words itself; the decode reads each thread's words from global memory.
// - v2: 16-byte loads of the values (8 per thread; scalar where unaligned or
//   at the end); the histogram in lane-private shared bins (no two lanes of
//   a warp add to one counter); the table built from a shared-memory copy of
//   the histogram; one warp per sub-stream in the count kernel
//   (a warp sum) and in the write kernel (a warp scan of the lanes' code
//   bits, the words assembled in shared memory and stored coalesced, the
//   plane in 4-byte stores); grids of a few CTAs per SM that loop; the
//   decode's CTAs loop over their sub-streams with the table built once (a
//   two-level table: 1024 entries for codes of up to 10 bits, 512 for longer),
//   words loaded three refills ahead of the decoder, and 4-/16-byte plane and
//   value accesses.
// - v3: v2's encode; a decode with a table of up to 3 symbols per 12-bit
//   window (16 KiB, built by the CTA's 256 threads at once), a warp per group
//   of 32 sub-streams (a lane each, the index checked by a warp scan, no CTA
//   barrier while decoding), exponents staged 4 at a time in 64-value
//   windows, each window's values written by the warp with 16-byte stores
//   (cuda/float_huff.cu, "v3 decode": the plan and the expected speed, not
//   yet measured on a GPU).
#pragma once

#include <cstddef>
#include <cstdint>

#include "ncclz/codec/format.hpp"

namespace ncclz::cuda {

class FloatHuffCoder {
 public:
  /// Work ordered on `stream` (a cudaStream_t; nullptr: the legacy default
  /// stream), which the coder does not own.
  explicit FloatHuffCoder(void* stream = nullptr);
  ~FloatHuffCoder();
  FloatHuffCoder(const FloatHuffCoder&) = delete;
  FloatHuffCoder& operator=(const FloatHuffCoder&) = delete;

  /// Grows the scratch for encodes of up to n values (decodes need none).
  int reserve(size_t n);

  /// Encodes n values of type t (F32, BF16, F16, U8) at d_x into the FloatHuff
  /// payload at d_out (4-byte aligned, `cap` bytes); writes the payload size
  /// to *d_bytes, or ~0 (the CPU's kNoFit) where it would exceed cap (d_out's
  /// first bytes are then scratch). n = 0: size 0. -Unsupported for other
  /// types or an unaligned d_out.
  int encode(const void* d_x, codec::ElemType t, size_t n, uint8_t* d_out, size_t cap, unsigned long long* d_bytes);

  /// The whole slice (docs/FORMAT.md: header and payload) that the CPU's
  /// codec::encode_slice writes for these values with choice FloatHuff, or
  /// Auto and allow_rans = false: FloatHuff where its payload fits
  /// slice_coder_room(t, n, cap), else the Raw slice (the values' bytes);
  /// raw_only: the Raw slice whatever FloatHuff would give (choice Raw). Into
  /// d_slice (4-byte aligned, cap bytes); *d_bytes the slice's size (0 with
  /// NoSpace), *d_status Ok or NoSpace (cap below the Raw slice it needed).
  int encode_slice(const void* d_x, codec::ElemType t, size_t n, uint8_t* d_slice, size_t cap,
                   unsigned long long* d_bytes, int* d_status, bool raw_only = false);

  /// Decodes the payload of `len` bytes at d_in (4-byte aligned) into n
  /// values of type t at d_out, bit-exact; *d_status: a codec::Status (Ok, or
  /// Corrupt on any inconsistency, as the CPU decoder's checks; d_out then
  /// holds anything). The values must not overlap the payload.
  int decode(const uint8_t* d_in, size_t len, codec::ElemType t, size_t n, void* d_out, int* d_status);

  int synchronize();

  /// The kernels encode and decode use: 1 (v1), 2 (v2, the default) or 3 (v3;
  /// see above); any other value means 2.
  void set_kernels(int version) { kernels_ = version == 1 || version == 3 ? version : 2; }
  int kernels() const { return kernels_; }

 private:
  int sms();  // the device's SM count (v2's grid sizes), asked once
  uint8_t* scratch(size_t bytes, int* err);
  void* stream_ = nullptr;
  uint8_t* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  int kernels_ = 2;
  int sms_ = 0;
};

}  // namespace ncclz::cuda
