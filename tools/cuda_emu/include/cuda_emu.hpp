// A tiny CPU emulator of the CUDA subset that cuda/*.cu uses, so that the
// device codec's kernels can EXECUTE on a machine without a GPU (tests of
// their logic only: no timing, no memory model, no real concurrency).
//
// How: tools/cuda_emu (rewrite.py, CMakeLists.txt) rewrites every
// `k<<<grid, block, shm, s>>>(args)` into
// `::emu::launch_checked([&] { return ::emu::pointer_devices(args); },
// [&] { k(args); }, grid, block, shm, s)` and compiles the
// .cu files as C++ with this directory first on the include path (fake
// <cuda_runtime.h> and <cub/...>). Each CUDA thread is a coroutine;
// the blocks of a grid run one after the other, the threads of a block
// round-robin: __syncthreads, __ballot_sync and __reduce_or_sync are
// barriers (over the threads still running) that switch coroutines, so
// warp-synchronous code and block scans behave as on a GPU. `__shared__`
// becomes `static thread_local` (one block at a time per host thread).
// Device memory is host memory.
//
// Host threads (ranks as threads, each with its own stream) run their device
// work CONCURRENTLY, as streams of one process do on a GPU: the scheduler's
// state (the coroutines, threadIdx, blockIdx, `__shared__` storage) is per
// host thread, and the one process-wide lock guards only what is truly
// shared (the arena's allocator and its open/closed state). So a kernel may
// wait for another host thread's kernel (a persistent collective kernel
// waiting on its peer's FIFO): __nanosleep (ncclz::cuda::detail::spin_pause,
// cuda/device_sync.cuh) yields the waiting coroutine, and a round of the
// block's threads in which one spun ends with the host thread yielding the
// CPU (sleeping briefly after many such rounds). Atomics are real atomics
// (__atomic builtins) and __threadfence / __threadfence_system real fences.
// A grid's blocks still run one after the other on their host thread: a
// kernel whose blocks wait for each other deadlocks here (decode_v3.cu's
// look-back relies on the order and aborts if it would wait), unless it is
// launched inside an emu::CoResidentLaunch scope: then each block runs on a
// host thread of its own, all at once (as the persistent ring's CTAs, which
// wait on each other, are resident at once on a GPU).
//
// Device memory is host memory, but host code must not touch it (on a GPU
// that is a crash or garbage): outside AddressSanitizer builds, cudaMalloc
// takes pages of one reserved arena that is PROT_NONE except while emulated
// device work runs, so a host access to device memory is a SIGSEGV, reported
// as such (NCCLZ_EMU_PROTECT=0 turns this off). Page-locked host memory
// (cudaMallocHost) is ordinary host memory. While one thread's device work
// runs, the arena is open to every thread: the check is strict for
// one-thread programs and partial for ranks as threads.
//
// Devices: one by default; NCCLZ_EMU_DEVICES=N (1-16) makes N, to check
// code for ranks on separate GPUs: each host thread has its current device
// (cudaSetDevice), device memory and streams belong to the device current at
// their creation (cudaPointerGetAttributes says which), and, as on CUDA, a
// kernel launched into a stream of another device than the current one
// fails (cudaErrorInvalidResourceHandle, not run), as does an event recorded
// on another device's stream. Every device is the same host memory, so a
// kernel is checked by its arguments: one whose arguments (pointers, or
// structs without padding passed by value holding them) point into another device's memory
// fails (cudaErrorIllegalAddress, not run; memory reached through device
// memory is not followed) unless its device enabled peer access to that
// one (cudaDeviceEnablePeerAccess), and so does a copy or memset:
// with several devices, one that touches device memory of another device
// than its stream's (the legacy stream: the current device's) fails with
// cudaErrorInvalidValue. CUDA would copy over the peer path there; ncclz
// never means to, so the emulator's rule is the stricter one.
//
// Streams: by default every launch, copy and memset runs before its call
// returns, so a stream is always idle and a missing synchronization cannot
// show. NCCLZ_EMU_LAZY=1 defers them instead: each stream keeps its work in a
// queue that runs, in order, only when the host must see it, i.e. at
// cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize, a
// synchronous cudaMemcpy / cudaMemset, cudaFree / cudaFreeHost /
// cudaHostUnregister (which CUDA makes wait for the device), a stream's
// destruction, a copy to or from pageable host memory (synchronous in CUDA),
// and every second cudaStreamQuery of a busy stream (the first answers
// cudaErrorNotReady). Work on the legacy stream (null) first runs the
// blocking streams' queued work and work on a blocking stream first runs the
// legacy stream's, as CUDA orders them. That is a schedule a GPU may take
// (the latest one), so host code that reads a result, reuses a buffer or
// orders two streams without synchronizing gets stale data here, where the
// eager default would have hidden it. Kernel arguments are evaluated at the
// launch (rewrite.py keeps copies); co-resident launches run at once.
//
// Device memory's contents: zeroed pages by default; NCCLZ_EMU_POISON=1 fills
// new allocations with 0xA5 bytes and freed ones with 0x5A (kept, not given
// back), as a GPU leaves cudaMalloc's memory uninitialized, so a read of bytes
// nothing wrote, or of a freed buffer, gives garbage here too.
//
// What it cannot show: races between blocks or within a warp outside the
// collectives, performance, the device-only branches of NCCLZ_HD code
// (__CUDA_ARCH__ is not defined, so the host branches run), nvcc quirks.
#pragma once

#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

// Code that must know it runs here (decode_v3.cu: a look-back that would wait
// is a bug in the emulator, where blocks run in order, so it aborts).
#define NCCLZ_CUDA_EMULATED 1

// ---- keywords -------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __shared__ static thread_local
#define __launch_bounds__(...)

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned x, y;
};

inline thread_local uint3 threadIdx, blockIdx;
inline thread_local dim3 blockDim, gridDim;

// ---- runtime API ----------------------------------------------------------
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700,
  cudaErrorPeerAccessAlreadyEnabled = 704,
  cudaErrorHostMemoryAlreadyRegistered = 712
};
enum cudaMemcpyKind {
  cudaMemcpyHostToHost,
  cudaMemcpyHostToDevice,
  cudaMemcpyDeviceToHost,
  cudaMemcpyDeviceToDevice,
  cudaMemcpyDefault
};
typedef struct CUstream_st* cudaStream_t;
namespace emu {
/// Emulated devices: NCCLZ_EMU_DEVICES (1-16), default 1.
inline int device_count() {
  static const int n = [] {
    const char* v = std::getenv("NCCLZ_EMU_DEVICES");
    const int x = v ? std::atoi(v) : 1;
    return x < 1 ? 1 : x > 16 ? 16 : x;
  }();
  return n;
}
/// The calling host thread's current device (cudaSetDevice).
inline int& current_device() {
  static thread_local int d = 0;
  return d;
}
}  // namespace emu
struct CUstream_st {
  int device = 0;                       ///< the device current when it was made
  bool blocking = true;                 ///< synchronizes with the legacy stream (not cudaStreamNonBlocking)
  bool legacy = false;                  ///< the device's legacy stream (a null cudaStream_t)
  unsigned queries = 0;                 ///< cudaStreamQuery calls while busy (NCCLZ_EMU_LAZY)
  std::recursive_mutex mu;              ///< guards q and runs it in order
  std::deque<std::function<void()>> q;  ///< deferred work (NCCLZ_EMU_LAZY)
};

inline const char* cudaGetErrorString(cudaError_t e) {
  return e == cudaSuccess ? "no error (emulated)" : "emulated error";
}
inline const char* cudaGetErrorName(cudaError_t e) {
  return e == cudaSuccess                      ? "cudaSuccess"
         : e == cudaErrorInvalidValue          ? "cudaErrorInvalidValue"
         : e == cudaErrorMemoryAllocation      ? "cudaErrorMemoryAllocation"
         : e == cudaErrorInvalidDevice         ? "cudaErrorInvalidDevice"
         : e == cudaErrorInvalidResourceHandle ? "cudaErrorInvalidResourceHandle"
         : e == cudaErrorIllegalAddress        ? "cudaErrorIllegalAddress"
                                               : "cudaErrorUnknown";
}
// The thread's last error, as CUDA keeps it: a failing runtime call sets it,
// cudaGetLastError returns and clears it (so code that checks a launch with
// cudaGetLastError sees an earlier call's error unless that was taken).
namespace emu {
inline cudaError_t& last_error() {
  static thread_local cudaError_t e = cudaSuccess;
  return e;
}
inline cudaError_t failed(cudaError_t e) {
  last_error() = e;
  return e;
}
}  // namespace emu
inline cudaError_t cudaGetLastError() {
  const cudaError_t e = emu::last_error();
  emu::last_error() = cudaSuccess;
  return e;
}
inline cudaError_t cudaPeekAtLastError() { return emu::last_error(); }

// ---- emulated device memory (see the file comment) -------------------------
namespace emu {

/// Guards the arena (allocation, and its open/closed state with the count of
/// host threads in device work); held briefly, never across a launch.
inline std::recursive_mutex& device_mutex() {
  static std::recursive_mutex m;
  return m;
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kArena = false;  // plain malloc: ASan reports accesses past an allocation instead
#else
constexpr bool kArena = true;
#endif

struct Arena {
  static constexpr size_t kReserve = size_t(64) << 30;  // address space only (MAP_NORESERVE)
  uint8_t* base = nullptr;
  size_t top = 0;                      // bytes in use from base (high-water mark)
  std::map<size_t, size_t> free_list;  // offset -> bytes, merged with neighbours
  std::map<uintptr_t, size_t> live;    // allocation -> bytes
  std::map<uintptr_t, int> owner;      // allocation -> the device it was made on
  bool protect = true;
  int depth = 0;  // DeviceAccess scopes open, over every host thread
};
inline Arena& arena() {
  static Arena* a = [] {
    Arena* x = new Arena;
    if (const char* v = std::getenv("NCCLZ_EMU_PROTECT")) x->protect = std::strcmp(v, "0") != 0;
    return x;
  }();
  return *a;
}
inline size_t page_bytes() {
  static const size_t p = size_t(sysconf(_SC_PAGESIZE));
  return p;
}

inline struct sigaction& previous_segv() {
  static struct sigaction a;
  return a;
}
inline void segv_report(int sig, siginfo_t* info, void* ctx) {
  const Arena& m = arena();
  const uint8_t* a = static_cast<const uint8_t*>(info->si_addr);
  if (m.base != nullptr && a >= m.base && a < m.base + Arena::kReserve) {
    char msg[220];
    const int len = std::snprintf(msg, sizeof msg,
                                  "\ncuda_emu: host code touched emulated DEVICE memory at %p (arena offset %zu): on a "
                                  "GPU this is a host access to a device pointer\n",
                                  info->si_addr, size_t(a - m.base));
    if (len > 0) (void)!write(2, msg, size_t(len));
  }
  struct sigaction& prev = previous_segv();
  if ((prev.sa_flags & SA_SIGINFO) && prev.sa_sigaction) {
    prev.sa_sigaction(sig, info, ctx);
    return;
  }
  if (!(prev.sa_flags & SA_SIGINFO) && prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
    prev.sa_handler(sig);
    return;
  }
  signal(SIGSEGV, SIG_DFL);  // returning re-runs the access: it faults again, with the default action
}

inline void set_arena_open(bool open) {
  Arena& m = arena();
  if (!kArena || !m.protect || m.base == nullptr || m.top == 0) return;
  mprotect(m.base, m.top, open ? PROT_READ | PROT_WRITE : PROT_NONE);
}

/// Emulated device work: device memory open for its scope (open while any
/// host thread is inside one). Host threads' device work runs concurrently.
class DeviceAccess {
 public:
  DeviceAccess() {
    std::lock_guard<std::recursive_mutex> lk(device_mutex());
    if (arena().depth++ == 0) set_arena_open(true);
  }
  ~DeviceAccess() {
    std::lock_guard<std::recursive_mutex> lk(device_mutex());
    if (--arena().depth == 0) set_arena_open(false);
  }
  DeviceAccess(const DeviceAccess&) = delete;
  DeviceAccess& operator=(const DeviceAccess&) = delete;
};

/// NCCLZ_EMU_POISON=1: new device memory holds 0xA5 bytes and freed memory
/// 0x5A (a GPU's cudaMalloc leaves memory uninitialized; zeroed pages here
/// would hide a read of bytes nothing wrote, or of a freed buffer).
inline bool poison() {
  static const bool on = [] {
    const char* v = std::getenv("NCCLZ_EMU_POISON");
    return v != nullptr && *v != 0 && std::strcmp(v, "0") != 0;
  }();
  return on;
}
inline void poison_fill(void* p, size_t n, int byte) {
  const bool closed = kArena && arena().protect && arena().depth == 0 && arena().base != nullptr;
  if (closed) mprotect(p, n, PROT_READ | PROT_WRITE);
  std::memset(p, byte, n);
  if (closed) mprotect(p, n, PROT_NONE);
}

inline void* device_alloc(size_t n) {
  std::lock_guard<std::recursive_mutex> lk(device_mutex());
  Arena& m = arena();
  if (n == 0) n = 1;
  if (!kArena) {
    void* p = std::malloc(n);
    if (p) {
      if (poison()) std::memset(p, 0xA5, n);
      m.live[reinterpret_cast<uintptr_t>(p)] = n;
      m.owner[reinterpret_cast<uintptr_t>(p)] = current_device();
    }
    return p;
  }
  if (m.base == nullptr) {
    void* b = mmap(nullptr, Arena::kReserve, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (b == MAP_FAILED) return nullptr;
    m.base = static_cast<uint8_t*>(b);
    if (m.protect) {
      struct sigaction a{};
      a.sa_sigaction = &segv_report;
      a.sa_flags = SA_SIGINFO;
      sigemptyset(&a.sa_mask);
      sigaction(SIGSEGV, &a, &previous_segv());
    }
  }
  const size_t bytes = (n + page_bytes() - 1) / page_bytes() * page_bytes();
  size_t off = ~size_t(0);
  for (auto it = m.free_list.begin(); it != m.free_list.end(); ++it) {
    if (it->second < bytes) continue;
    off = it->first;
    const size_t rest = it->second - bytes;
    m.free_list.erase(it);
    if (rest) m.free_list[off + bytes] = rest;
    break;
  }
  if (off == ~size_t(0)) {
    if (m.top + bytes > Arena::kReserve) return nullptr;
    off = m.top;
    m.top += bytes;
  }
  // The new pages take the arena's current state (open inside device work).
  mprotect(m.base + off, bytes, (!m.protect || m.depth > 0) ? PROT_READ | PROT_WRITE : PROT_NONE);
  void* p = m.base + off;
  if (poison()) poison_fill(p, bytes, 0xA5);
  m.live[reinterpret_cast<uintptr_t>(p)] = bytes;
  m.owner[reinterpret_cast<uintptr_t>(p)] = current_device();
  return p;
}

inline void device_free(void* p) {
  if (p == nullptr) return;
  std::lock_guard<std::recursive_mutex> lk(device_mutex());
  Arena& m = arena();
  auto it = m.live.find(reinterpret_cast<uintptr_t>(p));
  if (it == m.live.end()) return;
  const size_t bytes = it->second;
  m.live.erase(it);
  m.owner.erase(reinterpret_cast<uintptr_t>(p));
  if (!kArena) {
    std::free(p);
    return;
  }
  if (poison()) {
    poison_fill(p, bytes, 0x5A);  // kept (not given back) so that a late read sees it
  } else {
    madvise(p, bytes, MADV_DONTNEED);  // the pages go back (zeroed); the range stays reserved
  }
  auto cur = m.free_list.emplace(size_t(static_cast<uint8_t*>(p) - m.base), bytes).first;
  auto next = std::next(cur);
  if (next != m.free_list.end() && cur->first + cur->second == next->first) {
    cur->second += next->second;
    m.free_list.erase(next);
  }
  if (cur != m.free_list.begin()) {
    auto prev = std::prev(cur);
    if (prev->first + prev->second == cur->first) {
      prev->second += cur->second;
      m.free_list.erase(cur);
    }
  }
}

}  // namespace emu
inline cudaError_t cudaGetDeviceCount(int* n) {
  *n = emu::device_count();
  return cudaSuccess;
}
inline cudaError_t cudaMalloc(void** p, size_t n) {
  *p = emu::device_alloc(n);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
template <class T>
cudaError_t cudaMalloc(T** p, size_t n) {
  return cudaMalloc(reinterpret_cast<void**>(p), n);
}
namespace emu {
/// Host address ranges (start -> bytes) under their own lock.
struct HostRanges {
  std::mutex mu;
  std::map<uintptr_t, size_t> m;
  /// Whether p lies inside one of them.
  bool contains(const void* p) {
    const uintptr_t x = reinterpret_cast<uintptr_t>(p);
    std::lock_guard<std::mutex> lk(mu);
    auto it = m.upper_bound(x);
    return it != m.begin() && x < std::prev(it)->first + std::prev(it)->second;
  }
};
/// cudaMallocHost / cudaHostAlloc allocations.
inline HostRanges& pinned_allocs() {
  static HostRanges r;
  return r;
}
/// cudaHostRegister's ranges.
inline HostRanges& host_registry() {
  static HostRanges r;
  return r;
}
// (deferred stream work, below)
inline void flush_device(int device, bool blocking_only = false);
inline void drain(cudaStream_t st);
}  // namespace emu
inline cudaError_t cudaFree(void* p) {
  emu::flush_device(-1);  // CUDA's cudaFree waits for the device
  emu::device_free(p);
  return cudaSuccess;
}
inline cudaError_t cudaMallocAsync(void** p, size_t n, cudaStream_t) { return cudaMalloc(p, n); }
template <class T>
cudaError_t cudaMallocAsync(T** p, size_t n, cudaStream_t s) {
  return cudaMallocAsync(reinterpret_cast<void**>(p), n, s);
}
inline cudaError_t cudaFreeAsync(void* p, cudaStream_t s) {
  emu::drain(s);
  emu::device_free(p);
  return cudaSuccess;
}
// Page-locked host memory: plain host memory here.
inline cudaError_t cudaMallocHost(void** p, size_t n) {
  *p = std::malloc(n ? n : 1);
  if (*p == nullptr) return cudaErrorMemoryAllocation;
  std::lock_guard<std::mutex> lk(emu::pinned_allocs().mu);
  emu::pinned_allocs().m[reinterpret_cast<uintptr_t>(*p)] = n ? n : 1;
  return cudaSuccess;
}
enum { cudaHostAllocDefault = 0, cudaHostAllocPortable = 1, cudaHostAllocMapped = 2 };
inline cudaError_t cudaHostAlloc(void** p, size_t n, unsigned) { return cudaMallocHost(p, n); }
inline cudaError_t cudaFreeHost(void* p) {
  emu::flush_device(-1);  // CUDA's cudaFreeHost waits for the device
  {
    std::lock_guard<std::mutex> lk(emu::pinned_allocs().mu);
    emu::pinned_allocs().m.erase(reinterpret_cast<uintptr_t>(p));
  }
  std::free(p);
  return cudaSuccess;
}
// Registering host memory (page-locking it, mapping it for the device): host
// memory is what the emulated device reads and writes already, so the device
// pointer of a registered range is the host pointer.
// As CUDA, a range that overlaps a registered one is refused (ranks as threads
// share their rings), and only a registered start address unregisters.
enum { cudaHostRegisterDefault = 0, cudaHostRegisterPortable = 1, cudaHostRegisterMapped = 2 };
inline cudaError_t cudaHostRegister(void* p, size_t n, unsigned) {
  if (!p || !n) return emu::failed(cudaErrorInvalidValue);
  const uintptr_t lo = reinterpret_cast<uintptr_t>(p), hi = lo + n;
  std::lock_guard<std::mutex> lk(emu::host_registry().mu);
  for (const auto& [a, len] : emu::host_registry().m) {
    if (lo < a + len && a < hi) return emu::failed(cudaErrorHostMemoryAlreadyRegistered);
  }
  emu::host_registry().m[lo] = n;
  return cudaSuccess;
}
namespace emu {
/// The device of the device memory p points into, or -1.
inline int device_of(const void* p) {
  const uintptr_t x = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::recursive_mutex> lk(device_mutex());
  const Arena& m = arena();
  auto it = m.live.upper_bound(x);
  if (it == m.live.begin() || x >= std::prev(it)->first + std::prev(it)->second) return -1;
  return m.owner.at(std::prev(it)->first);
}
/// With several devices: whether a copy or memset on stream s (null: the
/// current device's legacy stream) touching p stays on s's device.
inline bool on_stream_device(const void* p, cudaStream_t s) {
  if (device_count() == 1 || p == nullptr) return true;
  const int d = device_of(p);
  return d < 0 || d == (s ? s->device : current_device());
}
}  // namespace emu
// What a pointer is: registered host memory, or device memory (with the
// device it was allocated on), else unregistered.
enum cudaMemoryType { cudaMemoryTypeUnregistered = 0, cudaMemoryTypeHost = 1, cudaMemoryTypeDevice = 2 };
struct cudaPointerAttributes {
  cudaMemoryType type = cudaMemoryTypeUnregistered;
  int device = 0;
  void* devicePointer = nullptr;
  void* hostPointer = nullptr;
};
inline cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
  *a = cudaPointerAttributes{};
  const uintptr_t x = reinterpret_cast<uintptr_t>(p);
  {
    std::lock_guard<std::mutex> lk(emu::host_registry().mu);
    for (const auto& [lo, len] : emu::host_registry().m) {
      if (x >= lo && x < lo + len) {
        a->type = cudaMemoryTypeHost;
        a->devicePointer = a->hostPointer = const_cast<void*>(p);
        return cudaSuccess;
      }
    }
  }
  if (const int d = emu::device_of(p); d >= 0) {
    a->type = cudaMemoryTypeDevice;
    a->device = d;
    a->devicePointer = const_cast<void*>(p);
  }
  return cudaSuccess;
}
inline cudaError_t cudaHostUnregister(void* p) {
  emu::flush_device(-1);  // as cudaFreeHost
  std::lock_guard<std::mutex> lk(emu::host_registry().mu);
  return emu::host_registry().m.erase(reinterpret_cast<uintptr_t>(p)) ? cudaSuccess
                                                                      : emu::failed(cudaErrorInvalidValue);
}
inline cudaError_t cudaHostGetDevicePointer(void** d, void* h, unsigned) {
  *d = h;
  return h ? cudaSuccess : emu::failed(cudaErrorInvalidValue);
}
// ---- deferred stream work (NCCLZ_EMU_LAZY; see the file comment) -----------
namespace emu {
inline bool lazy() {
  static const bool on = [] {
    const char* v = std::getenv("NCCLZ_EMU_LAZY");
    return v != nullptr && std::strcmp(v, "0") != 0 && *v != 0;
  }();
  return on;
}
inline std::mutex& streams_mu() {
  static std::mutex m;
  return m;
}
/// Every live stream, the legacy ones included.
inline std::set<CUstream_st*>& streams() {
  static std::set<CUstream_st*> s;
  return s;
}
inline CUstream_st* legacy_stream(int device) {
  static CUstream_st* l = [] {
    auto* a = new CUstream_st[16];
    std::lock_guard<std::mutex> lk(streams_mu());
    for (int d = 0; d < 16; ++d) {
      a[d].device = d;
      a[d].legacy = true;
      streams().insert(&a[d]);
    }
    return a;
  }();
  return &l[device];
}
/// The stream a call names (null: the current device's legacy stream).
inline CUstream_st* resolve(cudaStream_t s) { return s ? s : legacy_stream(current_device()); }
/// Runs the stream's queued work, in order.
inline void flush(CUstream_st* s) {
  std::lock_guard<std::recursive_mutex> lk(s->mu);
  while (!s->q.empty()) {
    std::function<void()> f = std::move(s->q.front());
    s->q.pop_front();
    f();
  }
  s->queries = 0;
}
/// Runs the queued work of every stream of a device (all devices: -1), or
/// of its blocking streams only.
inline void flush_device(int device, bool blocking_only) {
  if (!lazy()) return;
  std::vector<CUstream_st*> v;
  {
    std::lock_guard<std::mutex> lk(streams_mu());
    for (CUstream_st* s : streams())
      if ((device < 0 || s->device == device) && !s->legacy && (!blocking_only || s->blocking)) v.push_back(s);
  }
  if (device >= 0) v.push_back(legacy_stream(device));
  for (CUstream_st* s : v) flush(s);
  if (device < 0)
    for (int d = 0; d < device_count(); ++d) flush(legacy_stream(d));
}
/// Runs f on stream s: now (the default), or queued behind the stream's
/// earlier work (NCCLZ_EMU_LAZY), after the legacy / blocking work CUDA
/// orders before it.
inline void enqueue(cudaStream_t st, std::function<void()> f) {
  if (!lazy()) {
    f();
    return;
  }
  CUstream_st* s = resolve(st);
  if (s->legacy) {
    flush_device(s->device, true);
  } else if (s->blocking) {
    flush(legacy_stream(s->device));
  }
  std::lock_guard<std::recursive_mutex> lk(s->mu);
  s->q.push_back(std::move(f));
}
/// Runs the stream's queued work (NCCLZ_EMU_LAZY), for work that must run
/// now; the legacy stream's waits for the blocking streams' first.
inline void drain(cudaStream_t st) {
  if (!lazy()) return;
  CUstream_st* s = resolve(st);
  if (s->legacy) flush_device(s->device, true);
  flush(s);
}
/// Whether a copy may be asynchronous with p as one side: device memory, or
/// page-locked host memory (allocated or registered); pageable memory makes
/// a CUDA copy synchronous.
inline bool async_capable(const void* p) {
  return device_of(p) >= 0 || pinned_allocs().contains(p) || host_registry().contains(p);
}
}  // namespace emu
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t st = nullptr) {
  if (!emu::on_stream_device(p, st)) return emu::failed(cudaErrorInvalidValue);
  auto set = [p, v, n] {
    emu::DeviceAccess on;
    std::memset(p, v, n);
  };
  if (emu::async_capable(p)) {
    emu::enqueue(st, set);
  } else {
    emu::drain(st);
    set();
  }
  return cudaSuccess;
}
inline cudaError_t cudaMemset(void* p, int v, size_t n) {
  const cudaError_t e = cudaMemsetAsync(p, v, n, nullptr);
  emu::drain(nullptr);
  return e;
}
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind, cudaStream_t st = nullptr) {
  if (n && (d == nullptr || s == nullptr)) return emu::failed(cudaErrorInvalidValue);  // as CUDA answers a null pointer
  if (!emu::on_stream_device(d, st) || !emu::on_stream_device(s, st)) return emu::failed(cudaErrorInvalidValue);
  auto copy = [d, s, n] {
    emu::DeviceAccess on;
    if (n) std::memmove(d, s, n);
  };
  if (emu::async_capable(d) && emu::async_capable(s)) {
    emu::enqueue(st, copy);
  } else {  // pageable host memory: CUDA copies after the stream's earlier work, before returning
    emu::drain(st);
    copy();
  }
  return cudaSuccess;
}
inline cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind k) {
  const cudaError_t e = cudaMemcpyAsync(d, s, n, k, nullptr);
  emu::drain(nullptr);
  return e;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  emu::drain(s);
  return cudaSuccess;
}
// Eager (the default): every launch has run by the time it returns, a stream
// is always idle. Lazy: a busy stream answers cudaErrorNotReady, then runs
// its work at the next query.
inline cudaError_t cudaStreamQuery(cudaStream_t st) {
  if (!emu::lazy()) return cudaSuccess;
  CUstream_st* s = emu::resolve(st);
  {
    std::lock_guard<std::recursive_mutex> lk(s->mu);
    if (s->q.empty()) return cudaSuccess;
    if (s->queries++ % 2 == 0) return cudaErrorNotReady;
  }
  emu::flush(s);
  return cudaSuccess;
}
// Peer access: one address space, so every device can reach every other's
// memory; a kernel may once the launching device enabled it (the launch
// check below allows those pairs), and enabling it twice fails as in CUDA.
namespace emu {
inline std::mutex& peer_mu() {
  static std::mutex m;
  return m;
}
inline std::set<std::pair<int, int>>& peer_pairs() {  // (device, the peer it reaches)
  static std::set<std::pair<int, int>> p;
  return p;
}
inline bool peer_enabled(int device, int peer) {
  std::lock_guard<std::mutex> lk(peer_mu());
  return peer_pairs().count({device, peer}) != 0;
}
}  // namespace emu
inline cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  *can = device != peer ? 1 : 0;
  return cudaSuccess;
}
inline cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned) {
  std::lock_guard<std::mutex> lk(emu::peer_mu());
  if (!emu::peer_pairs().insert({emu::current_device(), peer}).second)
    return emu::failed(cudaErrorPeerAccessAlreadyEnabled);
  return cudaSuccess;
}
// CUDA IPC (the persistent ring's device FIFOs for ranks as processes): one
// process here, so a handle carries the allocation's address and opening it
// returns that address (only live device allocations, as CUDA checks); the
// logic around the exchange runs, the mapping is the identity.
struct cudaIpcMemHandle_t {
  char reserved[64];
};
enum { cudaIpcMemLazyEnablePeerAccess = 1 };
inline cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* h, void* p) {
  if (emu::device_of(p) < 0) return emu::failed(cudaErrorInvalidValue);
  std::memset(h->reserved, 0, sizeof h->reserved);
  std::memcpy(h->reserved, &p, sizeof p);
  return cudaSuccess;
}
inline cudaError_t cudaIpcOpenMemHandle(void** p, cudaIpcMemHandle_t h, unsigned) {
  void* q = nullptr;
  std::memcpy(&q, h.reserved, sizeof q);
  if (emu::device_of(q) < 0) return emu::failed(cudaErrorInvalidResourceHandle);
  *p = q;
  return cudaSuccess;
}
inline cudaError_t cudaIpcCloseMemHandle(void* p) {
  return emu::device_of(p) < 0 ? emu::failed(cudaErrorInvalidValue) : cudaSuccess;
}
// Streams: eager (the default), every launch runs at once, in order, so one
// stream is as good as any; lazy, each has its queue (above).
enum { cudaStreamDefault = 0, cudaStreamNonBlocking = 1 };
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
  *s = new CUstream_st;
  (*s)->device = emu::current_device();
  (*s)->blocking = (flags & cudaStreamNonBlocking) == 0;
  std::lock_guard<std::mutex> lk(emu::streams_mu());
  emu::streams().insert(*s);
  return cudaSuccess;
}
inline cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }
inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
  emu::drain(s);  // CUDA finishes the stream's work after the call returns; here before
  {
    std::lock_guard<std::mutex> lk(emu::streams_mu());
    emu::streams().erase(s);
  }
  // Lazy: kept (empty), since another host thread's flush_device may hold it.
  if (!emu::lazy()) delete s;
  return cudaSuccess;
}
inline cudaError_t cudaDeviceSynchronize() {
  emu::flush_device(emu::current_device());
  return cudaSuccess;
}

// Events, device properties and memory pools (for bench/gpu_codec_bench.cu).
typedef struct CUevent_st* cudaEvent_t;
struct CUevent_st {
  double t = 0;
  int device = 0;                 ///< the device current when it was made
  CUstream_st* stream = nullptr;  ///< where it was last recorded (NCCLZ_EMU_LAZY)
};
inline double emu_now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}
inline cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = new CUevent_st;
  (*e)->device = emu::current_device();
  return cudaSuccess;
}
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr) {
  // The event's device, and the stream's (the legacy stream: the current device's).
  if (e->device != (s ? s->device : emu::current_device())) return emu::failed(cudaErrorInvalidResourceHandle);
  e->stream = emu::resolve(s);
  emu::enqueue(s, [e] { e->t = emu_now_ms(); });
  return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  if (emu::lazy() && e->stream) emu::flush(e->stream);
  return cudaSuccess;
}
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  *ms = float(b->t - a->t);
  return cudaSuccess;
}
struct cudaDeviceProp {
  char name[256] = "CPU emulator (tools/cuda_emu)";
  int multiProcessorCount = 1;
  size_t totalGlobalMem = size_t(1) << 30;
  int l2CacheSize = 0;
};
inline cudaError_t cudaGetDevice(int* d) {
  *d = emu::current_device();
  return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int d) {
  if (d < 0 || d >= emu::device_count()) return emu::failed(cudaErrorInvalidDevice);
  emu::current_device() = d;
  return cudaSuccess;
}
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
  *p = cudaDeviceProp{};
  return cudaSuccess;
}
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16 };
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr, int) {
  *v = 1;  // one SM (cudaDeviceProp's multiProcessorCount)
  return cudaSuccess;
}
/// Blocks of any kernel the one emulated SM holds at once: 256 (a
/// co-resident launch, below, runs each block on a host thread of its own).
inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, const void*, int, size_t) {
  *n = 256;
  return cudaSuccess;
}
typedef struct CUmemPool_st* cudaMemPool_t;
enum cudaMemPoolAttr { cudaMemPoolAttrReleaseThreshold = 4 };
inline cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* p, int) {
  *p = nullptr;
  return cudaSuccess;
}
inline cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, cudaMemPoolAttr, void*) { return cudaSuccess; }
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float cospif(float x) { return float(std::cos(3.14159265358979323846 * double(x))); }

// ---- the scheduler --------------------------------------------------------
namespace emu {

constexpr size_t kStack = 128 * 1024;

// ---- coroutines -------------------------------------------------------------
// Every emulated thread of a block is a coroutine on its own stack, created
// once and kept: it runs the kernel body for one block, parks, and runs it
// again for the next block (or the next launch), so starting a block costs a
// context switch, not a context creation. On x86-64 a switch is a few
// instructions (switch_stack below: the callee-saved registers and the stack
// pointer); elsewhere it is ucontext's swapcontext (a system call each).

#if defined(__x86_64__) && !defined(NCCLZ_EMU_UCONTEXT)
#define NCCLZ_EMU_FAST_SWITCH 1
// switch_stack(&from_sp, to_sp): saves rbp, rbx, r12-r15 on the current stack,
// stores the stack pointer to *from_sp, loads to_sp and restores the same
// registers from there (weak: defined in every file that includes this one).
extern "C" void ncclz_emu_switch_stack(void** from_sp, void* to_sp);
asm(R"(
  .text
  .weak ncclz_emu_switch_stack
  .type ncclz_emu_switch_stack, @function
ncclz_emu_switch_stack:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size ncclz_emu_switch_stack, .-ncclz_emu_switch_stack
)");
#endif

#if defined(__SANITIZE_ADDRESS__)
}  // namespace emu
extern "C" void __sanitizer_start_switch_fiber(void** fake_stack_save, const void* bottom, size_t size);
extern "C" void __sanitizer_finish_switch_fiber(void* fake_stack_save, const void** bottom_old, size_t* size_old);
namespace emu {
#endif

/// A coroutine's stack: not zeroed, so that its pages are only committed as
/// the coroutine touches them (a co-resident launch makes a block's worth of
/// coroutines per block).
struct FiberStack {
  std::unique_ptr<char[]> mem;
  size_t bytes = 0;
  void resize(size_t n) {
    mem.reset(new char[n]);
    bytes = n;
  }
  char* data() const { return mem.get(); }
  size_t size() const { return bytes; }
};

struct Fiber {
#if NCCLZ_EMU_FAST_SWITCH
  void* sp = nullptr;
#else
  ucontext_t ctx;
#endif
  FiberStack stack;
  bool created = false;
  bool done = true;
};

struct WarpState {
  int arrived = 0;
  unsigned gen = 0;
  uint64_t acc = 0, result = 0;
  uint64_t vals[32] = {};  // the lanes' values of a shuffle (warp_shfl_collective)
};

struct BlockRun {
  std::deque<Fiber> fibers;  // grows, never shrinks or moves: coroutines are kept
#if NCCLZ_EMU_FAST_SWITCH
  void* main_sp = nullptr;
#else
  ucontext_t main_ctx;
#endif
  const void* main_stack = nullptr;  // for the sanitizer's fiber switches
  size_t main_stack_size = 0;
  int cur = 0, nthreads = 0, live = 0;
  std::vector<int> warp_live;
  int bar_arrived = 0;
  unsigned bar_gen = 0;
  int spins = 0;  // spin_pause calls in the current round of the block's threads
  std::vector<WarpState> warps;
  const std::function<void()>* body = nullptr;
};

inline BlockRun& run() {
  static thread_local BlockRun r;
  return r;
}

// Switches between the launching thread ("main") and coroutine t.
inline void to_fiber(int t) {
  BlockRun& r = run();
  Fiber& f = r.fibers[size_t(t)];
#if defined(__SANITIZE_ADDRESS__)
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, f.stack.data(), f.stack.size());
#endif
#if NCCLZ_EMU_FAST_SWITCH
  ncclz_emu_switch_stack(&r.main_sp, f.sp);
#else
  swapcontext(&r.main_ctx, &f.ctx);
#endif
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}
inline void to_main() {
  BlockRun& r = run();
  Fiber& f = r.fibers[size_t(r.cur)];
#if defined(__SANITIZE_ADDRESS__)
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, r.main_stack, r.main_stack_size);
#endif
#if NCCLZ_EMU_FAST_SWITCH
  ncclz_emu_switch_stack(&f.sp, r.main_sp);
#else
  swapcontext(&f.ctx, &r.main_ctx);
#endif
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(fake, &r.main_stack, &r.main_stack_size);
#endif
}

inline void yield() { to_main(); }

/// A thread waits for something another host thread (or another of the
/// block's threads) will do: its coroutine yields; launch() then lets the
/// host thread yield the CPU after the round (see the file comment).
inline void spin_pause() {
  ++run().spins;
  to_main();
}

/// Monotonic nanoseconds (the device's %globaltimer here).
inline uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// Releases a block barrier / warp collective completed by a thread's exit.
inline void check_release_after_exit(int t) {
  BlockRun& r = run();
  if (r.bar_arrived > 0 && r.bar_arrived == r.live) {
    r.bar_arrived = 0;
    ++r.bar_gen;
  }
  WarpState& w = r.warps[size_t(t / 32)];
  if (w.arrived > 0 && w.arrived == r.warp_live[size_t(t / 32)]) {
    w.result = w.acc;
    w.acc = 0;
    w.arrived = 0;
    ++w.gen;
  }
}

// A coroutine's life: the kernel body of the current block, then park.
[[noreturn]] inline void fiber_main() {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(nullptr, &run().main_stack, &run().main_stack_size);
#endif
  for (;;) {
    BlockRun& r = run();
    (*r.body)();
    const int t = r.cur;
    r.fibers[size_t(t)].done = true;
    --r.live;
    --r.warp_live[size_t(t / 32)];
    check_release_after_exit(t);
    to_main();
  }
}

inline void create_fiber(Fiber& f) {
  f.stack.resize(kStack);
#if NCCLZ_EMU_FAST_SWITCH
  // A stack that ncclz_emu_switch_stack "returns" into fiber_main from: six
  // saved registers (0), fiber_main's address, and a slot where a caller's
  // return address would be (rsp % 16 == 8 at the entry, as after a call).
  uintptr_t top = (reinterpret_cast<uintptr_t>(f.stack.data()) + f.stack.size()) & ~uintptr_t(15);
  void** sp = reinterpret_cast<void**>(top);
  *--sp = nullptr;                               // fiber_main's "return address"
  *--sp = reinterpret_cast<void*>(&fiber_main);  // where the first switch returns to
  for (int i = 0; i < 6; ++i) *--sp = nullptr;   // rbp, rbx, r12-r15
  f.sp = sp;
#else
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = f.stack.data();
  f.ctx.uc_stack.ss_size = f.stack.size();
  f.ctx.uc_link = nullptr;
  makecontext(&f.ctx, reinterpret_cast<void (*)()>(&fiber_main), 0);
#endif
  f.created = true;
}

inline void syncthreads() {
  BlockRun& r = run();
  const unsigned gen = r.bar_gen;
  if (++r.bar_arrived == r.live) {
    r.bar_arrived = 0;
    ++r.bar_gen;
    return;
  }
  while (r.bar_gen == gen) yield();
}

// `v` of every live lane of the caller's warp combined by f (OR, sum): each
// lane adds its value, the last to arrive publishes the result, the others
// wait for the warp's generation to move.
template <class F>
inline uint64_t warp_collective(uint64_t v, F f) {
  BlockRun& r = run();
  WarpState& w = r.warps[size_t(r.cur / 32)];
  const unsigned gen = w.gen;
  w.acc = f(w.acc, v);
  if (++w.arrived == r.warp_live[size_t(r.cur / 32)]) {
    w.result = w.acc;
    w.acc = 0;
    w.arrived = 0;
    ++w.gen;
    return w.result;
  }
  while (w.gen == gen) yield();
  return w.result;
}
inline uint64_t warp_or_collective(uint64_t v) {
  return warp_collective(v, [](uint64_t a, uint64_t b) { return a | b; });
}
inline uint64_t warp_add_collective(uint64_t v) {
  return warp_collective(v, [](uint64_t a, uint64_t b) { return a + b; });
}

// Lane `src`'s value `v` for the caller (a shuffle): every live lane of the
// warp posts its value, then reads its source's after a warp barrier (and a
// second barrier before the slots can be reused). A lane outside 0..31, or
// one that has exited: the caller's own value.
inline uint64_t warp_shfl_collective(uint64_t v, int src) {
  BlockRun& r = run();
  WarpState& w = r.warps[size_t(r.cur / 32)];
  const int lane = r.cur % 32;
  w.vals[lane] = v;
  warp_or_collective(0);
  const int base = r.cur - lane;
  const bool live = src >= 0 && src < 32 && base + src < r.nthreads && !r.fibers[size_t(base + src)].done;
  const uint64_t out = live ? w.vals[src] : v;
  warp_or_collective(0);
  return out;
}

/// The devices of the device memory a launch's arguments point into: every
/// aligned 8-byte word of every argument (a pointer, or a struct holding
/// pointers, passed by value) that is an address inside a live allocation.
template <class... A>
std::vector<int> pointer_devices(const A&... a) {
  std::vector<int> d;
  auto one = [&d](const auto& x) {
    // A struct with padding is not scanned: its padding bytes are whatever
    // the stack held there, a stale device address sometimes (seen: the 7
    // bytes after EncodeOptions::allow_rans).
    using T = std::decay_t<decltype(x)>;
    if constexpr (!std::is_pointer_v<T> && !std::has_unique_object_representations_v<T>) return;
    const auto* bytes = reinterpret_cast<const unsigned char*>(&x);
    for (size_t at = 0; at + sizeof(uintptr_t) <= sizeof(x); at += alignof(uintptr_t)) {
      uintptr_t w;
      std::memcpy(&w, bytes + at, sizeof w);
      if (const int dev = device_of(reinterpret_cast<const void*>(w)); dev >= 0) d.push_back(dev);
    }
  };
  (one(a), ...);
  return d;
}

template <class F>
void launch(F&& f, dim3 grid, dim3 block, size_t = 0, cudaStream_t s = nullptr);

/// A launch whose pointer arguments (devices(): pointer_devices) must be
/// memory of its stream's device where several devices are emulated.
template <class G, class F>
void launch_checked(G&& devices, F&& f, dim3 grid, dim3 block, size_t shm = 0, cudaStream_t s = nullptr) {
  if (device_count() > 1) {
    const int here = s ? s->device : current_device();
    for (int d : devices()) {
      if (d >= 0 && d != here && !peer_enabled(here, d)) {
        failed(cudaErrorIllegalAddress);
        return;
      }
    }
  }
  launch(std::forward<F>(f), grid, block, shm, s);
}

/// Inside this scope the host thread's launches are co-resident: every block
/// of the grid on a host thread of its own, all running at once.
inline bool& co_resident_launch() {
  static thread_local bool on = false;
  return on;
}
struct CoResidentLaunch {
  CoResidentLaunch() { co_resident_launch() = true; }
  ~CoResidentLaunch() { co_resident_launch() = false; }
  CoResidentLaunch(const CoResidentLaunch&) = delete;
  CoResidentLaunch& operator=(const CoResidentLaunch&) = delete;
};

// Blocks [b0, b1) of a launch, one after the other, on this host thread.
inline void run_blocks(const std::function<void()>& body, dim3 grid, dim3 block, unsigned b0, unsigned b1) {
  BlockRun& r = run();
  const int nt = int(block.x);
  r.nthreads = nt;
  if (r.fibers.size() < size_t(nt)) r.fibers.resize(size_t(nt));
  for (int t = 0; t < nt; ++t)
    if (!r.fibers[size_t(t)].created) create_fiber(r.fibers[size_t(t)]);
  const std::function<void()>* outer = r.body;  // launches do not nest, but stay safe
  r.body = &body;
  gridDim = grid;
  blockDim = block;
  for (unsigned b = b0; b < b1; ++b) {
    blockIdx.x = b;
    r.live = nt;
    r.warp_live.assign(size_t((nt + 31) / 32), 0);
    for (int t = 0; t < nt; ++t) ++r.warp_live[size_t(t / 32)];
    r.warps.assign(r.warp_live.size(), WarpState{});
    r.bar_arrived = 0;
    for (int t = 0; t < nt; ++t) r.fibers[size_t(t)].done = false;
    int idle_rounds = 0;  // consecutive rounds in which some thread spun
    while (r.live > 0) {
      r.spins = 0;
      for (int t = 0; t < nt; ++t) {
        if (r.fibers[size_t(t)].done) continue;
        r.cur = t;
        threadIdx.x = unsigned(t);
        to_fiber(t);
      }
      if (r.spins == 0) {
        idle_rounds = 0;
      } else if (++idle_rounds < 64) {
        std::this_thread::yield();  // let the host thread it waits for run
      } else {
        const timespec ts{0, 50000};  // waiting long: 50 us naps, not a busy core
        nanosleep(&ts, nullptr);
      }
    }
  }
  r.body = outer;
}

template <class F>
void launch(F&& f, dim3 grid, dim3 block, size_t, cudaStream_t s) {
  if (grid.y != 1 || grid.z != 1 || block.y != 1 || block.z != 1) std::abort();  // 1D only
  if (s != nullptr && s->device != current_device()) {                           // as CUDA: a stream of another device
    failed(cudaErrorInvalidResourceHandle);
    return;
  }
  if (!co_resident_launch()) {
    // (a copy of the kernel's call and its arguments: it may run after this returns)
    enqueue(s, [body = std::function<void()>(std::forward<F>(f)), grid, block] {
      DeviceAccess on;  // device memory open to it (other host threads' work runs meanwhile)
      run_blocks(body, grid, block, 0, grid.x);
    });
    return;
  }
  drain(s);  // a co-resident launch runs now, after the stream's earlier work
  DeviceAccess on;
  const std::function<void()> body = f;
  if (grid.x < 2) {
    run_blocks(body, grid, block, 0, grid.x);
    return;
  }
  std::vector<std::thread> blocks;
  const int dev = current_device();  // the blocks' host threads run on the launch's device
  for (unsigned b = 0; b < grid.x; ++b) {
    blocks.emplace_back([&, b] {
      current_device() = dev;
      run_blocks(body, grid, block, b, b + 1);
    });
  }
  for (std::thread& t : blocks) t.join();
}

}  // namespace emu

inline void __syncthreads() { emu::syncthreads(); }
inline void __nanosleep(unsigned) { emu::spin_pause(); }
inline int __syncthreads_count(int p) {
  static thread_local int total;
  emu::syncthreads();
  if (threadIdx.x == 0) total = 0;
  emu::syncthreads();
  // Serial in the emulator: every thread adds once between two barriers.
  total += p != 0;
  emu::syncthreads();
  const int r = total;
  emu::syncthreads();
  return r;
}
inline unsigned __ballot_sync(unsigned, int p) {
  const unsigned lane = threadIdx.x % 32;
  return unsigned(emu::warp_or_collective(p ? (uint64_t(1) << lane) : 0));
}
inline unsigned __reduce_or_sync(unsigned, unsigned v) { return unsigned(emu::warp_or_collective(v)); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::warp_or_collective(0); }
// Shuffles (width 32); a source lane outside the warp: the caller's value, as on a GPU.
template <class T>
T __shfl_sync(unsigned, T v, int src) {
  return T(emu::warp_shfl_collective(uint64_t(v), src));
}
template <class T>
T __shfl_up_sync(unsigned, T v, unsigned d) {
  const int lane = int(threadIdx.x % 32);
  return T(emu::warp_shfl_collective(uint64_t(v), lane >= int(d) ? lane - int(d) : lane));
}
template <class T>
T __shfl_down_sync(unsigned, T v, unsigned d) {
  const int lane = int(threadIdx.x % 32);
  return T(emu::warp_shfl_collective(uint64_t(v), lane + int(d) < 32 ? lane + int(d) : lane));
}
template <class T>
T __shfl_xor_sync(unsigned, T v, int m) {
  return T(emu::warp_shfl_collective(uint64_t(v), int(threadIdx.x % 32) ^ m));
}
// Sum over the live lanes (sm_80's redux.sync).
inline unsigned __reduce_add_sync(unsigned, unsigned v) { return unsigned(emu::warp_add_collective(v)); }
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __popcll(unsigned long long v) { return __builtin_popcountll(v); }
// Byte i of the result: byte (s >> 4i) & 7 of the eight bytes y:x (x the low four).
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  const uint64_t b = uint64_t(y) << 32 | x;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) r |= unsigned(b >> (8 * ((s >> (4 * i)) & 7u)) & 0xFFu) << (8 * i);
  return r;
}
inline int __clz(int v) { return v == 0 ? 32 : __builtin_clz(unsigned(v)); }
inline int __ffs(int v) { return __builtin_ffs(v); }
// Atomics: real ones (host threads run device work concurrently).
inline int atomicExch(int* p, int v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicExch(unsigned* p, unsigned v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
template <class T>
T emu_atomic_update(T* p, T v, bool (*better)(T, T)) {
  T o = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  while (better(v, o) && !__atomic_compare_exchange_n(p, &o, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
  }
  return o;
}
inline unsigned atomicMin(unsigned* p, unsigned v) {
  return emu_atomic_update<unsigned>(p, v, [](unsigned a, unsigned b) { return a < b; });
}
inline unsigned atomicMax(unsigned* p, unsigned v) {
  return emu_atomic_update<unsigned>(p, v, [](unsigned a, unsigned b) { return a > b; });
}
inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicOr(unsigned* p, unsigned v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }
inline int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
inline unsigned atomicCAS(unsigned* p, unsigned cmp, unsigned v) {
  __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return cmp;
}
inline unsigned long long atomicCAS(unsigned long long* p, unsigned long long cmp, unsigned long long v) {
  __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return cmp;
}
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

// ---- cub subset -----------------------------------------------------------
namespace cub {

template <class T, int BLOCK_THREADS>
class BlockScan {
 public:
  struct TempStorage {};
  explicit BlockScan(TempStorage&) {}

  void ExclusiveSum(T in, T& out, T& aggregate) {
    static thread_local T slots[BLOCK_THREADS];
    const int t = int(threadIdx.x);
    slots[t] = in;
    emu::syncthreads();
    T e = T(0), a = T(0);
    for (int i = 0; i < BLOCK_THREADS; ++i) {
      if (i < t) e = T(e + slots[i]);
      a = T(a + slots[i]);
    }
    emu::syncthreads();
    out = e;
    aggregate = a;
  }

  template <int N, class PrefixOp>
  void InclusiveSum(T (&in)[N], T (&out)[N], PrefixOp& op) {
    static thread_local T slots[BLOCK_THREADS];
    static thread_local T bcast;
    const int t = int(threadIdx.x);
    T local[N];
    T s = T(0);
    for (int j = 0; j < N; ++j) {
      s = T(s + in[j]);
      local[j] = s;
    }
    slots[t] = s;
    emu::syncthreads();
    T e = T(0), a = T(0);
    for (int i = 0; i < BLOCK_THREADS; ++i) {
      if (i < t) e = T(e + slots[i]);
      a = T(a + slots[i]);
    }
    if (t < 32) {
      const T p = op(a);  // every lane of warp 0 calls it, as in CUB
      if (t == 0) bcast = p;
    }
    emu::syncthreads();
    const T prefix = bcast;
    for (int j = 0; j < N; ++j) out[j] = T(prefix + e + local[j]);
    emu::syncthreads();
  }
};

template <class T, int BLOCK_THREADS>
class BlockReduce {
 public:
  struct TempStorage {};
  explicit BlockReduce(TempStorage&) {}
  T Sum(T in) {
    static thread_local T slots[BLOCK_THREADS];
    const int t = int(threadIdx.x);
    slots[t] = in;
    emu::syncthreads();
    T a = T(0);
    for (int i = 0; i < BLOCK_THREADS; ++i) a = T(a + slots[i]);
    emu::syncthreads();
    return a;
  }
};

struct DeviceScan {
  template <class T>
  static cudaError_t ExclusiveSum(void* tmp, size_t& bytes, const T* in, T* out, long long n,
                                  cudaStream_t stream = nullptr) {
    if (tmp == nullptr) {
      bytes = 16;
      return cudaSuccess;
    }
    emu::enqueue(stream, [in, out, n] {
      emu::DeviceAccess on;
      T acc = T(0);
      for (long long i = 0; i < n; ++i) {
        const T v = in[i];
        out[i] = acc;
        acc = T(acc + v);
      }
    });
    return cudaSuccess;
  }
};

}  // namespace cub
