// Persistent ring all_reduce (ncclz/cuda_persistent.hpp): one kernel per call
// and rank, one CTA per channel, running the CPU ring's schedule
// (algorithms/ring.cpp, ring_all_reduce) on the device.
//
// FIFO (owned by the receiver, one device allocation per rank: channel c at
// c * fifo_channel_bytes):
//   offset 0    head   slots posted by the sender (the previous rank writes it)
//   offset 64   tail   slots released by the receiver (this rank writes it)
//   offset 128  sizes  bytes of each slot's slice (kMaxSlots u64, the sender writes)
//   offset 256  K slots of slot_stride = slot_bytes rounded up to 16 bytes
// Counters only grow (slot i of the stream is slot i % K); a sender may fill
// slot `head` once tail > head - K, a receiver read slot `tail` once head >
// tail. Publication: the CTA writes the slot (or releases it), __syncthreads,
// then thread 0 stores the size and does __threadfence_system before the
// volatile store of the counter; the waiting thread 0 reads the counter
// volatile, then __threadfence before the CTA (after __syncthreads) reads
// the slot. Nothing in the layout is a pointer: a later version maps it into
// another process with a CUDA IPC handle.
//
// Per slice of a verb (prims.hpp's flags): RECV waits for the incoming slot,
// SEND for a free outgoing one; then Coded mode decodes (cta_decode_slice;
// REDUCE: added into the local codes, to the output or the channel's
// scratch), encodes the sum or the local slice (cta_encode_slice, the CPU's
// bytes) into the outgoing slot, or (FORWARD, the allgather phase) copies the
// received bytes unchanged and decodes them once into the output; Raw mode
// moves and sums the values themselves. Then the received slot is released
// and the sent one posted. Every wait checks the group's abort word and the
// timeout (no progress for timeout_ns by %globaltimer) and reports
// (RingReport) instead of hanging; a failing CTA sets the abort word so that
// its peers stop too.
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "cta_slice.cuh"
#include "device_sync.cuh"
#include "ncclz/cuda_persistent.hpp"

namespace ncclz::cuda {
namespace {

using namespace detail;
using codec::Codec;
using codec::ElemType;
using codec::Predictor;
using codec::Status;

constexpr int kMaxSlots = 16;
constexpr size_t kFifoHeader = 256;
constexpr size_t kTailAt = 64 / 8, kSizesAt = 128 / 8;  // in u64 words

size_t slot_stride(size_t slot_bytes) { return (slot_bytes + 15) & ~size_t(15); }
size_t fifo_channel_bytes(size_t slot_bytes, int slots) {
  return kFifoHeader + size_t(slots) * slot_stride(slot_bytes);
}

enum : int { kRecv = 1, kReduce = 2, kCopy = 4, kSend = 8, kForward = 16 };

struct RingArgs {
  int rank, nranks, K;
  uint8_t* in_fifo;   // this rank's FIFOs
  uint8_t* out_fifo;  // the next rank's
  size_t chan_bytes, stride, slot_bytes;
  const void* src;
  void* dst;
  size_t count;
  void* scratch;  // L elements per channel
  uint32_t L;     // elements per slice
  size_t seg;     // elements per chunk: K / 2 slices
  Predictor pred;
  int* abort;
  RingReport* rep;  // per channel
  uint64_t timeout_ns;
};

struct Fifo {
  uint64_t* head;
  uint64_t* tail;
  uint64_t* sizes;
  uint8_t* slots;
  __device__ Fifo(uint8_t* base) {
    auto* w = reinterpret_cast<uint64_t*>(base);
    head = w;
    tail = w + kTailAt;
    sizes = w + kSizesAt;
    slots = base + kFifoHeader;
  }
};

/// The CTA copies len bytes between 16-byte-aligned addresses (slots).
__device__ __forceinline__ void cta_copy(uint8_t* d, const uint8_t* s, size_t len) {
  const size_t chunks = len / 16;
  for (size_t i = threadIdx.x; i < chunks; i += kThreads)
    reinterpret_cast<uint4*>(d)[i] = reinterpret_cast<const uint4*>(s)[i];
  for (size_t i = chunks * 16 + threadIdx.x; i < len; i += kThreads) d[i] = s[i];
}

template <class T>
__device__ __forceinline__ T add(T x, T y) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return T(U(U(x) + U(y)));
  } else {
    return x + y;
  }
}

// One channel's CTA. T: the wire element (codes in Coded mode).
template <class T, bool kCoded>
struct RingCta {
  using Code = std::conditional_t<kCoded, T, int32_t>;
  union Smem {
    CtaEncSmem<Code> enc;
    CtaDecSmem<Code> dec;
  };
  const RingArgs& a;
  Smem& sm;
  int* s_err;  // shared
  Fifo in, out;
  uint64_t rtail, shead;  // every thread's copy, kept alike
  uint32_t step = 0;
  T* scratch;
  int prev, next;

  __device__ RingCta(const RingArgs& args, Smem& s, int* err)
      : a(args),
        sm(s),
        s_err(err),
        in(args.in_fifo + blockIdx.x * args.chan_bytes),
        out(args.out_fifo + blockIdx.x * args.chan_bytes) {
    rtail = load_volatile(in.tail);
    shead = load_volatile(out.head);
    scratch = static_cast<T*>(args.scratch) + size_t(blockIdx.x) * args.L;
    prev = (a.rank + a.nranks - 1) % a.nranks;
    next = (a.rank + 1) % a.nranks;
  }

  // Thread 0: the report, and the abort word for the peers.
  __device__ void fail(RingError e, int cst, int peer) {
    RingReport r;
    r.error = int(e);
    r.codec_status = cst;
    r.peer = peer;
    r.step = step;
    a.rep[blockIdx.x] = r;
    if (e != RingError::Aborted) {
      *reinterpret_cast<volatile int*>(a.abort) = 1;
      __threadfence_system();
    }
  }

  // Until *counter >= want (thread 0 spins; the CTA waits at a barrier).
  __device__ bool wait(const uint64_t* counter, uint64_t want, int peer) {
    if (threadIdx.x == 0) {
      RingError e = RingError::None;
      const uint64_t t0 = global_ns();
      while (load_volatile(counter) < want) {
        if (load_volatile(a.abort)) {
          e = RingError::Aborted;
          break;
        }
        if (global_ns() - t0 > a.timeout_ns) {
          e = RingError::TimedOut;
          break;
        }
        spin_pause();
      }
      __threadfence();  // acquire: the slot's bytes (or its release) before what follows
      *s_err = int(e);
      if (e != RingError::None) fail(e, 0, peer);
    }
    __syncthreads();
    const bool ok = *s_err == 0;
    __syncthreads();  // *s_err is rewritten by the next wait
    return ok;
  }

  // One slice of m elements: src the local input's, dst the output's.
  __device__ bool slice(int f, const T* src, T* dst, uint32_t m) {
    const uint8_t* in_slot = nullptr;
    uint64_t in_len = 0;
    uint8_t* out_slot = nullptr;
    if (f & kRecv) {
      if (!wait(in.head, rtail + 1, prev)) return false;
      in_slot = in.slots + (rtail % uint64_t(a.K)) * a.stride;
      in_len = load_volatile(&in.sizes[rtail % uint64_t(a.K)]);
      if (in_len > a.slot_bytes) in_len = a.slot_bytes;
    }
    if (f & kSend) {
      if (!wait(out.tail, shead + 1 > uint64_t(a.K) ? shead + 1 - uint64_t(a.K) : 0, next)) return false;
      out_slot = out.slots + (shead % uint64_t(a.K)) * a.stride;
    }
    uint64_t out_len = 0;
    Status st = Status::Ok;
    if constexpr (kCoded) {
      const EncodeParams ep{codec::slice_predictor(a.pred, 0, 0, m), 0, 0};
      auto encode = [&](const T* codes) {
        const CtaEncoded e =
            cta_encode_slice(CodesIn<T>{codes}, 0, m, Codec::Block, ep.p, ep, out_slot, a.slot_bytes, sm.enc);
        out_len = e.bytes;
        return e.status;
      };
      if (f & kForward) {
        cta_copy(out_slot, in_slot, in_len);
        out_len = in_len;
        st = cta_decode_slice(in_slot, in_len, m, true, 0, CodesOut<T>{dst}, sm.dec, nullptr);
      } else if ((f & kRecv) && (f & kReduce)) {
        T* sum = (f & kCopy) ? dst : scratch;
        st = cta_decode_slice(in_slot, in_len, m, true, 0, AddOut<T>{sum, src}, sm.dec, nullptr);
        __syncthreads();  // the sum in memory, the shared memory free for the encoder
        if (st == Status::Ok && (f & kSend)) st = encode(sum);
      } else if (f & kRecv) {
        st = cta_decode_slice(in_slot, in_len, m, true, 0, CodesOut<T>{dst}, sm.dec, nullptr);
      } else {
        st = encode(src);
        if (f & kCopy)
          for (uint32_t i = threadIdx.x; i < m; i += kThreads) dst[i] = src[i];
      }
    } else {
      out_len = uint64_t(m) * sizeof(T);
      if ((f & kRecv) && in_len != out_len) {
        st = Status::Corrupt;  // uniform: every thread read the same size
      } else {                 // FORWARD too: the received values, sent on unchanged
        const T* rin = reinterpret_cast<const T*>(in_slot);
        T* rout = reinterpret_cast<T*>(out_slot);
        for (uint32_t i = threadIdx.x; i < m; i += kThreads) {
          const T v = (f & kRecv) ? ((f & kReduce) ? add(rin[i], src[i]) : rin[i]) : src[i];
          if (f & kSend) rout[i] = v;
          if (f & kCopy) dst[i] = v;
        }
      }
    }
    __syncthreads();         // the slots read and written by every thread
    if (st != Status::Ok) {  // uniform
      if (threadIdx.x == 0) fail(RingError::Codec, int(st), (f & kRecv) ? prev : a.rank);
      return false;
    }
    if (threadIdx.x == 0) {
      if (f & kRecv) store_release(in.tail, rtail + 1);
      if (f & kSend) {
        *reinterpret_cast<volatile uint64_t*>(&out.sizes[shead % uint64_t(a.K)]) = out_len;
        store_release(out.head, shead + 1);
      }
    }
    rtail += (f & kRecv) ? 1 : 0;
    shead += (f & kSend) ? 1 : 0;
    ++step;
    return true;
  }

  // A verb of n elements: ceil(n / L) slices.
  __device__ bool verb(int f, const T* src, T* dst, size_t n) {
    for (size_t s0 = 0; s0 < n; s0 += a.L) {
      const uint32_t m = uint32_t(n - s0 < a.L ? n - s0 : a.L);
      if (!slice(f, src ? src + s0 : nullptr, dst ? dst + s0 : nullptr, m)) return false;
    }
    return true;
  }

  // ring_all_reduce of algorithms/ring.cpp on this channel's count elements.
  __device__ void all_reduce(const T* src, T* dst, size_t count) {
    const int N = a.nranks, r = a.rank;
    auto mod = [](int x, int n) { return ((x % n) + n) % n; };
    const size_t loop = a.seg * size_t(N);
    for (size_t base = 0; base < count; base += loop) {
      const size_t rem = count - base < loop ? count - base : loop;
      const size_t c = (rem + size_t(N) - 1) / size_t(N);
      size_t n = 0;
      auto chunk = [&](int j) {
        const size_t o = size_t(j) * c < rem ? size_t(j) * c : rem;
        n = c < rem - o ? c : rem - o;
        return base + o;
      };
      size_t o = chunk(mod(r - 1, N));
      if (!verb(kSend, src + o, nullptr, n)) return;
      for (int j = 2; j < N; ++j) {
        o = chunk(mod(r - j, N));
        if (!verb(kRecv | kReduce | kSend, src + o, nullptr, n)) return;
      }
      o = chunk(r);
      if (!verb(kRecv | kReduce | kCopy | kSend, src + o, dst + o, n)) return;
      for (int j = 1; j < N - 1; ++j) {
        o = chunk(mod(r - j, N));
        if (!verb(kRecv | kCopy | kSend | kForward, nullptr, dst + o, n)) return;
      }
      o = chunk(mod(r + 1, N));
      if (!verb(kRecv | kCopy, nullptr, dst + o, n)) return;
    }
  }
};

template <class T, bool kCoded>
__global__ void __launch_bounds__(kThreads) ring_all_reduce_kernel(RingArgs a) {
  __shared__ typename RingCta<T, kCoded>::Smem sm;
  __shared__ int s_err;
  // Channel c: the c-th of gridDim.x contiguous parts.
  const size_t per = (a.count + gridDim.x - 1) / gridDim.x;
  const size_t c0 = size_t(blockIdx.x) * per < a.count ? size_t(blockIdx.x) * per : a.count;
  const size_t cn = a.count - c0 < per ? a.count - c0 : per;
  const T* src = static_cast<const T*>(a.src) + c0;
  T* dst = static_cast<T*>(a.dst) + c0;
  if (a.nranks == 1) {
    if (src != dst)
      for (size_t i = threadIdx.x; i < cn; i += kThreads) dst[i] = src[i];
    return;
  }
  RingCta<T, kCoded> cta(a, sm, &s_err);
  cta.all_reduce(src, dst, cn);
}

template <class T, bool kCoded>
cudaError_t launch(const RingArgs& a, int channels, cudaStream_t s) {
  ring_all_reduce_kernel<T, kCoded><<<channels, kThreads, 0, s>>>(a);
  return cudaGetLastError();
}

bool raw_type_ok(ElemType t) {
  return t == ElemType::F32 || t == ElemType::F64 || t == ElemType::I32 || t == ElemType::I64;
}

}  // namespace

RingAbort::RingAbort() {
  void* h = nullptr;
  status_ = int(cudaHostAlloc(&h, sizeof(int), cudaHostAllocMapped));
  if (status_ != 0) return;
  host_ = static_cast<int*>(h);
  *host_ = 0;
  void* d = nullptr;
  status_ = int(cudaHostGetDevicePointer(&d, h, 0));
  dev_ = static_cast<int*>(d);
}
RingAbort::~RingAbort() {
  if (host_) cudaFreeHost(host_);
}
void RingAbort::set() {
  if (host_) __atomic_store_n(host_, 1, __ATOMIC_SEQ_CST);
}
void RingAbort::clear() {
  if (host_) __atomic_store_n(host_, 0, __ATOMIC_SEQ_CST);
}
bool RingAbort::is_set() const { return host_ && __atomic_load_n(host_, __ATOMIC_SEQ_CST) != 0; }

PersistentRing::PersistentRing(const Options& o, RingAbort* abort, void* stream) : o_(o), abort_(abort) {
  const bool type_ok = o.coded ? (o.type == ElemType::I32 || o.type == ElemType::I64) : raw_type_ok(o.type);
  const bool pred_ok = !o.coded || o.predictor == Predictor::None || o.predictor == Predictor::Delta1 ||
                       o.predictor == Predictor::Delta2;
  if (!type_ok || !pred_ok) {
    status_ = host_error(Status::Unsupported);
    return;
  }
  const size_t es = codec::elem_size(o.type);
  if (o.nranks < 1 || o.rank < 0 || o.rank >= o.nranks || o.channels < 1 || o.channels > 1024 || o.slots < 2 ||
      o.slots > kMaxSlots || o.slot_bytes < codec::kHeaderBytes + es || abort == nullptr || abort->status() != 0) {
    status_ = host_error(Status::BadHeader);
    return;
  }
  // prims::slice_elems_for: the CPU ring's slicing (a Raw slice always fits a slot).
  slice_ = std::min<size_t>((o.slot_bytes - codec::kHeaderBytes) / es, 0xFFFFFFFFu);
  if (stream == nullptr) {
    cudaStream_t s = nullptr;
    status_ = int(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    if (status_) return;
    stream_ = s;
    own_stream_ = true;
  } else {
    stream_ = stream;
  }
  fifo_bytes_ = size_t(o.channels) * fifo_channel_bytes(o.slot_bytes, o.slots);
  if ((status_ = int(cudaMalloc(&fifo_, fifo_bytes_))) != 0) return;
  if ((status_ = int(cudaMalloc(&scratch_, size_t(o.channels) * slice_ * es))) != 0) return;
  void* h = nullptr;
  if ((status_ = int(cudaHostAlloc(&h, sizeof(RingReport) * size_t(o.channels), cudaHostAllocMapped))) != 0) return;
  rep_host_ = static_cast<RingReport*>(h);
  void* d = nullptr;
  if ((status_ = int(cudaHostGetDevicePointer(&d, h, 0))) != 0) return;
  rep_dev_ = static_cast<RingReport*>(d);
  status_ = reset();
}

PersistentRing::~PersistentRing() {
  const cudaStream_t s = static_cast<cudaStream_t>(stream_);
  if (s || own_stream_) cudaStreamSynchronize(s);
  if (fifo_) cudaFree(fifo_);
  if (scratch_) cudaFree(scratch_);
  if (rep_host_) cudaFreeHost(rep_host_);
  if (own_stream_) cudaStreamDestroy(s);
}

int PersistentRing::reset() {
  const cudaStream_t s = static_cast<cudaStream_t>(stream_);
  cudaError_t e = cudaMemsetAsync(fifo_, 0, fifo_bytes_, s);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  return int(e);
}

int PersistentRing::all_reduce_async(const void* d_src, void* d_dst, size_t count) {
  if (status_) return status_;
  if (next_ == nullptr && o_.nranks > 1) return host_error(Status::BadHeader);
  const cudaStream_t s = static_cast<cudaStream_t>(stream_);
  // The reports cleared in stream order (after any earlier call's kernel).
  if (const cudaError_t e = cudaMemsetAsync(rep_dev_, 0, sizeof(RingReport) * size_t(o_.channels), s); e != cudaSuccess)
    return int(e);
  RingArgs a;
  a.rank = o_.rank;
  a.nranks = o_.nranks;
  a.K = o_.slots;
  a.in_fifo = static_cast<uint8_t*>(fifo_);
  a.out_fifo = static_cast<uint8_t*>(next_);
  a.chan_bytes = fifo_channel_bytes(o_.slot_bytes, o_.slots);
  a.stride = slot_stride(o_.slot_bytes);
  a.slot_bytes = o_.slot_bytes;
  a.src = d_src;
  a.dst = d_dst;
  a.count = count;
  a.scratch = scratch_;
  a.L = uint32_t(slice_);
  a.seg = size_t(std::max(1, o_.slots / 2)) * slice_;  // ring_segment_elems
  a.pred = o_.predictor;
  a.abort = abort_->device_ptr();
  a.rep = rep_dev_;
  a.timeout_ns = o_.timeout_ns;
  switch (o_.type) {
    case ElemType::I32:
      return int(o_.coded ? launch<int32_t, true>(a, o_.channels, s) : launch<int32_t, false>(a, o_.channels, s));
    case ElemType::I64:
      return int(o_.coded ? launch<int64_t, true>(a, o_.channels, s) : launch<int64_t, false>(a, o_.channels, s));
    case ElemType::F32: return int(launch<float, false>(a, o_.channels, s));
    case ElemType::F64: return int(launch<double, false>(a, o_.channels, s));
    default: return host_error(Status::Unsupported);
  }
}

int PersistentRing::synchronize(RingReport* rep) {
  if (status_) return status_;
  const cudaError_t e = cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  if (e != cudaSuccess) return int(e);
  // The first channel that failed on its own, else the first one aborted.
  int pick = -1;
  for (int c = 0; c < o_.channels; ++c) {
    const int err = rep_host_[c].error;
    if (err != 0 && (pick < 0 || (rep_host_[pick].error == int(RingError::Aborted) && err != int(RingError::Aborted))))
      pick = c;
  }
  if (rep) *rep = pick >= 0 ? rep_host_[pick] : RingReport{};
  return pick >= 0 ? 1000 + rep_host_[pick].error : 0;
}

}  // namespace ncclz::cuda
