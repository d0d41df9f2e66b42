// Persistent ring all_reduce (ncclz/cuda_persistent.hpp): one kernel per call
// and rank, G CTAs per channel (Options::ctas_per_channel), running the CPU
// ring's schedule (algorithms/ring.cpp, ring_all_reduce) on the device.
//
// Steps and CTAs: a channel's schedule is a sequence of ring steps, one slice
// each (the verbs of ring_all_reduce, each of ceil(n / L) slices: SEND,
// RECV|REDUCE|SEND, RECV|REDUCE|COPY|SEND, RECV|COPY|SEND|FORWARD, RECV|COPY).
// Every CTA of the channel walks the whole sequence, counting the slices it
// receives and sends (their positions in the FIFO streams, FifoLayout), and
// runs the steps s with s % G == g, its member number g; the others' steps it
// only counts. So up to G slices of a channel are in flight, each CTA's
// steps in order; no CTA waits on another of its own rank except through the
// FIFOs. The waits of this schedule form no cycle for any G: a CTA's order is
// a subsequence of the single-CTA order, the FIFO waits are the same. A call
// starts its streams where the previous call ended: the channel's state
// words (recv, send, CTAs done) hold the positions, the last CTA of the
// channel to finish writes the new ones.
//
// A step (Coded mode): wait until the incoming slot is posted (RECV) and the
// outgoing one released (SEND); decode (cta_decode_slice; REDUCE: combined
// with the local codes by the call's op, a wrapping sum or the larger or
// smaller code, to the output or the CTA's scratch), encode the result or the
// local slice (cta_encode_slice, the CPU's bytes) into the outgoing slot, or
// (FORWARD, the allgather phase) copy the received bytes unchanged and decode
// them once into the output. The encode's codec and predictor: the Shape's
// predictor with Block (the Raw fallback where Block is larger), or with
// Shape::select the CPU selector's choice for that slice (cta_select_slice,
// codec::fast_select_options: Block with None / Delta1 / Delta2, or Raw),
// which costs one extra read of the sampled blocks (every 8th block of 32
// codes, at most 128 blocks, per candidate predictor: 3 x 1/8 of a slice of
// up to 32 K codes, less above) before the encoder's two passes. After a
// REDUCE the selector keeps the incoming slice's predictor, as the CPU ring
// does (the same field over more ranks), and only chooses between Block
// with it and Raw: one predictor sampled. Raw mode moves and reduces (the
// op: reduce_op.cuh, the host's bits) the values themselves, 16-byte vectors
// where the slot, the input and the output are all 16-byte aligned (else 8,
// else one element), several loads in flight per thread.
//
// Handshake: thread 0 polls the slot's flags (volatile loads; no pause for
// the first kBusyPolls polls, the abort word and the deadline every 64th
// poll: the abort word is host memory, each read a PCIe round trip), then a
// device-scope fence (acquire), and a __syncthreads lets the CTA read. After
// the step's barrier thread 0 stores the outgoing slot's size, fences
// (release: the CTA's slot writes, ordered before it by the barrier) and
// stores released[] and posted[]. Device scope, because the FIFOs are device
// memory of this GPU and only its kernels touch them; the first version's
// system-scope fences and per-poll sleep remain for A/B timing
// (Options::first_version_slices).
//
// Host FIFOs (Options::fifo_in_host_memory): the same handshake, the flags
// and slots in page-locked host memory, the other side of each FIFO a CPU
// thread (the proxy, transport/persistent_proxy.cpp), and both fences
// system-scope. Device scope is not enough there: the memory model orders a
// fence only for the threads inside its scope, and the proxy thread is
// outside the GPU's. A device-scope release does not wait for the CTA's
// writes to host memory (posted over PCIe or NVLink-C2C) to be performed
// at the host, so the proxy could see posted[] before the slot's bytes or
// size; a device-scope acquire after reading the proxy's posted[] does not
// order the slot reads after it for a writer outside the GPU. A .sys fence
// (__threadfence_system) makes the volatile flag access (relaxed, system
// scope) and the fence a release or acquire pattern that the host thread's
// own release store or acquire load synchronizes with.
//
// Device FIFOs between processes or devices (Options::system_fences; the
// call path sets it wherever a ring neighbour is another process or on
// another device, core/persistent_ring_work.cpp): the next rank's FIFO is
// device memory opened over CUDA IPC, or on a peer GPU, and written by this
// kernel over NVLink or PCIe; this rank's is written by the previous rank's
// kernel in the same way. Two kernels of different processes on ONE GPU are
// both inside its .gpu scope (the scope is the device's threads, whatever
// their context), so device scope would do there; on two GPUs the peer's
// kernel is not, and the stores into its memory cross the link, so only a
// .sys fence orders the slot's bytes before the flag for the reader. The
// call path cannot tell one GPU from two across processes without comparing
// device UUIDs, so it takes system scope for every rank that is a process
// (conservative; not yet measured against .gpu on a GPU). The abort word is
// host memory either way: a flag read on its own (no data behind it), so its
// volatile polls need no fence.
//
// Every wait checks the group's abort word
// and the timeout (no progress for timeout_ns by %globaltimer) and reports
// (RingReport, one per CTA) instead of hanging; a failing CTA sets the abort
// word so that its peers stop too.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>

#include "cta_select.cuh"
#include "cta_slice.cuh"
#include "device_sync.cuh"
#include "ncclz/cuda_persistent.hpp"
#include "reduce_op.cuh"

namespace ncclz::cuda {
namespace {

using namespace detail;
using codec::Codec;
using codec::ElemType;
using codec::Predictor;
using codec::Status;

constexpr int kMaxCtasPerChannel = 32;
constexpr int kStateWords = 4;        // per channel: recv position, send position, CTAs done, bytes sent
constexpr uint32_t kCheckEvery = 64;  // polls between two looks at the abort word and the clock

enum : int { kRecv = 1, kReduce = 2, kCopy = 4, kSend = 8, kForward = 16 };

struct RingArgs {
  int rank, nranks, K, G;
  bool v1;            // Options::first_version_slices
  bool sys;           // the FIFOs are host memory (a proxy on the other side): system-scope fences
  uint8_t* in_fifo;   // this rank's FIFOs
  uint8_t* out_fifo;  // the next rank's, or this rank's outbox (host FIFOs)
  size_t chan_bytes, stride, slot_bytes;
  const void* src;
  void* dst;
  size_t count;
  void* scratch;  // L elements per CTA
  uint32_t L;     // elements per slice
  size_t seg;     // elements per chunk: K / 2 slices
  Predictor pred;
  bool select;                   // Shape::select (Coded): each slice's coder chosen by cta_select_slice
  codec::EncodeOptions sel_opt;  // its options: codec::fast_select_options()
  ReduceOp op;                   // Sum, Max or Min
  int* abort;
  RingReport* rep;  // per CTA
  uint64_t* state;  // kStateWords per channel
  uint64_t timeout_ns;
};

struct Fifo {
  uint64_t* posted;
  uint64_t* released;
  uint64_t* sizes;
  uint8_t* slots;
  __device__ explicit Fifo(uint8_t* base)
      : posted(reinterpret_cast<uint64_t*>(base + FifoLayout::kPostedAt)),
        released(reinterpret_cast<uint64_t*>(base + FifoLayout::kReleasedAt)),
        sizes(reinterpret_cast<uint64_t*>(base + FifoLayout::kSizesAt)),
        slots(base + FifoLayout::kSlotsAt) {}
};

/// The CTA's data movement of one Raw step over n elements (f's flags): the
/// value is the received one (RECV; combined with the local one by Op with
/// REDUCE, received op local) or the local one, written to the outgoing slot
/// (SEND) and to the output (COPY).
/// V: the vector each access moves (E = sizeof(V) / sizeof(T) elements; every
/// pointer used must be aligned to it), U of them per thread loaded before
/// any is stored, so that U loads of each stream are in flight at once.
template <class T, class V, int U, ReduceOp Op = ReduceOp::Sum>
__device__ __forceinline__ void move_vectors(int f, const T* rin, const T* src, T* rout, T* dst, size_t n) {
  constexpr int E = int(sizeof(V) / sizeof(T));
  union Pack {
    V v;
    T e[E];
  };
  const bool recv = f & kRecv, local = !(f & kRecv) || (f & kReduce);
  const size_t nv = n / E;
  // This thread's vectors: i = base + u * kThreads + threadIdx.x (constant offsets from one pointer per stream).
  const V* vin = reinterpret_cast<const V*>(rin) + threadIdx.x;
  const V* vsrc = reinterpret_cast<const V*>(src) + threadIdx.x;
  V* vout = reinterpret_cast<V*>(rout) + threadIdx.x;
  V* vdst = reinterpret_cast<V*>(dst) + threadIdx.x;
  constexpr size_t kStep = size_t(U) * kThreads;
  for (size_t base = 0; base < nv; base += kStep, vin += kStep, vsrc += kStep, vout += kStep, vdst += kStep) {
    const size_t left = nv - base;
    Pack x[U] = {}, y[U] = {};
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (size_t(u) * kThreads + threadIdx.x < left) {
        if (recv) x[u].v = vin[u * kThreads];
        if (local) y[u].v = vsrc[u * kThreads];
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (size_t(u) * kThreads + threadIdx.x >= left) break;
      Pack o;
#pragma unroll
      for (int k = 0; k < E; ++k)
        o.e[k] = recv ? ((f & kReduce) ? combine<T, Op>(x[u].e[k], y[u].e[k]) : x[u].e[k]) : y[u].e[k];
      if (f & kSend) vout[u * kThreads] = o.v;
      if (f & kCopy) vdst[u * kThreads] = o.v;
    }
  }
  for (size_t i = nv * E + threadIdx.x; i < n; i += kThreads) {  // the tail: fewer than E elements
    const T v = recv ? ((f & kReduce) ? combine<T, Op>(rin[i], src[i]) : rin[i]) : src[i];
    if (f & kSend) rout[i] = v;
    if (f & kCopy) dst[i] = v;
  }
}

/// move_vectors with the widest vector every pointer used is aligned to:
/// 16 bytes (64 bytes of each stream per thread in flight), else 8 or one
/// element (32 bytes); v1: the first version's loop (one element per thread
/// at a time).
template <class T, ReduceOp Op>
__device__ __forceinline__ void move_aligned(int f, const T* rin, const T* src, T* rout, T* dst, size_t n, bool v1) {
  if (v1) return move_vectors<T, T, 1, Op>(f, rin, src, rout, dst, n);
  uintptr_t any = 0;
  if (f & kRecv) any |= reinterpret_cast<uintptr_t>(rin);
  if (!(f & kRecv) || (f & kReduce)) any |= reinterpret_cast<uintptr_t>(src);
  if (f & kSend) any |= reinterpret_cast<uintptr_t>(rout);
  if (f & kCopy) any |= reinterpret_cast<uintptr_t>(dst);
  if ((any & 15) == 0) return move_vectors<T, uint4, 4, Op>(f, rin, src, rout, dst, n);
  if constexpr (sizeof(T) < 8) {
    if ((any & 7) == 0) return move_vectors<T, uint2, 4, Op>(f, rin, src, rout, dst, n);
  }
  return move_vectors<T, T, int(32 / sizeof(T)), Op>(f, rin, src, rout, dst, n);
}

/// move_aligned with the reduction `op` (Sum, Max, Min; used with REDUCE
/// only). Not inlined: the loops get their registers without the caller's
/// state (the step's pointers and counters) live around them.
template <class T>
__device__ __noinline__ void move_values(int f, const T* rin, const T* src, T* rout, T* dst, size_t n, bool v1,
                                         ReduceOp op = ReduceOp::Sum) {
  if (!(f & kReduce) || op == ReduceOp::Sum) return move_aligned<T, ReduceOp::Sum>(f, rin, src, rout, dst, n, v1);
  if (op == ReduceOp::Max) return move_aligned<T, ReduceOp::Max>(f, rin, src, rout, dst, n, v1);
  return move_aligned<T, ReduceOp::Min>(f, rin, src, rout, dst, n, v1);
}

/// The CTA copies len bytes between 16-byte-aligned addresses (slots): four
/// 16-byte vectors per thread in flight; v1: one (the first version's copy).
__device__ __forceinline__ void cta_copy(uint8_t* d, const uint8_t* s, size_t len, bool v1) {
  const size_t words = len / 16 * 4;
  const auto* s32 = reinterpret_cast<const uint32_t*>(s);
  auto* d32 = reinterpret_cast<uint32_t*>(d);
  if (v1)
    move_vectors<uint32_t, uint4, 1>(kRecv | kSend, s32, nullptr, d32, nullptr, words);
  else
    move_vectors<uint32_t, uint4, 4>(kRecv | kSend, s32, nullptr, d32, nullptr, words);
  for (size_t i = words * 4 + threadIdx.x; i < len; i += kThreads) d[i] = s[i];
}

// One CTA of a channel. T: the wire element (codes in Coded mode).
template <class T, bool kCoded>
struct RingCta {
  using Code = std::conditional_t<kCoded, T, int32_t>;
  union CodedSmem {
    CtaEncSmem<Code> enc;
    CtaDecSmem<Code> dec;
    CtaSelSmem sel;
  };
  struct RawSmem {};  // Raw mode needs no shared memory but the error word
  using Smem = std::conditional_t<kCoded, CodedSmem, RawSmem>;
  const RingArgs& a;
  Smem& sm;
  int* s_err;  // shared
  int member;  // g: this CTA runs the channel's steps g, g + G, ...
  Fifo in, out;
  uint64_t* state;
  uint64_t rtail, shead;  // the channel's stream positions (slices received, sent), every thread's copy
  uint32_t step = 0;
  T* scratch;
  int prev, next;

  __device__ RingCta(const RingArgs& args, Smem& s, int* err, int chan, int g)
      : a(args),
        sm(s),
        s_err(err),
        member(g),
        in(args.in_fifo + size_t(chan) * args.chan_bytes),
        out(args.out_fifo + size_t(chan) * args.chan_bytes),
        state(args.state + size_t(chan) * kStateWords) {
    rtail = state[0];  // written by the previous call's kernel on this stream
    shead = state[1];
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

  // Until the incoming slot holds slice rtail (recv) and the outgoing one is
  // free for slice shead (send): thread 0 polls, the CTA waits at a barrier.
  __device__ bool wait(bool recv, bool send) {
    if (threadIdx.x == 0) {
      const uint64_t K = uint64_t(a.K);
      const uint64_t* posted = in.posted + rtail % K;
      const uint64_t* released = out.released + shead % K;
      RingError e = RingError::None;
      int peer = -1;
      const uint64_t t0 = global_ns();
      for (uint32_t polls = 0;; ++polls) {
        const bool got = !recv || load_volatile(posted) >= rtail + 1;
        const bool room = !send || load_volatile(released) + K >= shead + 1;
        if (got && room) break;
        if (a.v1 || polls % kCheckEvery == kCheckEvery - 1) {
          peer = got ? next : prev;
          if (load_volatile(a.abort)) {
            e = RingError::Aborted;
            break;
          }
          if (global_ns() - t0 > a.timeout_ns) {
            e = RingError::TimedOut;
            break;
          }
        }
        if (a.v1)
          spin_pause();
        else
          poll_pause(polls);
      }
      flag_fence(a.v1 || a.sys);  // acquire: the slot's bytes (or its release) before what follows
      *s_err = int(e);
      if (e != RingError::None) fail(e, 0, peer);
    }
    __syncthreads();
    const bool ok = *s_err == 0;
    // *s_err is rewritten by the next wait: after the step's closing barrier
    // (one wait per step), or after this one (the first version's two).
    if (a.v1) __syncthreads();
    return ok;
  }

  // One step: a slice of m elements, src the local input's, dst the output's.
  __device__ bool slice(int f, const T* src, T* dst, uint32_t m) {
    const bool recv = f & kRecv, send = f & kSend;
    if (step % uint32_t(a.G) != uint32_t(member)) {  // another CTA's step: only counted
      rtail += recv ? 1 : 0;
      shead += send ? 1 : 0;
      ++step;
      return true;
    }
    if (a.v1) {
      if ((recv && !wait(true, false)) || (send && !wait(false, true))) return false;
    } else if (!wait(recv, send)) {
      return false;
    }
    const uint64_t K = uint64_t(a.K);
    const uint8_t* in_slot = recv ? in.slots + (rtail % K) * a.stride : nullptr;
    uint64_t in_len = 0;
    if (recv) {
      in_len = load_volatile(&in.sizes[rtail % K]);
      if (in_len > a.slot_bytes) in_len = a.slot_bytes;
    }
    uint8_t* out_slot = send ? out.slots + (shead % K) * a.stride : nullptr;
    uint64_t out_len = 0;
    Status st = Status::Ok;
    if constexpr (kCoded) {
      // hint: after a reduction, the incoming slice's predictor (-1: none).
      auto encode = [&](const T* codes, int hint) {
        const CodesIn<T> in_codes{codes};
        Codec want = Codec::Block;
        Predictor pe = codec::slice_predictor(a.pred, 0, 0, m);
        if (a.select) {  // uniform
          codec::EncodeOptions opt = a.sel_opt;
          if (hint >= 0) opt.predictor = hint;
          const codec::SelectChoice c = cta_select_slice<CodesIn<T>, true>(in_codes, 0, m, opt, sm.sel);
          want = c.codec;
          pe = c.predictor;
        }
        const EncodeParams ep{pe, 0, 0};
        const CtaEncoded e = cta_encode_slice(in_codes, 0, m, want, pe, ep, out_slot, a.slot_bytes, sm.enc);
        out_len = e.bytes;
        return e.status;
      };
      if (f & kForward) {
        cta_copy(out_slot, in_slot, in_len, a.v1);
        out_len = in_len;
        st = cta_decode_slice(in_slot, in_len, m, true, 0, CodesOut<T>{dst}, sm.dec, nullptr);
      } else if (recv && (f & kReduce)) {
        T* sum = (f & kCopy) ? dst : scratch;
        st = decode_reduce(in_slot, in_len, m, sum, src);
        __syncthreads();  // the sum in memory, the shared memory free for the encoder
        if (st == Status::Ok && send) st = encode(sum, predictor_hint(in_slot, in_len));
      } else if (recv) {
        st = cta_decode_slice(in_slot, in_len, m, true, 0, CodesOut<T>{dst}, sm.dec, nullptr);
      } else {
        st = encode(src, -1);
        if (f & kCopy) move_values<T>(kCopy, nullptr, src, nullptr, dst, m, a.v1);
      }
    } else {
      out_len = uint64_t(m) * sizeof(T);
      if (recv && in_len != out_len)
        st = Status::Corrupt;  // uniform: every thread read the same size
      else                     // FORWARD too: the received values, sent on unchanged
        move_values<T>(f, reinterpret_cast<const T*>(in_slot), src, reinterpret_cast<T*>(out_slot), dst, m, a.v1, a.op);
    }
    __syncthreads();         // the slots read and written by every thread
    if (st != Status::Ok) {  // uniform
      if (threadIdx.x == 0) fail(RingError::Codec, int(st), recv ? prev : a.rank);
      return false;
    }
    if (threadIdx.x == 0) {
      if (send) store_volatile(&out.sizes[shead % K], out_len);
      flag_fence(a.v1 || a.sys);  // release: the CTA's reads and writes of both slots, and the size
      if (recv) store_volatile(&in.released[rtail % K], rtail + 1);
      if (send) store_volatile(&out.posted[shead % K], shead + 1);
      // The channel's bytes sent (PersistentRing::sent_bytes): no reader while the kernel runs.
      if (send) atomicAdd(reinterpret_cast<unsigned long long*>(&state[3]), static_cast<unsigned long long>(out_len));
    }
    rtail += recv ? 1 : 0;
    shead += send ? 1 : 0;
    ++step;
    return true;
  }

  // With the selector, the predictor a reduction's result is coded with: the
  // incoming slice's (the same field over more ranks), unless it is Raw (-1:
  // the selector samples every predictor); the CPU ring's rule
  // (prims/slice_codec.cpp, SliceCodec::reduce and encode). Every thread
  // reads the (already checked) header.
  __device__ int predictor_hint(const uint8_t* slot, uint64_t len) const {
    if (!a.select) return -1;
    codec::SliceHeader h;
    if (codec::read_header(slot, size_t(len), &h) != Status::Ok || h.codec == Codec::Raw) return -1;
    return int(h.predictor);
  }

  // The incoming slice decoded and combined with the local codes (the op:
  // wrapping sum, or integer max / min) into sum.
  __device__ Status decode_reduce(const uint8_t* slot, uint64_t len, uint32_t m, T* sum, const T* src) {
    if constexpr (kCoded) {
      if (a.op == ReduceOp::Max)  // uniform
        return cta_decode_slice(slot, len, m, true, 0, ReduceOut<T, CodeOp::Max>{sum, src}, sm.dec, nullptr);
      if (a.op == ReduceOp::Min)
        return cta_decode_slice(slot, len, m, true, 0, ReduceOut<T, CodeOp::Min>{sum, src}, sm.dec, nullptr);
      return cta_decode_slice(slot, len, m, true, 0, AddOut<T>{sum, src}, sm.dec, nullptr);
    } else {
      return Status::Unsupported;
    }
  }

  // A verb of n elements: ceil(n / L) steps.
  __device__ bool verb(int f, const T* src, T* dst, size_t n) {
    for (size_t s0 = 0; s0 < n; s0 += a.L) {
      const uint32_t m = uint32_t(n - s0 < a.L ? n - s0 : a.L);
      if (!slice(f, src ? src + s0 : nullptr, dst ? dst + s0 : nullptr, m)) return false;
    }
    return true;
  }

  // ring_all_reduce of algorithms/ring.cpp on this channel's count elements.
  __device__ bool all_reduce(const T* src, T* dst, size_t count) {
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
      if (!verb(kSend, src + o, nullptr, n)) return false;
      for (int j = 2; j < N; ++j) {
        o = chunk(mod(r - j, N));
        if (!verb(kRecv | kReduce | kSend, src + o, nullptr, n)) return false;
      }
      o = chunk(r);
      if (!verb(kRecv | kReduce | kCopy | kSend, src + o, dst + o, n)) return false;
      for (int j = 1; j < N - 1; ++j) {
        o = chunk(mod(r - j, N));
        if (!verb(kRecv | kCopy | kSend | kForward, nullptr, dst + o, n)) return false;
      }
      o = chunk(mod(r + 1, N));
      if (!verb(kRecv | kCopy, nullptr, dst + o, n)) return false;
    }
    return true;
  }

  // After a successful call: the last of the channel's CTAs to get here
  // stores the stream positions the next call starts from (every CTA counted
  // every step, so all hold the same; all have read the old ones by then).
  __device__ void finish() {
    if (threadIdx.x != 0) return;
    __threadfence();
    auto* done = reinterpret_cast<unsigned long long*>(&state[2]);
    if (atomicAdd(done, 1ull) + 1 == static_cast<unsigned long long>(a.G)) {
      state[0] = rtail;
      state[1] = shead;
      state[2] = 0;
    }
  }
};

// At most 128 registers a thread (2 CTAs an SM; the coder spills a little
// at that bound, Raw's vector loops need about 120, and spill heavily at 64):
// all CTAs of all ranks must be resident at once, so the CTAs an SM holds
// bound the shapes that can run (PersistentRing checks).
template <class T, bool kCoded>
__global__ void __launch_bounds__(kThreads, 2) ring_all_reduce_kernel(RingArgs a) {
  __shared__ typename RingCta<T, kCoded>::Smem sm;
  __shared__ int s_err;
  // Channel c of C: elements [count * c / C, count * (c + 1) / C), the
  // communicator's split (core::RingChannels::run_schedule); CTA g of its G.
  const int chan = int(blockIdx.x) / a.G, g = int(blockIdx.x) % a.G, channels = int(gridDim.x) / a.G;
  const size_t c0 = a.count * size_t(chan) / size_t(channels);
  const size_t cn = a.count * size_t(chan + 1) / size_t(channels) - c0;
  const T* src = static_cast<const T*>(a.src) + c0;
  T* dst = static_cast<T*>(a.dst) + c0;
  if (a.nranks == 1) {  // the G CTAs copy a G-th of the part each
    const size_t q = (cn + size_t(a.G) - 1) / size_t(a.G), b = q * size_t(g) < cn ? q * size_t(g) : cn;
    if (src != dst) move_values<T>(kCopy, nullptr, src + b, nullptr, dst + b, q < cn - b ? q : cn - b, a.v1);
    return;
  }
  RingCta<T, kCoded> cta(a, sm, &s_err, chan, g);
  if (cta.all_reduce(src, dst, cn)) cta.finish();
}

template <class T, bool kCoded>
const void* kernel_of() {
  return reinterpret_cast<const void*>(&ring_all_reduce_kernel<T, kCoded>);
}
const void* kernel_for(ElemType t, bool coded) {
  switch (t) {
    case ElemType::I32: return coded ? kernel_of<int32_t, true>() : kernel_of<int32_t, false>();
    case ElemType::I64: return coded ? kernel_of<int64_t, true>() : kernel_of<int64_t, false>();
    case ElemType::F32: return kernel_of<float, false>();
    case ElemType::F64: return kernel_of<double, false>();
    default: return nullptr;
  }
}

template <class T, bool kCoded>
cudaError_t launch(const RingArgs& a, int ctas, cudaStream_t s) {
#if defined(NCCLZ_CUDA_EMULATED)
  emu::CoResidentLaunch co;  // the emulator runs the grid's CTAs at once: they wait on each other
#endif
  ring_all_reduce_kernel<T, kCoded><<<ctas, kThreads, 0, s>>>(a);
  return cudaGetLastError();
}

bool raw_type_ok(ElemType t) {
  return t == ElemType::F32 || t == ElemType::F64 || t == ElemType::I32 || t == ElemType::I64;
}

bool shape_ok(ElemType t, bool coded, Predictor p, ReduceOp op) {
  const bool type_ok = coded ? (t == ElemType::I32 || t == ElemType::I64) : raw_type_ok(t);
  const bool pred_ok = !coded || p == Predictor::None || p == Predictor::Delta1 || p == Predictor::Delta2;
  const bool op_ok = op == ReduceOp::Sum || op == ReduceOp::Max || op == ReduceOp::Min;
  return type_ok && pred_ok && op_ok;
}

/// Options::device on the calling thread (nothing for -1).
cudaError_t use_device(int device) { return device >= 0 ? cudaSetDevice(device) : cudaSuccess; }

/// CTAs of the kernel for (t, coded) the device holds at once.
cudaError_t resident_ctas(ElemType t, bool coded, int* out) {
  int dev = 0, sms = 0, per_sm = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel_for(t, coded), kThreads, 0);
  *out = per_sm * sms;
  return e;
}

/// prims::slice_elems_for: the CPU ring's slicing (a Raw slice always fits a slot).
size_t slice_for(size_t slot_bytes, size_t es) {
  if (slot_bytes <= codec::kHeaderBytes + es) return 1;
  return std::min<size_t>((slot_bytes - codec::kHeaderBytes) / es, 0xFFFFFFFFu);
}

}  // namespace

RingAbort::RingAbort(int device) {
  if ((status_ = int(use_device(device))) != 0) return;
  void* h = nullptr;
  // Portable: ranks as threads on other devices share this word (their
  // kernels read it through its one UVA address).
  status_ = int(cudaHostAlloc(&h, sizeof(int), cudaHostAllocPortable | cudaHostAllocMapped));
  if (status_ != 0) return;
  host_ = static_cast<int*>(h);
  *host_ = 0;
  void* d = nullptr;
  status_ = int(cudaHostGetDevicePointer(&d, h, 0));
  dev_ = static_cast<int*>(d);
}
RingAbort::RingAbort(void* map, size_t bytes, int device) : registered_(true) {
  if ((status_ = int(use_device(device))) != 0) return;
  if (map == nullptr || bytes < sizeof(int)) {
    status_ = int(cudaErrorInvalidValue);
    return;
  }
  // Portable: every device of this process may run a kernel that reads it.
  status_ = int(cudaHostRegister(map, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped));
  if (status_ != 0) {
    (void)cudaGetLastError();
    registered_ = false;
    return;
  }
  host_ = static_cast<int*>(map);
  void* d = nullptr;
  status_ = int(cudaHostGetDevicePointer(&d, map, 0));
  dev_ = static_cast<int*>(d);
}
RingAbort::~RingAbort() {
  if (host_ && registered_) {
    cudaHostUnregister(host_);
  } else if (host_) {
    cudaFreeHost(host_);
  }
}
void RingAbort::set() {
  if (host_) __atomic_store_n(host_, 1, __ATOMIC_SEQ_CST);
}
void RingAbort::clear() {
  if (host_) __atomic_store_n(host_, 0, __ATOMIC_SEQ_CST);
}
bool RingAbort::is_set() const { return host_ && __atomic_load_n(host_, __ATOMIC_SEQ_CST) != 0; }

PersistentRing::PersistentRing(const Options& o, RingAbort* abort, void* stream) : o_(o), abort_(abort) {
  if (!shape_ok(o.type, o.coded, o.predictor, o.op)) {
    status_ = host_error(Status::Unsupported);
    return;
  }
  const size_t es = codec::elem_size(o.type);
  if (o.nranks < 1 || o.rank < 0 || o.rank >= o.nranks || o.channels < 1 || o.channels > 1024 ||
      o.ctas_per_channel < 1 || o.ctas_per_channel > kMaxCtasPerChannel || o.slots < 2 ||
      o.slots > FifoLayout::kMaxSlots || o.slot_bytes < codec::kHeaderBytes + es || abort == nullptr ||
      abort->status() != 0) {
    status_ = host_error(Status::BadHeader);
    return;
  }
  if ((status_ = int(use_device(o.device))) != 0) return;
  // Every CTA of every rank (all on this device) must be resident at once.
  if ((status_ = int(resident_ctas(o.type, o.coded, &max_resident_))) != 0) return;
  const int ctas = o.channels * o.ctas_per_channel;
  if (int64_t(o.nranks) * ctas > int64_t(max_resident_)) {
    status_ = kNotResident;
    return;
  }
  slice_ = slice_for(o.slot_bytes, es);
  if (stream == nullptr) {
    cudaStream_t s = nullptr;
    status_ = int(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    if (status_) return;
    stream_ = s;
    own_stream_ = true;
  } else {
    stream_ = stream;
  }
  fifo_bytes_ = size_t(o.channels) * FifoLayout::channel_bytes(o.slot_bytes, o.slots);
  if (o.fifo_in_host_memory) {  // the receive FIFO and the outbox, mapped for the device
    for (auto [host, dev] : {std::pair{&fifo_host_, &fifo_}, std::pair{&outbox_host_, &outbox_}}) {
      if ((status_ = int(cudaHostAlloc(host, fifo_bytes_, cudaHostAllocMapped))) != 0) return;
      if ((status_ = int(cudaHostGetDevicePointer(dev, *host, 0))) != 0) return;
    }
  } else if ((status_ = int(cudaMalloc(&fifo_, fifo_bytes_))) != 0) {
    return;
  }
  // A slice of any element type per CTA (Shape: L x its size <= slot_bytes - the header).
  if ((status_ = int(cudaMalloc(&scratch_, size_t(ctas) * FifoLayout::slot_stride(o.slot_bytes)))) != 0) return;
  void* st = nullptr;
  if ((status_ = int(cudaMalloc(&st, size_t(o.channels) * kStateWords * 8))) != 0) return;
  state_ = static_cast<uint64_t*>(st);
  void* h = nullptr;
  if ((status_ = int(cudaHostAlloc(&h, sizeof(RingReport) * size_t(ctas), cudaHostAllocMapped))) != 0) return;
  rep_host_ = static_cast<RingReport*>(h);
  void* d = nullptr;
  if ((status_ = int(cudaHostGetDevicePointer(&d, h, 0))) != 0) return;
  rep_dev_ = static_cast<RingReport*>(d);
  status_ = reset();
}

PersistentRing::~PersistentRing() {
  use_device(o_.device);
  const cudaStream_t s = static_cast<cudaStream_t>(stream_);
  if (s || own_stream_) cudaStreamSynchronize(s);
  if (fifo_host_) cudaFreeHost(fifo_host_);
  if (outbox_host_) cudaFreeHost(outbox_host_);
  if (fifo_ && !o_.fifo_in_host_memory) cudaFree(fifo_);
  if (scratch_) cudaFree(scratch_);
  if (state_) cudaFree(state_);
  if (rep_host_) cudaFreeHost(rep_host_);
  if (own_stream_) cudaStreamDestroy(s);
}

std::string PersistentRing::describe(int rc) {
  if (rc == 0) return "no error";
  if (rc == kNotResident) return "the ring's CTAs cannot all be resident on the device at once";
  if (rc < 0) return std::string("refused: ") + codec::status_string(Status(-rc));
  if (rc >= 1000 && rc < 1000 + 16) {
    switch (RingError(rc - 1000)) {
      case RingError::Aborted: return "the ring was aborted";
      case RingError::TimedOut: return "a wait of the ring timed out";
      case RingError::Codec: return "a slice did not decode";
      default: break;
    }
  }
  return std::string("CUDA error ") + std::to_string(rc) + ": " + cudaGetErrorString(cudaError_t(rc));
}

size_t PersistentRing::slice_elems_for(size_t esize) const { return slice_for(o_.slot_bytes, esize); }

int PersistentRing::reset() {
  const cudaStream_t s = static_cast<cudaStream_t>(stream_);
  cudaError_t e = use_device(o_.device);
  if (e == cudaSuccess && !o_.fifo_in_host_memory) e = cudaMemsetAsync(fifo_, 0, fifo_bytes_, s);
  if (e == cudaSuccess) e = cudaMemsetAsync(state_, 0, size_t(o_.channels) * kStateWords * 8, s);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  if (e == cudaSuccess && o_.fifo_in_host_memory) {  // no kernel runs (synchronized), the proxy is stopped
    std::memset(fifo_host_, 0, fifo_bytes_);
    std::memset(outbox_host_, 0, fifo_bytes_);
  }
  return int(e);
}

int PersistentRing::all_reduce_async(const void* d_src, void* d_dst, size_t count) {
  return all_reduce_async(d_src, d_dst, count, Shape{o_.type, o_.coded, o_.predictor, o_.channels, o_.select, o_.op});
}

int PersistentRing::all_reduce_async(const void* d_src, void* d_dst, size_t count, const Shape& sh) {
  if (status_) return status_;
  if (next_ == nullptr && o_.nranks > 1 && !o_.fifo_in_host_memory) return host_error(Status::BadHeader);
  if (!shape_ok(sh.type, sh.coded, sh.predictor, sh.op)) return host_error(Status::Unsupported);
  if (sh.channels < 1 || sh.channels > o_.channels) return host_error(Status::BadHeader);
  if (const cudaError_t e = use_device(o_.device); e != cudaSuccess) return int(e);
  const int ctas = sh.channels * o_.ctas_per_channel;
  if (sh.type != o_.type || sh.coded != o_.coded) {  // another kernel: its own occupancy
    int most = 0;
    if (const cudaError_t e = resident_ctas(sh.type, sh.coded, &most); e != cudaSuccess) return int(e);
    if (int64_t(o_.nranks) * ctas > int64_t(most)) return kNotResident;
  }
  const cudaStream_t s = static_cast<cudaStream_t>(stream_);
  last_ctas_ = ctas;
  // The reports cleared in stream order (after any earlier call's kernel).
  if (const cudaError_t e = cudaMemsetAsync(rep_dev_, 0, sizeof(RingReport) * size_t(ctas), s); e != cudaSuccess)
    return int(e);
  RingArgs a;
  a.rank = o_.rank;
  a.nranks = o_.nranks;
  a.K = o_.slots;
  a.G = o_.ctas_per_channel;
  a.v1 = o_.first_version_slices;
  a.sys = o_.fifo_in_host_memory || o_.system_fences;
  a.in_fifo = static_cast<uint8_t*>(fifo_);
  a.out_fifo = static_cast<uint8_t*>(o_.fifo_in_host_memory ? outbox_ : next_);
  a.chan_bytes = FifoLayout::channel_bytes(o_.slot_bytes, o_.slots);
  a.stride = FifoLayout::slot_stride(o_.slot_bytes);
  a.slot_bytes = o_.slot_bytes;
  a.src = d_src;
  a.dst = d_dst;
  a.count = count;
  a.scratch = scratch_;
  const size_t L = slice_for(o_.slot_bytes, codec::elem_size(sh.type));
  a.L = uint32_t(L);
  a.seg = size_t(std::max(1, o_.slots / 2)) * L;  // ring_segment_elems
  a.pred = sh.predictor;
  a.select = sh.coded && sh.select;
  a.sel_opt = codec::fast_select_options();
  a.op = sh.op;
  a.abort = abort_->device_ptr();
  a.rep = rep_dev_;
  a.state = state_;
  a.timeout_ns = o_.timeout_ns;
  switch (sh.type) {
    case ElemType::I32: return int(sh.coded ? launch<int32_t, true>(a, ctas, s) : launch<int32_t, false>(a, ctas, s));
    case ElemType::I64: return int(sh.coded ? launch<int64_t, true>(a, ctas, s) : launch<int64_t, false>(a, ctas, s));
    case ElemType::F32: return int(launch<float, false>(a, ctas, s));
    case ElemType::F64: return int(launch<double, false>(a, ctas, s));
    default: return host_error(Status::Unsupported);
  }
}

int PersistentRing::export_fifo(void* handle) const {
  if (status_) return status_;
  if (o_.fifo_in_host_memory) return host_error(Status::BadHeader);
  if (const cudaError_t e = use_device(o_.device); e != cudaSuccess) return int(e);
  static_assert(sizeof(cudaIpcMemHandle_t) == kIpcHandleBytes, "the IPC handle's size");
  cudaIpcMemHandle_t h;
  const cudaError_t e = cudaIpcGetMemHandle(&h, fifo_);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return int(e);
  }
  std::memcpy(handle, &h, sizeof h);
  return 0;
}

int PersistentRing::open_fifo(const void* handle, int device, void** fifo) {
  if (const cudaError_t e = use_device(device); e != cudaSuccess) return int(e);
  cudaIpcMemHandle_t h;
  std::memcpy(&h, handle, sizeof h);
  const cudaError_t e = cudaIpcOpenMemHandle(fifo, h, cudaIpcMemLazyEnablePeerAccess);
  if (e != cudaSuccess) (void)cudaGetLastError();
  return int(e);
}

int PersistentRing::close_fifo(void* fifo, int device) {
  if (const cudaError_t e = use_device(device); e != cudaSuccess) return int(e);
  return int(cudaIpcCloseMemHandle(fifo));
}

int PersistentRing::enable_peer_access(int device, int peer, bool* can) {
  *can = device == peer;
  if (device == peer) return 0;
  int ok = 0;
  cudaError_t e = cudaDeviceCanAccessPeer(&ok, device, peer);
  if (e != cudaSuccess || !ok) return int(e);
  if ((e = use_device(device)) != cudaSuccess) return int(e);
  e = cudaDeviceEnablePeerAccess(peer, 0);
  if (e == cudaErrorPeerAccessAlreadyEnabled) {  // another rank of this process on the same device did
    (void)cudaGetLastError();
    e = cudaSuccess;
  }
  *can = e == cudaSuccess;
  return int(e);
}

int PersistentRing::sent_bytes(int c, uint64_t* bytes) const {
  if (status_) return status_;
  if (c < 0 || c >= o_.channels) return host_error(Status::BadHeader);
  cudaError_t e = use_device(o_.device);
  if (e == cudaSuccess) {
    e = cudaMemcpyAsync(bytes, state_ + size_t(c) * kStateWords + 3, sizeof(uint64_t), cudaMemcpyDeviceToHost,
                        static_cast<cudaStream_t>(stream_));
  }
  if (e == cudaSuccess) e = cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  return int(e);
}

int PersistentRing::query() const {
  if (status_) return status_;
  if (const cudaError_t e = use_device(o_.device); e != cudaSuccess) return int(e);
  const cudaError_t e = cudaStreamQuery(static_cast<cudaStream_t>(stream_));
  return e == cudaErrorNotReady ? 1 : int(e);  // (not ready is no error: nothing recorded to clear)
}

int PersistentRing::synchronize(RingReport* rep) {
  if (status_) return status_;
  cudaError_t e = use_device(o_.device);
  if (e == cudaSuccess) e = cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  if (e != cudaSuccess) return int(e);
  // The first CTA of the last call that failed on its own, else the first one aborted.
  int pick = -1;
  for (int c = 0; c < last_ctas_; ++c) {
    const int err = rep_host_[c].error;
    if (err != 0 && (pick < 0 || (rep_host_[pick].error == int(RingError::Aborted) && err != int(RingError::Aborted))))
      pick = c;
  }
  if (rep) *rep = pick >= 0 ? rep_host_[pick] : RingReport{};
  return pick >= 0 ? 1000 + rep_host_[pick].error : 0;
}

}  // namespace ncclz::cuda
