// FloatHuff on the device (ncclz/cuda_float_huff.hpp; format: docs/FORMAT.md
// "FloatHuff"; the table rule and layout arithmetic: codec/float_huff.hpp,
// shared with the CPU coder). Byte-identical to the CPU encoder.
//
// A CTA covers kCtaSubs sub-streams (kCtaValues values): it loads its values
// with coalesced loads, keeps their exponents in shared memory (each
// sub-stream's 256 bytes at a stride of 260, so that the 32 threads of a warp
// reading byte i of their own sub-streams hit 32 different banks), and each
// thread codes or decodes one sub-stream from there.
#include <cuda_runtime.h>

#include <algorithm>

#include "codec/float_huff.hpp"
#include "codec/slice_frame.hpp"
#include "device_common.cuh"
#include "ncclz/cuda_float_huff.hpp"

namespace ncclz::cuda {
namespace {

using codec::ElemType;
using codec::Status;
using detail::ScratchLayout;

constexpr int kCtaSubs = 128;  // threads (sub-streams) per CTA; a multiple of kFhGroup
constexpr uint32_t kStride = codec::kFhSubValues + 4;
constexpr uint32_t kCtaValues = kCtaSubs * codec::kFhSubValues;
constexpr unsigned long long kNoFitBytes = ~0ull;
static_assert(kCtaSubs % codec::kFhGroup == 0, "a CTA holds whole groups");

// What the table kernel leaves for the others.
struct EncState {
  uint32_t hist[256];
  uint8_t len[256];
  uint16_t code[256];
  int coded;  // more than one symbol: code words; else none
  int fits;   // the payload fits cap (the index kernel's verdict)
  unsigned long long words;
};

__device__ __forceinline__ uint32_t bits_of(const void* x, ElemType t, size_t i) {
  return t == ElemType::F32 ? static_cast<const uint32_t*>(x)[i] : uint32_t(static_cast<const uint16_t*>(x)[i]);
}
__device__ __forceinline__ uint32_t exponent_of(uint32_t b, ElemType t) {
  return t == ElemType::F32 ? (b >> 23) & 0xFFu : t == ElemType::BF16 ? (b >> 7) & 0xFFu : (b >> 10) & 0x1Fu;
}
// Shared-memory slot of value j of a CTA.
__device__ __forceinline__ uint32_t slot(uint32_t j) {
  return (j / codec::kFhSubValues) * kStride + j % codec::kFhSubValues;
}

// The CTA's exponents into e[] (values past n: nothing).
__device__ void load_exponents(const void* x, ElemType t, size_t n, size_t base, uint8_t* e) {
  for (uint32_t j = threadIdx.x; j < kCtaValues; j += blockDim.x) {
    const size_t i = base + j;
    if (i < n) e[slot(j)] = uint8_t(exponent_of(bits_of(x, t, i), t));
  }
}

__global__ void fh_hist_kernel(const void* x, ElemType t, size_t n, EncState* st) {
  __shared__ uint32_t h[256];
  for (uint32_t s = threadIdx.x; s < 256; s += blockDim.x) h[s] = 0;
  __syncthreads();
  const size_t base = size_t(blockIdx.x) * kCtaValues;
  for (uint32_t j = threadIdx.x; j < kCtaValues; j += blockDim.x) {
    const size_t i = base + j;
    if (i < n) atomicAdd(&h[exponent_of(bits_of(x, t, i), t)], 1u);
  }
  __syncthreads();
  for (uint32_t s = threadIdx.x; s < 256; s += blockDim.x)
    if (h[s]) atomicAdd(&st->hist[s], h[s]);
}

// One thread: the code lengths and codes (the CPU's rule), and the payload's
// table of 4-bit lengths.
__global__ void fh_table_kernel(ElemType t, EncState* st, uint8_t* out) {
  const uint32_t A = codec::fh_alphabet(t);
  codec::fh_build_lengths(st->hist, A, st->len);
  codec::fh_canonical_codes(st->len, A, st->code);
  uint32_t m = 0;
  for (uint32_t s = 0; s < A; ++s) m += st->len[s] != 0;
  st->coded = m > 1;
  for (uint32_t s = 0; s < A; s += 2) out[s / 2] = uint8_t(st->len[s] | (st->len[s + 1] << 4));
}

// Each thread: its sub-stream's word count, into the payload's u8 counts and
// the scan's input.
__global__ void fh_count_kernel(const void* x, ElemType t, size_t n, const EncState* st, uint8_t* counts,
                                unsigned long long* words) {
  __shared__ uint8_t e[kCtaSubs * kStride];
  __shared__ uint8_t len[256];
  for (uint32_t s = threadIdx.x; s < 256; s += blockDim.x) len[s] = st->len[s];
  const size_t base = size_t(blockIdx.x) * kCtaValues;
  load_exponents(x, t, n, base, e);
  __syncthreads();
  const uint64_t k = uint64_t(blockIdx.x) * kCtaSubs + threadIdx.x;
  if (k >= codec::fh_substreams(n)) return;
  uint32_t bits = 0;
  if (st->coded) {
    const uint32_t c = codec::fh_sub_count(n, k);
    const uint8_t* ek = e + threadIdx.x * kStride;
    for (uint32_t i = 0; i < c; ++i) bits += len[ek[i]];
  }
  const uint32_t w = (bits + 31) / 32;
  counts[k] = uint8_t(w);
  words[k] = w;
}

// The group offsets, the index padding, the total and whether it fits.
__global__ void fh_index_kernel(ElemType t, size_t n, size_t cap, const unsigned long long* words,
                                const unsigned long long* offsets, EncState* st, uint8_t* out,
                                unsigned long long* d_bytes) {
  const uint64_t S = codec::fh_substreams(n), G = codec::fh_groups(n);
  const uint64_t g = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g < G) codec::store_u32(out + codec::fh_table_bytes(t) + 4 * g, uint32_t(offsets[g * codec::kFhGroup]));
  if (g == 0) {
    const unsigned long long total = offsets[S - 1] + words[S - 1];
    for (uint64_t z = codec::fh_table_bytes(t) + 4 * G + S; z < codec::fh_index_bytes(t, n); ++z) out[z] = 0;
    const unsigned long long bytes = codec::fh_payload_bytes(t, n, total, codec::fh_plane_bytes(t, n));
    const bool fits = total <= 0xFFFFFFFFull && bytes <= cap;
    st->fits = fits;
    st->words = total;
    *d_bytes = fits ? bytes : kNoFitBytes;
  }
}

// F16 plane: 8 values of 11 bits in 11 bytes, LSB-first (FloatExp's packing).
__device__ __forceinline__ uint32_t f16_sm(uint32_t b) { return ((b >> 5) & 0x400u) | (b & 0x3FFu); }

// The plane bytes of the CTA's values, then each thread's code words.
__global__ void fh_write_kernel(const void* x, ElemType t, size_t n, const EncState* st,
                                const unsigned long long* offsets, uint8_t* out) {
  if (!st->fits) return;
  __shared__ uint8_t e[kCtaSubs * kStride];
  __shared__ uint8_t len[256];
  __shared__ uint16_t code[256];
  for (uint32_t s = threadIdx.x; s < 256; s += blockDim.x) {
    len[s] = st->len[s];
    code[s] = st->code[s];
  }
  const size_t base = size_t(blockIdx.x) * kCtaValues;
  const uint64_t index = codec::fh_index_bytes(t, n);
  uint8_t* plane = out + index + 4 * st->words;
  if (t == ElemType::F16) {
    for (uint32_t j8 = threadIdx.x; j8 < kCtaValues / 8; j8 += blockDim.x) {
      const size_t i0 = base + 8 * size_t(j8);
      if (i0 >= n) break;
      uint64_t acc = 0;  // 88 bits: the low 64 here, the high 24 in hi
      uint32_t hi = 0;
      const uint32_t m = n - i0 < 8 ? uint32_t(n - i0) : 8u;
      for (uint32_t k = 0; k < m; ++k) {
        const uint32_t b = bits_of(x, t, i0 + k);
        e[slot(8 * j8 + k)] = uint8_t(exponent_of(b, t));
        const uint64_t v = f16_sm(b);
        const uint32_t at = 11 * k;
        if (at < 64) acc |= v << at;
        if (at + 11 > 64) hi |= at >= 64 ? uint32_t(v << (at - 64)) : uint32_t(v >> (64 - at));
      }
      uint8_t* p = plane + i0 / 8 * 11;
      const uint32_t nbytes = (11 * m + 7) / 8;
      for (uint32_t b = 0; b < nbytes; ++b) p[b] = uint8_t(b < 8 ? acc >> (8 * b) : hi >> (8 * (b - 8)));
    }
  } else {
    for (uint32_t j = threadIdx.x; j < kCtaValues; j += blockDim.x) {
      const size_t i = base + j;
      if (i >= n) break;
      const uint32_t b = bits_of(x, t, i);
      e[slot(j)] = uint8_t(exponent_of(b, t));
      if (t == ElemType::F32) {
        const uint32_t sm = ((b >> 8) & 0x800000u) | (b & 0x7FFFFFu);
        plane[3 * i] = uint8_t(sm);
        plane[3 * i + 1] = uint8_t(sm >> 8);
        plane[3 * i + 2] = uint8_t(sm >> 16);
      } else {
        plane[i] = uint8_t(((b >> 8) & 0x80u) | (b & 0x7Fu));
      }
    }
  }
  __syncthreads();
  const uint64_t k = uint64_t(blockIdx.x) * kCtaSubs + threadIdx.x;
  if (!st->coded || k >= codec::fh_substreams(n)) return;
  // Codes MSB-first into 32-bit words (the format's bit order).
  uint32_t* w = reinterpret_cast<uint32_t*>(out + index) + offsets[k];
  const uint32_t c = codec::fh_sub_count(n, k);
  const uint8_t* ek = e + threadIdx.x * kStride;
  uint64_t acc = 0;
  int nb = 0;
  for (uint32_t i = 0; i < c; ++i) {
    const uint32_t s = ek[i], l = len[s];
    acc = (acc << l) | code[s];
    nb += int(l);
    if (nb >= 32) {
      nb -= 32;
      *w++ = uint32_t(acc >> nb);
    }
  }
  if (nb > 0) *w = uint32_t(acc << (32 - nb));
}

// A sub-stream reader as the CPU's: a 64-bit window, zeros past the last word.
struct DevReader {
  const uint32_t* p;
  uint32_t left;
  int nb;
  uint64_t buf;
  uint32_t used;
  __device__ __forceinline__ uint32_t next(const uint16_t* lut) {
    if (nb <= 32) {
      uint32_t w = 0;
      if (left) {
        w = *p++;
        --left;
      }
      buf |= uint64_t(w) << (32 - nb);
      nb += 32;
    }
    const uint32_t e = lut[buf >> (64 - codec::kFhMaxLen)];
    const uint32_t l = e & 15;
    buf <<= l;
    nb -= int(l);
    used += l;
    return e >> 4;
  }
};

__global__ void fh_decode_kernel(const uint8_t* in, ElemType t, size_t n, unsigned long long words, void* outv,
                                 int* status) {
  __shared__ uint16_t lut[codec::kFhLutSize];
  __shared__ uint8_t e[kCtaSubs * kStride];
  __shared__ uint8_t ln[256];
  __shared__ uint16_t code[256];
  __shared__ uint32_t cnt[kCtaSubs];
  __shared__ int bad, coded, single;
  const uint32_t A = codec::fh_alphabet(t);
  const uint64_t S = codec::fh_substreams(n), G = codec::fh_groups(n);
  const uint64_t index = codec::fh_index_bytes(t, n);
  const uint8_t* bases = in + codec::fh_table_bytes(t);
  const uint8_t* counts = bases + 4 * G;
  const uint32_t tid = threadIdx.x;
  if (tid == 0) {
    bad = 0;
    for (uint32_t s = 0; s < A; s += 2) {
      ln[s] = in[s / 2] & 15;
      ln[s + 1] = in[s / 2] >> 4;
    }
    uint32_t m = 0, sym = 0;
    for (uint32_t s = 0; s < A; ++s)
      if (ln[s]) {
        ++m;
        sym = s;
      }
    if (!codec::fh_lengths_valid(ln, A)) bad = 1;
    coded = m > 1;
    single = int(sym);
    codec::fh_canonical_codes(ln, A, code);
    // The index padding (CTA 0 checks it).
    if (blockIdx.x == 0)
      for (uint64_t z = codec::fh_table_bytes(t) + 4 * G + S; z < index; ++z)
        if (in[z]) bad = 1;
  }
  const uint64_t k = uint64_t(blockIdx.x) * kCtaSubs + tid;
  const uint32_t c = k < S ? counts[k] : 0u;
  cnt[tid] = c;
  __syncthreads();
  if (bad) {
    if (tid == 0) atomicExch(status, int(Status::Corrupt));
    return;
  }
  if (coded) {
    for (uint32_t s = tid; s < A; s += blockDim.x) {
      const uint32_t l = ln[s];
      if (l == 0) continue;
      const uint32_t first = uint32_t(code[s]) << (codec::kFhMaxLen - l), span = 1u << (codec::kFhMaxLen - l);
      for (uint32_t i = 0; i < span; ++i) lut[first + i] = uint16_t(s << 4 | l);
    }
  }
  __syncthreads();
  // The index: each group's offset is its predecessor's plus that group's
  // counts (the last group ends at the payload's words), group 0 starts at 0;
  // the first thread of each group checks its group.
  const uint32_t g0 = tid - tid % codec::kFhGroup;
  bool ok = c <= codec::kFhMaxSubWords && (coded || c == 0);
  uint64_t start = 0;
  if (k < S) {
    const uint64_t g = k / codec::kFhGroup;
    const uint64_t gb = codec::load_u32(bases + 4 * g);
    start = gb;
    for (uint32_t j = g0; j < tid; ++j) start += cnt[j];
    if (tid == g0) {
      uint64_t sum = 0;
      for (uint32_t j = g0; j < g0 + codec::kFhGroup; ++j) sum += cnt[j];
      const uint64_t next = g + 1 < G ? codec::load_u32(bases + 4 * (g + 1)) : words;
      if ((g == 0 && gb != 0) || gb + sum != next) ok = false;
    }
    // Never read outside the words, whatever another CTA finds.
    if (start + c > words) ok = false;
  }
  if (k < S && ok) {
    const uint32_t nv = codec::fh_sub_count(n, k);
    uint8_t* ek = e + tid * kStride;
    if (coded) {
      const uint32_t* w = reinterpret_cast<const uint32_t*>(in + index) + start;
      DevReader r{w, c, 0, 0, 0};
      for (uint32_t i = 0; i < nv; ++i) ek[i] = uint8_t(r.next(lut));
      // The codes end in the last word; its bits after them are zero.
      const uint32_t have = 32 * c;
      if (r.used > have || have - r.used >= 32) {
        ok = c == 0 && r.used == 0;
      } else if (have != r.used && (w[c - 1] & ((1u << (have - r.used)) - 1)) != 0) {
        ok = false;
      }
    } else {
      for (uint32_t i = 0; i < nv; ++i) ek[i] = uint8_t(single);
    }
  }
  if (!ok) atomicExch(&bad, 1);
  __syncthreads();
  if (bad) {
    if (tid == 0) atomicExch(status, int(Status::Corrupt));
    return;
  }
  // The values: exponents from shared memory, sign+mantissa from the plane.
  const size_t base = size_t(blockIdx.x) * kCtaValues;
  const uint8_t* plane = in + index + 4 * words;
  if (t == ElemType::F16) {
    uint16_t* out = static_cast<uint16_t*>(outv);
    for (uint32_t j8 = tid; j8 < kCtaValues / 8; j8 += blockDim.x) {
      const size_t i0 = base + 8 * size_t(j8);
      if (i0 >= n) break;
      const uint32_t m = n - i0 < 8 ? uint32_t(n - i0) : 8u;
      const uint8_t* p = plane + i0 / 8 * 11;
      uint64_t lo = 0;
      uint32_t hi = 0;
      for (uint32_t b = 0; b < (11 * m + 7) / 8; ++b) {
        if (b < 8)
          lo |= uint64_t(p[b]) << (8 * b);
        else
          hi |= uint32_t(p[b]) << (8 * (b - 8));
      }
      for (uint32_t k8 = 0; k8 < 8; ++k8) {
        const uint32_t at = 11 * k8;
        uint32_t v = at < 64 ? uint32_t(lo >> at) : 0u;
        if (at + 11 > 64) v |= at >= 64 ? hi >> (at - 64) : hi << (64 - at);
        v &= 0x7FFu;
        if (k8 >= m) {
          if (v) atomicExch(status, int(Status::Corrupt));  // the last byte's padding bits must be zero
          continue;
        }
        const uint32_t ex = e[slot(8 * j8 + k8)];
        out[i0 + k8] = uint16_t(((v & 0x400u) << 5) | (ex << 10) | (v & 0x3FFu));
      }
    }
  } else {
    for (uint32_t j = tid; j < kCtaValues; j += blockDim.x) {
      const size_t i = base + j;
      if (i >= n) break;
      const uint32_t ex = e[slot(j)];
      if (t == ElemType::F32) {
        const uint32_t sm =
            uint32_t(plane[3 * i]) | (uint32_t(plane[3 * i + 1]) << 8) | (uint32_t(plane[3 * i + 2]) << 16);
        static_cast<uint32_t*>(outv)[i] = ((sm & 0x800000u) << 8) | (ex << 23) | (sm & 0x7FFFFFu);
      } else {
        const uint32_t sm = plane[i];
        static_cast<uint16_t*>(outv)[i] = uint16_t(((sm & 0x80u) << 8) | (ex << 7) | (sm & 0x7Fu));
      }
    }
  }
}

// The slice around the payload encode() left at slice + kHeaderBytes (its
// size in *coded): frame_slice's verdict, computed alike by every CTA; CTA 0
// writes the header, size and status; a Raw slice's values are copied by all.
__global__ void fh_frame_kernel(const void* x, ElemType t, uint32_t n, size_t cap, const unsigned long long* coded,
                                uint8_t* slice, unsigned long long* d_bytes, int* status) {
  codec::SliceHeader h;
  const Status st =
      codec::frame_slice(t, n, cap, codec::Codec::FloatHuff, codec::Predictor::None, 0, 0, size_t(*coded), &h);
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    *status = int(st);
    *d_bytes = st == Status::Ok ? codec::kHeaderBytes + h.payload_bytes : 0ull;
    if (st == Status::Ok) codec::write_header(slice, h);
  }
  if (st != Status::Ok || h.codec != codec::Codec::Raw) return;
  const uint8_t* src = static_cast<const uint8_t*>(x);
  uint8_t* dst = slice + codec::kHeaderBytes;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < h.payload_bytes;
       i += size_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

__global__ void fh_set_kernel(int* status, int v, unsigned long long* bytes, unsigned long long b) {
  if (status) *status = v;
  if (bytes) *bytes = b;
}

}  // namespace

FloatHuffCoder::FloatHuffCoder(void* stream) : stream_(stream) {}

FloatHuffCoder::~FloatHuffCoder() {
  if (scratch_) cudaFreeAsync(scratch_, static_cast<cudaStream_t>(stream_));
}

int FloatHuffCoder::synchronize() { return int(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_))); }

uint8_t* FloatHuffCoder::scratch(size_t bytes, int* err) {
  *err = detail::grow_on_stream(static_cast<cudaStream_t>(stream_), &scratch_, &scratch_bytes_, bytes);
  return *err ? nullptr : scratch_;
}

namespace {
// The encode's scratch: the state, the counts, their offsets, the scan's
// storage; encode_slice's payload size.
struct EncLayout {
  ScratchLayout l;
  size_t st, words, offsets, tmp, tmp_bytes, coded;
  explicit EncLayout(size_t n) {
    const size_t S = size_t(codec::fh_substreams(n));
    st = l.add(sizeof(EncState));
    words = l.add(S * 8);
    offsets = l.add(S * 8);
    tmp_bytes = detail::exclusive_sum_bytes(S);
    tmp = l.add(tmp_bytes);
    coded = l.add(8);
  }
};
}  // namespace

int FloatHuffCoder::reserve(size_t n) {
  int err = 0;
  scratch(EncLayout(n).l.bytes(), &err);
  return err;
}

int FloatHuffCoder::encode(const void* d_x, ElemType t, size_t n, uint8_t* d_out, size_t cap,
                           unsigned long long* d_bytes) {
  if (!codec::fh_type(t) || (reinterpret_cast<uintptr_t>(d_out) & 3) != 0)
    return detail::host_error(Status::Unsupported);
  const cudaStream_t s = static_cast<cudaStream_t>(stream_);
  if (n == 0 || cap < codec::fh_index_bytes(t, n) + codec::fh_plane_bytes(t, n)) {
    fh_set_kernel<<<1, 1, 0, s>>>(nullptr, 0, d_bytes, n == 0 ? 0ull : kNoFitBytes);
    return int(cudaGetLastError());
  }
  const EncLayout L(n);
  int err = 0;
  uint8_t* base = scratch(L.l.bytes(), &err);
  if (err) return err;
  EncState* st = ScratchLayout::at<EncState>(base, L.st);
  auto* words = ScratchLayout::at<unsigned long long>(base, L.words);
  auto* offsets = ScratchLayout::at<unsigned long long>(base, L.offsets);
  const size_t S = size_t(codec::fh_substreams(n)), G = size_t(codec::fh_groups(n));
  const unsigned ctas = unsigned((S + kCtaSubs - 1) / kCtaSubs);
  cudaError_t e = cudaMemsetAsync(st->hist, 0, sizeof(st->hist), s);
  if (e != cudaSuccess) return int(e);
  fh_hist_kernel<<<ctas, kCtaSubs, 0, s>>>(d_x, t, n, st);
  fh_table_kernel<<<1, 1, 0, s>>>(t, st, d_out);
  uint8_t* counts = d_out + codec::fh_table_bytes(t) + 4 * G;
  fh_count_kernel<<<ctas, kCtaSubs, 0, s>>>(d_x, t, n, st, counts, words);
  e = detail::exclusive_sum_u64(words, offsets, S, base + L.tmp, L.tmp_bytes, s);
  if (e != cudaSuccess) return int(e);
  fh_index_kernel<<<detail::grid_for(G), detail::kThreads, 0, s>>>(t, n, cap, words, offsets, st, d_out, d_bytes);
  fh_write_kernel<<<ctas, kCtaSubs, 0, s>>>(d_x, t, n, st, offsets, d_out);
  return int(cudaGetLastError());
}

int FloatHuffCoder::encode_slice(const void* d_x, ElemType t, size_t n, uint8_t* d_slice, size_t cap,
                                 unsigned long long* d_bytes, int* d_status, bool raw_only) {
  if (!codec::fh_type(t) || n > 0xFFFFFFFFu || (reinterpret_cast<uintptr_t>(d_slice) & 3) != 0)
    return detail::host_error(Status::Unsupported);
  // The payload's size goes to a word of the scratch (grown here, so that
  // encode() does not move it).
  const EncLayout L(n);
  int err = 0;
  uint8_t* base = scratch(L.l.bytes(), &err);
  if (err) return err;
  auto* coded = ScratchLayout::at<unsigned long long>(base, L.coded);
  const cudaStream_t s = static_cast<cudaStream_t>(stream_);
  const size_t room = codec::slice_coder_room(t, n, cap);
  if (raw_only || cap < codec::kHeaderBytes) {
    fh_set_kernel<<<1, 1, 0, s>>>(nullptr, 0, coded, kNoFitBytes);
    err = int(cudaGetLastError());
  } else {
    err = encode(d_x, t, n, d_slice + codec::kHeaderBytes, room, coded);
  }
  if (err) return err;
  const size_t raw = n * codec::elem_size(t);
  const unsigned ctas = unsigned(std::min<size_t>(1024, std::max<size_t>(1, (raw + 4095) / 4096)));
  fh_frame_kernel<<<ctas, detail::kThreads, 0, s>>>(d_x, t, uint32_t(n), cap, coded, d_slice, d_bytes, d_status);
  return int(cudaGetLastError());
}

int FloatHuffCoder::decode(const uint8_t* d_in, size_t len, ElemType t, size_t n, void* d_out, int* d_status) {
  if (!codec::fh_type(t) || (reinterpret_cast<uintptr_t>(d_in) & 3) != 0)
    return detail::host_error(Status::Unsupported);
  const cudaStream_t s = static_cast<cudaStream_t>(stream_);
  // The payload's size against n (as the CPU decoder's first check).
  const uint64_t fixed = codec::fh_index_bytes(t, n) + codec::fh_plane_bytes(t, n);
  if (n == 0 || len < fixed || (len - fixed) % 4 != 0) {
    const Status st = n == 0 && len == 0 ? Status::Ok : Status::Corrupt;
    fh_set_kernel<<<1, 1, 0, s>>>(d_status, int(st), nullptr, 0);
    return int(cudaGetLastError());
  }
  const size_t S = size_t(codec::fh_substreams(n));
  const unsigned ctas = unsigned((S + kCtaSubs - 1) / kCtaSubs);
  fh_set_kernel<<<1, 1, 0, s>>>(d_status, int(Status::Ok), nullptr, 0);
  fh_decode_kernel<<<ctas, kCtaSubs, 0, s>>>(d_in, t, n, (len - fixed) / 4, d_out, d_status);
  return int(cudaGetLastError());
}

}  // namespace ncclz::cuda
