// Standalone CUDA smoke test for a machine nobody has run ncclz on yet (tools/gpu_session.sh,
// phase "smoke"; docs/GPU.md). It depends on nothing in the repository, so that its answers
// mean "the machine and its driver can do this" before the project's own code is involved:
//
//   device    a device is visible: name, compute capability, SMs, memory
//   kernel    a warp-ballot + block-reduce kernel counts and sums correctly
//   async     cudaMallocAsync / cudaFreeAsync on a stream of our own (stream-ordered pool)
//   hostreg   a /dev/shm file (shm_open + ftruncate + mmap) registered with cudaHostRegister
//             (Mapped | Portable): a kernel reads what the host wrote and writes through
//             cudaHostGetDevicePointer; the host reads the kernel's writes from the mapping
//   ipc       CUDA IPC between two processes: the parent's cudaMalloc buffer and an
//             interprocess event go to a child through a pipe; the child fills the buffer
//             with a pattern and records the event; the parent waits on the event and checks
//
// Build and run (sm_90: H100/H200):  nvcc -O2 -arch=sm_90 -o gpu_smoke tools/gpu_smoke.cu && ./gpu_smoke
// Output: one "PASS <item>: ..." or "FAIL <item>: ... (<cudaError name>: <string>)" line per
// item, then "SMOKE: P passed, F failed". Exit status 0 only when every item passed.
//
// The child is forked before the parent makes any CUDA call (a CUDA context does not survive
// fork), and it makes none until the parent hands it the handles.
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

int g_pass = 0, g_fail = 0;

void report(bool ok, const char* item, const char* fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  std::printf("%s %s: %s\n", ok ? "PASS" : "FAIL", item, msg);
  std::fflush(stdout);
  (ok ? g_pass : g_fail)++;
}

// "what (cudaErrorX: string)" for a failed call, "" for success.
std::string cuda_err(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return "";
  return std::string(what) + " (" + cudaGetErrorName(e) + ": " + cudaGetErrorString(e) + ")";
}

#define TRY(call)                                        \
  do {                                                   \
    std::string e_ = cuda_err((call), #call);            \
    if (!e_.empty()) {                                   \
      report(false, item, "%s", e_.c_str());             \
      cudaGetLastError(); /* clear a non-sticky error */ \
      return false;                                      \
    }                                                    \
  } while (0)

// ---- kernels ---------------------------------------------------------------------------------------
constexpr int kBlock = 256;

// Counts the elements divisible by 7 (warp ballot) and sums all elements (shuffle + shared-memory
// block reduce); one atomic per block for each.
__global__ void ballot_reduce(const int* x, int n, unsigned long long* count, unsigned long long* sum) {
  __shared__ unsigned long long warp_cnt[kBlock / 32], warp_sum[kBlock / 32];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int v = i < n ? x[i] : 0;
  unsigned ballot = __ballot_sync(0xffffffffu, i < n && v % 7 == 0);
  unsigned long long s = static_cast<unsigned long long>(v);
  for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    warp_cnt[warp] = static_cast<unsigned long long>(__popc(ballot));
    warp_sum[warp] = s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long c = 0, t = 0;
    for (int w = 0; w < kBlock / 32; ++w) {
      c += warp_cnt[w];
      t += warp_sum[w];
    }
    atomicAdd(count, c);
    atomicAdd(sum, t);
  }
}

__global__ void fill_pattern(uint32_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    p[i] = static_cast<uint32_t>(i) * 2654435761u ^ seed;
}

// out[i] = in[i] * 3 + 1, both in mapped host memory.
__global__ void triple_plus_one(const uint32_t* in, uint32_t* out, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    out[i] = in[i] * 3u + 1u;
}

uint32_t pattern(size_t i, uint32_t seed) { return static_cast<uint32_t>(i) * 2654435761u ^ seed; }

// First index where host buffer differs from the pattern, or n.
size_t first_mismatch(const uint32_t* p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != pattern(i, seed)) return i;
  return n;
}

// ---- checks ------------------------------------------------------------------------------------------
bool check_device() {
  const char* item = "device";
  int n = 0;
  TRY(cudaGetDeviceCount(&n));
  if (n < 1) {
    report(false, item, "cudaGetDeviceCount gave %d devices", n);
    return false;
  }
  TRY(cudaSetDevice(0));
  cudaDeviceProp p;
  TRY(cudaGetDeviceProperties(&p, 0));
  size_t free_b = 0, total_b = 0;
  TRY(cudaMemGetInfo(&free_b, &total_b));
  int drv = 0, rt = 0;
  TRY(cudaDriverGetVersion(&drv));
  TRY(cudaRuntimeGetVersion(&rt));
  report(true, item, "%d device(s); 0: %s, sm_%d%d, %d SMs, %.1f GiB (%.1f free), L2 %d KiB, driver %d, runtime %d", n,
         p.name, p.major, p.minor, p.multiProcessorCount, total_b / 1073741824.0, free_b / 1073741824.0,
         p.l2CacheSize / 1024, drv, rt);
  return true;
}

bool check_kernel() {
  const char* item = "kernel";
  const int n = (1 << 22) + 12345;  // not a multiple of the block: the tail is masked
  std::vector<int> h(n);
  unsigned long long want_cnt = 0, want_sum = 0;
  for (int i = 0; i < n; ++i) {
    h[i] = static_cast<int>((static_cast<uint32_t>(i) * 2654435761u) >> 12);
    want_cnt += h[i] % 7 == 0;
    want_sum += static_cast<unsigned long long>(h[i]);
  }
  int* d = nullptr;
  unsigned long long* acc = nullptr;
  TRY(cudaMalloc(&d, n * sizeof(int)));
  TRY(cudaMalloc(&acc, 2 * sizeof(unsigned long long)));
  TRY(cudaMemcpy(d, h.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  TRY(cudaMemset(acc, 0, 2 * sizeof(unsigned long long)));
  ballot_reduce<<<(n + kBlock - 1) / kBlock, kBlock>>>(d, n, acc, acc + 1);
  TRY(cudaGetLastError());
  unsigned long long got[2] = {0, 0};
  TRY(cudaMemcpy(got, acc, sizeof got, cudaMemcpyDeviceToHost));
  TRY(cudaFree(d));
  TRY(cudaFree(acc));
  bool ok = got[0] == want_cnt && got[1] == want_sum;
  report(ok, item, "ballot count %llu (want %llu), block-reduce sum %llu (want %llu) over %d ints", got[0], want_cnt,
         got[1], want_sum, n);
  return ok;
}

bool check_async() {
  const char* item = "async";
  int pools = 0;
  TRY(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, 0));
  if (!pools) {
    report(false, item, "cudaDevAttrMemoryPoolsSupported is 0");
    return false;
  }
  cudaStream_t s;
  TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const size_t n = (64u << 20) / 4;
  uint32_t* d = nullptr;
  TRY(cudaMallocAsync(&d, n * 4, s));
  fill_pattern<<<1024, 256, 0, s>>>(d, n, 0x5eedu);
  TRY(cudaGetLastError());
  uint32_t* h = nullptr;
  TRY(cudaMallocHost(&h, n * 4));
  TRY(cudaMemcpyAsync(h, d, n * 4, cudaMemcpyDeviceToHost, s));
  TRY(cudaFreeAsync(d, s));
  // A second allocation in stream order after the free: the pool may hand the same memory back.
  uint32_t* d2 = nullptr;
  TRY(cudaMallocAsync(&d2, n * 4, s));
  TRY(cudaMemsetAsync(d2, 0, n * 4, s));
  TRY(cudaFreeAsync(d2, s));
  TRY(cudaStreamSynchronize(s));
  size_t bad = first_mismatch(h, n, 0x5eedu);
  TRY(cudaFreeHost(h));
  TRY(cudaStreamDestroy(s));
  report(bad == n, item, "cudaMallocAsync 64 MiB, kernel fill, copy back, cudaFreeAsync, realloc: %s",
         bad == n ? "pattern intact" : ("first wrong word " + std::to_string(bad)).c_str());
  return bad == n;
}

bool check_hostreg() {
  const char* item = "hostreg";
  char name[64];
  std::snprintf(name, sizeof name, "/ncclz_smoke_%d", static_cast<int>(getpid()));
  const size_t bytes = 8u << 20, n = bytes / 8;  // first half: input, second half: output
  int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    report(false, item, "shm_open(%s): %s", name, std::strerror(errno));
    return false;
  }
  shm_unlink(name);  // the mapping keeps it alive
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    report(false, item, "ftruncate(%zu): %s", bytes, std::strerror(errno));
    close(fd);
    return false;
  }
  void* map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (map == MAP_FAILED) {
    report(false, item, "mmap(%zu): %s", bytes, std::strerror(errno));
    return false;
  }
  uint32_t* in = static_cast<uint32_t*>(map);
  uint32_t* out = in + n;
  for (size_t i = 0; i < n; ++i) {
    in[i] = pattern(i, 0xabcdu);
    out[i] = 0;
  }
  std::string e = cuda_err(cudaHostRegister(map, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable),
                           "cudaHostRegister(Mapped|Portable) of a /dev/shm mapping");
  if (!e.empty()) {
    report(false, item, "%s", e.c_str());
    munmap(map, bytes);
    return false;
  }
  void* dev = nullptr;
  bool ok = false;
  size_t bad = 0;
  e = cuda_err(cudaHostGetDevicePointer(&dev, map, 0), "cudaHostGetDevicePointer");
  if (e.empty()) {
    uint32_t* din = static_cast<uint32_t*>(dev);
    triple_plus_one<<<256, 256>>>(din, din + n, n);
    e = cuda_err(cudaGetLastError(), "triple_plus_one launch");
    if (e.empty()) e = cuda_err(cudaDeviceSynchronize(), "cudaDeviceSynchronize after the mapped-memory kernel");
    if (e.empty()) {
      for (bad = 0; bad < n; ++bad)
        if (out[bad] != in[bad] * 3u + 1u) break;
      ok = bad == n;
    }
  }
  std::string e2 = cuda_err(cudaHostUnregister(map), "cudaHostUnregister");
  munmap(map, bytes);
  if (!e.empty() || !e2.empty()) {
    report(false, item, "%s%s", e.c_str(), e2.c_str());
    return false;
  }
  report(ok, item, "8 MiB /dev/shm mapping, device pointer %s host pointer, kernel read/write: %s",
         dev == map ? "==" : "!=", ok ? "host sees every word" : ("first wrong word " + std::to_string(bad)).c_str());
  return ok;
}

// ---- IPC: the pipe protocol --------------------------------------------------------------------------
struct ToChild {
  int go;  // 0: nothing to do (the parent failed before the IPC check), exit
  cudaIpcMemHandle_t mem;
  cudaIpcEventHandle_t ev;
  size_t n;
  uint32_t seed;
};
struct ToParent {
  int rc;  // 0: the child wrote the pattern and recorded the event
  char msg[400];
};

bool read_full(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n) {
    ssize_t r = read(fd, c, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}
bool write_full(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n) {
    ssize_t r = write(fd, c, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// The child: opens the parent's buffer and event, fills the buffer, records the event on the same
// stream, reports, then waits for the parent's "done" byte before closing (its context must live
// until the parent has waited on the event).
int ipc_child(int rfd, int wfd) {
  ToChild in{};
  if (!read_full(rfd, &in, sizeof in) || !in.go) return 0;
  ToParent out{};
  std::string e;
  void* p = nullptr;
  cudaEvent_t ev = nullptr;
  cudaStream_t s = nullptr;
  e = cuda_err(cudaSetDevice(0), "child cudaSetDevice(0)");
  if (e.empty())
    e = cuda_err(cudaIpcOpenMemHandle(&p, in.mem, cudaIpcMemLazyEnablePeerAccess), "child cudaIpcOpenMemHandle");
  if (e.empty()) e = cuda_err(cudaIpcOpenEventHandle(&ev, in.ev), "child cudaIpcOpenEventHandle");
  if (e.empty()) e = cuda_err(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "child cudaStreamCreate");
  if (e.empty()) {
    fill_pattern<<<512, 256, 0, s>>>(static_cast<uint32_t*>(p), in.n, in.seed);
    e = cuda_err(cudaGetLastError(), "child fill_pattern launch");
  }
  if (e.empty()) e = cuda_err(cudaEventRecord(ev, s), "child cudaEventRecord(IPC event)");
  out.rc = e.empty() ? 0 : 1;
  std::snprintf(out.msg, sizeof out.msg, "%s", e.c_str());
  write_full(wfd, &out, sizeof out);
  char done = 0;
  read_full(rfd, &done, 1);  // the parent has checked (or given up)
  if (s) cudaStreamSynchronize(s);
  if (p) cudaIpcCloseMemHandle(p);
  if (ev) cudaEventDestroy(ev);
  if (s) cudaStreamDestroy(s);
  return out.rc;
}

bool check_ipc(int wfd, int rfd, pid_t child) {
  const char* item = "ipc";
  const size_t n = (32u << 20) / 4;
  const uint32_t seed = 0xc0ffeeu;
  uint32_t* d = nullptr;
  cudaEvent_t ev = nullptr;
  ToChild msg{};
  TRY(cudaMalloc(&d, n * 4));
  TRY(cudaMemset(d, 0, n * 4));
  TRY(cudaEventCreateWithFlags(&ev, cudaEventInterprocess | cudaEventDisableTiming));
  TRY(cudaIpcGetMemHandle(&msg.mem, d));
  TRY(cudaIpcGetEventHandle(&msg.ev, ev));
  TRY(cudaDeviceSynchronize());  // the memset is done before the child writes
  msg.go = 1;
  msg.n = n;
  msg.seed = seed;
  if (!write_full(wfd, &msg, sizeof msg)) {
    report(false, item, "pipe write to the child failed: %s", std::strerror(errno));
    return false;
  }
  ToParent reply{};
  if (!read_full(rfd, &reply, sizeof reply)) {
    report(false, item, "the child (pid %d) closed the pipe without answering (crashed?)", static_cast<int>(child));
    return false;
  }
  std::string e;
  std::vector<uint32_t> h(n);
  if (reply.rc == 0) {
    cudaStream_t s;
    e = cuda_err(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    if (e.empty()) {
      // Order the copy after the child's kernel through the event, on the GPU.
      e = cuda_err(cudaStreamWaitEvent(s, ev, 0), "cudaStreamWaitEvent(IPC event)");
      if (e.empty()) e = cuda_err(cudaMemcpyAsync(h.data(), d, n * 4, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync");
      if (e.empty()) e = cuda_err(cudaStreamSynchronize(s), "cudaStreamSynchronize");
      if (e.empty()) e = cuda_err(cudaEventSynchronize(ev), "cudaEventSynchronize(IPC event)");
      cudaStreamDestroy(s);
    }
  }
  char done = 1;
  write_full(wfd, &done, 1);
  cudaEventDestroy(ev);
  cudaFree(d);
  if (reply.rc != 0) {
    report(false, item, "child: %s", reply.msg);
    return false;
  }
  if (!e.empty()) {
    report(false, item, "%s", e.c_str());
    return false;
  }
  size_t bad = first_mismatch(h.data(), n, seed);
  report(bad == n, item, "32 MiB cudaMalloc buffer and an interprocess event to pid %d: %s", static_cast<int>(child),
         bad == n ? "the child's pattern arrived, ordered by its event"
                  : ("first wrong word " + std::to_string(bad) + ": " + std::to_string(h[bad])).c_str());
  return bad == n;
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // Fork before any CUDA call.
  int to_child[2], to_parent[2];
  if (pipe(to_child) != 0 || pipe(to_parent) != 0) {
    std::printf("FAIL ipc: pipe: %s\n", std::strerror(errno));
    return 1;
  }
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) {
    std::printf("FAIL ipc: fork: %s\n", std::strerror(errno));
    return 1;
  }
  if (pid == 0) {
    close(to_child[1]);
    close(to_parent[0]);
    _exit(ipc_child(to_child[0], to_parent[1]));
  }
  close(to_child[0]);
  close(to_parent[1]);

  bool have_device = check_device();
  if (have_device) {
    check_kernel();
    check_async();
    check_hostreg();
    check_ipc(to_child[1], to_parent[0], pid);
  } else {
    ToChild stop{};
    write_full(to_child[1], &stop, sizeof stop);
    report(false, "kernel", "not run (no device)");
    report(false, "async", "not run (no device)");
    report(false, "hostreg", "not run (no device)");
    report(false, "ipc", "not run (no device)");
  }
  close(to_child[1]);
  close(to_parent[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    report(false, "ipc-child", "the child exited with %s %d", WIFEXITED(status) ? "status" : "signal",
           WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
  }
  std::printf("SMOKE: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail == 0 ? 0 : 1;
}
