// The persistent ring all_reduce (ncclz/cuda_persistent.hpp) of N ranks as
// threads of one process on one GPU (each rank its own stream and FIFOs,
// one kernel per call and rank) over a list of shapes, next to a cudaMemcpy
// device-to-device of one rank's buffer, in one run.
//
//   gpu_persistent_bench [--mib 64] [--ranks 4] [--shapes C:G:SLOT_KIB:K[:v1][:proxy][:sel][:max],...]
//                        [--channels 8] [--ctas 1] [--slot-kib 1024] [--slots 4]
//                        [--proxy 0|1] [--rel 1e-3] [--reps 5] [--warm 2] [--md out.md]
//
// A shape: C channels, G CTAs per channel, slots of SLOT_KIB KiB, K slots
// per FIFO; ":v1" runs it with the first version's per-slice code
// (Options::first_version_slices), for an A/B against the same shape
// without it; ":proxy" with the FIFOs in page-locked host memory
// (Options::fifo_in_host_memory), every link carried by the ranks' host
// proxies (transport/persistent_proxy.hpp, two threads per channel and
// rank) over an in-process transport connection of K slots of the FIFO's
// size, each rank with its own abort word: the path of ranks on other hosts,
// less the network; ":sel" codes every slice with the device selector's
// choice (Shape::select: Block with None / Delta1 / Delta2 or Raw, chosen
// per slice by the sending CTA) instead of the mode's forced predictor, for
// the A/B of selector against forced predictor in one run; ":max" reduces
// with max instead of sum (every mode). --proxy 1 adds a ":proxy" twin
// after every shape, so one run times device FIFOs against host FIFOs and
// proxies. Without --shapes, the one shape of --channels, --ctas,
// --slot-kib, --slots. A shape whose CTAs (N x C x G) cannot all be
// resident is reported as refused (PersistentRing::kNotResident), not run.
//
// Data: per rank, --mib MiB of float32 ("gaussian" and "smooth",
// bench/gpu_bench_util.cuh, rank r's the elements after rank r-1's),
// quantized on the device (DeviceCodec::quantize_async) to int32 codes on
// the grid of half step rel * (max - min) of rank 0's data. Per shape:
//   gaussian coded none   the codes, Block without a predictor in the FIFOs
//   smooth coded delta1   the codes, Block with Delta1
//   gaussian raw int32    the same codes uncompressed (the slots hold the values)
//   gaussian raw float32  the floats themselves summed in float32 (an
//                         uncompressed all_reduce of the original data)
// Time: wall clock from the moment every rank's thread is released (a
// barrier) to the last rank's synchronize(), median of --reps after --warm.
// Bus bandwidth as NCCL reports it: 2 (N - 1) / N * bytes / time. Ratio:
// rank 0's codes in slices of the slot (encode_slices_async with that
// predictor; ":sel": encode_slices_select_async with
// codec::fast_select_options(), the selector's own choices), raw bytes /
// coded bytes. Checks before timing: every rank's result equals the exact
// wrapping sum (":max": the max) of the codes (coded and raw int32), or
// every rank's floats are identical bit for bit (raw float32); a failed
// check or call (a rank's error: timeout, abort, codec) fails its shape's
// row and the exit status, and the sweep goes on with the next run (each
// wait gives up after 20 s). Output: a line per run, then one table row per
// shape (also to --md). Built with -DNCCLZ_BUILD_GPU_BENCH=ON
// (tools/gpu_session.sh, phases bench and persist); its checks run in the
// CPU emulator (tools/cuda_emu/run.sh ci, 1 MiB; its timings mean nothing).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "codec/select_rule.hpp"
#include "gpu_bench_util.cuh"
#include "ncclz/cuda_codec.hpp"
#include "ncclz/cuda_persistent.hpp"
#include "transport/persistent_proxy.hpp"

using ncclz::codec::ElemType;
using ncclz::codec::Predictor;
namespace nc = ncclz::cuda;

namespace {

// out[i] += x[i] (wrapping int32): the expected sum.
__global__ void add_kernel(int32_t* out, const int32_t* x, size_t n) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = int32_t(uint32_t(out[i]) + uint32_t(x[i]));
}
// out[i] = max(out[i], x[i]): the expected max.
__global__ void max_kernel(int32_t* out, const int32_t* x, size_t n) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = out[i] > x[i] ? out[i] : x[i];
}
// Counts the 4-byte words where a and b differ.
__global__ void diff_kernel(const uint32_t* a, const uint32_t* b, size_t n, unsigned long long* nd) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    if (a[i] != b[i]) atomicAdd(nd, 1ull);
}

struct Mode {
  int data;  // 0 gaussian, 1 smooth
  const char* name;
  bool coded;
  ElemType type;
  Predictor pred;
};
const Mode kModes[] = {{0, "coded none", true, ElemType::I32, Predictor::None},
                       {1, "coded delta1", true, ElemType::I32, Predictor::Delta1},
                       {0, "raw int32", false, ElemType::I32, Predictor::None},
                       {0, "raw float32", false, ElemType::F32, Predictor::None}};
constexpr int kNumModes = int(sizeof(kModes) / sizeof(kModes[0]));
const char* const kDataNames[] = {"gaussian", "smooth"};

struct Shape {
  int channels = 8, ctas = 1, slots = 4;
  size_t slot_kib = 1024;
  bool v1 = false;
  bool proxy = false;  // host FIFOs and proxies
  bool sel = false;    // coded: the device selector (Shape::select)
  bool max = false;    // op max instead of sum
  std::string name() const {
    return std::to_string(channels) + "x" + std::to_string(ctas) + ", " + std::to_string(slots) + " x " +
           std::to_string(slot_kib) + " KiB" + (v1 ? ", v1 slices" : "") + (proxy ? ", proxy" : "") +
           (sel ? ", sel" : "") + (max ? ", max" : "");
  }
};

/// "C:G:SLOT_KIB:K[:v1][:proxy][:sel][:max],..." (commas or spaces between shapes); false on a malformed one.
bool parse_shapes(const std::string& list, std::vector<Shape>* out) {
  std::string tok;
  for (size_t i = 0; i <= list.size(); ++i) {
    if (i < list.size() && list[i] != ',' && list[i] != ' ') {
      tok += list[i];
      continue;
    }
    if (tok.empty()) continue;
    Shape sh;
    int used = 0;
    bool ok = std::sscanf(tok.c_str(), "%d:%d:%zu:%d%n", &sh.channels, &sh.ctas, &sh.slot_kib, &sh.slots, &used) == 4;
    for (std::string rest = ok ? tok.substr(size_t(used)) : ""; ok && !rest.empty();) {  // ":v1", ":proxy", ...
      const size_t end = rest.find(':', 1);
      const std::string flag = rest.substr(0, end);
      if (flag == ":v1")
        sh.v1 = true;
      else if (flag == ":proxy")
        sh.proxy = true;
      else if (flag == ":sel")
        sh.sel = true;
      else if (flag == ":max")
        sh.max = true;
      else
        ok = false;
      rest = end == std::string::npos ? "" : rest.substr(end);
    }
    if (!ok) {
      std::fprintf(stderr, "bad shape '%s' (C:G:SLOT_KIB:K, then any of :v1 :proxy :sel :max)\n", tok.c_str());
      return false;
    }
    out->push_back(sh);
    tok.clear();
  }
  return !out->empty();
}

struct Row {
  double ms = 0, ratio = 1;
  bool ok = false, ran = false;
};

unsigned long long count_diff(const void* a, const void* b, size_t bytes, unsigned long long* d_nd) {
  CK(cudaMemset(d_nd, 0, 8));
  diff_kernel<<<1024, 256>>>(static_cast<const uint32_t*>(a), static_cast<const uint32_t*>(b), bytes / 4, d_nd);
  CK(cudaGetLastError());
  unsigned long long nd = 0;
  CK(cudaMemcpy(&nd, d_nd, 8, cudaMemcpyDeviceToHost));
  return nd;
}

}  // namespace

int main(int argc, char** argv) {
  size_t mib = 64, slot_kib = 1024;
  int N = 4, channels = 8, ctas = 1, slots = 4, reps = 5, warm = 2, proxy = 0;
  double rel = 1e-3;
  std::string md_path, shape_list;
  const bool args_ok = BenchArgs()
                           .add("--mib", &mib)
                           .add("--ranks", &N)
                           .add("--shapes", &shape_list)
                           .add("--channels", &channels)
                           .add("--ctas", &ctas)
                           .add("--slot-kib", &slot_kib)
                           .add("--slots", &slots)
                           .add("--proxy", &proxy)
                           .add("--rel", &rel)
                           .add("--reps", &reps)
                           .add("--warm", &warm)
                           .add("--md", &md_path)
                           .parse(argc, argv);
  if (!args_ok) return 2;
  std::vector<Shape> shapes;
  if (shape_list.empty()) {
    Shape sh;
    sh.channels = std::max(1, channels);
    sh.ctas = std::max(1, ctas);
    sh.slot_kib = slot_kib;
    sh.slots = slots;
    shapes.push_back(sh);
  } else if (!parse_shapes(shape_list, &shapes)) {
    return 2;
  }
  if (proxy) {  // each shape, then its twin with host FIFOs and proxies
    std::vector<Shape> both;
    for (const Shape& sh : shapes) {
      both.push_back(sh);
      if (!sh.proxy) {
        both.push_back(sh);
        both.back().proxy = true;
      }
    }
    shapes = both;
  }
  N = std::max(1, N);
  reps = std::max(1, reps);
  warm = std::max(0, warm);
  int dev = 0;
  CK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, dev));
  const size_t n = mib * (size_t(1) << 20) / 4, bytes = n * 4;
  std::printf("device: %s, %d SMs; %d ranks as threads, %zu MiB per rank, %zu shape(s)\n", prop.name,
              prop.multiProcessorCount, N, mib, shapes.size());

  // Per rank: floats, codes, output; the expected sums; scratch.
  std::vector<float*> x(static_cast<size_t>(N), nullptr);
  std::vector<int32_t*> q(static_cast<size_t>(N), nullptr);
  std::vector<void*> y(static_cast<size_t>(N), nullptr);
  int32_t* want = nullptr;      // the sum of the ranks' codes
  int32_t* want_max = nullptr;  // their max
  unsigned* mm = nullptr;
  unsigned long long* nd = nullptr;
  uint64_t* outliers = nullptr;
  for (int r = 0; r < N; ++r) {
    CK(cudaMalloc(&x[size_t(r)], bytes));
    CK(cudaMalloc(&q[size_t(r)], bytes));
    CK(cudaMalloc(&y[size_t(r)], bytes));
  }
  CK(cudaMalloc(&want, bytes));
  CK(cudaMalloc(&want_max, bytes));
  CK(cudaMalloc(&mm, 8));
  CK(cudaMalloc(&nd, 8));
  CK(cudaMalloc(&outliers, 8));
  // Room for rank 0's codes in slices of any shape's slot (for the ratio).
  size_t max_slices = 1, max_bytes = 1;
  for (const Shape& sh : shapes) {
    const size_t slot = sh.slot_kib * 1024, L = std::max<size_t>(1, (slot - 24) / 4), S = (n + L - 1) / L;
    max_slices = std::max(max_slices, S);
    max_bytes = std::max(max_bytes, S * slot);
  }
  uint8_t* slices = nullptr;
  uint64_t* sizes = nullptr;
  int* status = nullptr;
  CK(cudaMalloc(&slices, max_bytes));
  CK(cudaMalloc(&sizes, max_slices * 8));
  CK(cudaMalloc(&status, max_slices * 4));
  nc::DeviceCodec codec(nullptr);

  // The D2D copy of one rank's buffer.
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<double> tc;
  for (int i = 0; i < warm + reps; ++i) {
    CK(cudaEventRecord(e0));
    CK(cudaMemcpy(y[0], x[0], bytes, cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (i >= warm) tc.push_back(ms);
  }
  std::sort(tc.begin(), tc.end());
  const double copy_ms = tc[tc.size() / 2];
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  std::printf("cudaMemcpy D2D %zu MiB: %.3f ms = %.0f GB/s\n", mib, copy_ms, bytes / copy_ms / 1e6);

  // rows[shape][mode]; refused[shape]: its CTAs cannot all be resident.
  std::vector<std::vector<Row>> rows(shapes.size(), std::vector<Row>(kNumModes));
  std::vector<int> refused(shapes.size(), 0);
  bool all_ok = true;
  for (int kind = 0; kind < 2; ++kind) {
    for (int r = 0; r < N; ++r) {
      gen_kernel<<<4096, 256>>>(x[size_t(r)], n, kind, size_t(r) * n);
      CK(cudaGetLastError());
    }
    const unsigned init[2] = {0xffffffffu, 0u};
    CK(cudaMemcpy(mm, init, 8, cudaMemcpyHostToDevice));
    minmax_kernel<<<4096, 256>>>(x[0], n, mm, mm + 1);
    CK(cudaGetLastError());
    unsigned keys[2];
    CK(cudaMemcpy(keys, mm, 8, cudaMemcpyDeviceToHost));
    const double eb = rel * (double(key_to_float(keys[1])) - double(key_to_float(keys[0])));
    CK(cudaMemset(want, 0, bytes));
    for (int r = 0; r < N; ++r) {
      CL(codec.quantize_async(x[size_t(r)], ElemType::F32, n, eb, int64_t(1) << 24, q[size_t(r)], ElemType::I32,
                              outliers, nullptr, 0));
      add_kernel<<<4096, 256>>>(want, q[size_t(r)], n);
      CK(cudaGetLastError());
      if (r == 0) {
        CK(cudaMemcpy(want_max, q[0], bytes, cudaMemcpyDeviceToDevice));
      } else {
        max_kernel<<<4096, 256>>>(want_max, q[size_t(r)], n);
        CK(cudaGetLastError());
      }
    }
    CK(cudaDeviceSynchronize());
    for (size_t si = 0; si < shapes.size(); ++si) {
      const Shape& sh = shapes[si];
      const size_t slot = sh.slot_kib * 1024;
      for (int mi = 0; mi < kNumModes; ++mi) {
        const Mode& m = kModes[mi];
        if (m.data != kind || refused[si]) continue;
        Row& row = rows[si][size_t(mi)];
        // One abort word for the group; with proxies one per rank (as ranks on separate hosts).
        std::vector<std::unique_ptr<nc::RingAbort>> aborts;
        for (int r = 0; r < (sh.proxy ? N : 1); ++r) {
          aborts.push_back(std::make_unique<nc::RingAbort>());
          CK(cudaError_t(aborts.back()->status()));
        }
        std::vector<std::unique_ptr<nc::PersistentRing>> rings;
        for (int r = 0; r < N; ++r) {
          nc::PersistentRing::Options o;
          o.rank = r;
          o.nranks = N;
          o.channels = sh.channels;
          o.ctas_per_channel = sh.ctas;
          o.type = m.type;
          o.coded = m.coded;
          o.predictor = m.pred;
          o.slot_bytes = slot;
          o.slots = sh.slots;
          o.timeout_ns = 20'000'000'000ull;
          o.first_version_slices = sh.v1;
          o.fifo_in_host_memory = sh.proxy;
          o.select = m.coded && sh.sel;
          o.op = sh.max ? nc::ReduceOp::Max : nc::ReduceOp::Sum;
          rings.push_back(std::make_unique<nc::PersistentRing>(o, aborts[sh.proxy ? size_t(r) : 0].get()));
          if (rings.back()->status() == nc::PersistentRing::kNotResident) {
            std::printf("%-22s refused: %d ranks x %d CTAs = %d CTAs, at most %d resident\n", sh.name().c_str(), N,
                        sh.channels * sh.ctas, N * sh.channels * sh.ctas, rings.back()->max_resident_ctas());
            refused[si] = rings.back()->max_resident_ctas();
            break;
          }
          CL(rings.back()->status());
        }
        if (refused[si]) continue;
        if (m.coded) {
          const size_t L = std::max<size_t>(1, (slot - 24) / 4), S = (n + L - 1) / L;
          if (sh.sel) {
            CL(codec.encode_slices_select_async(q[0], ElemType::I32, n, uint32_t(L),
                                                ncclz::codec::fast_select_options(), slices, slot, sizes, status));
          } else {
            CL(codec.encode_slices_async(q[0], ElemType::I32, n, uint32_t(L), m.pred, 0, 0, slices, slot, sizes,
                                         status));
          }
          CK(cudaDeviceSynchronize());
          std::vector<uint64_t> sz(S);
          CK(cudaMemcpy(sz.data(), sizes, S * 8, cudaMemcpyDeviceToHost));
          uint64_t coded = 0;
          for (uint64_t v : sz) coded += v;
          row.ratio = double(bytes) / double(coded);
        }
        // Device FIFOs: each kernel writes into the next rank's. Host FIFOs:
        // each rank's proxy over in-process connections (declared after the
        // rings: stopped and destroyed before them).
        std::vector<std::unique_ptr<ncclz::transport::PersistentProxy>> proxies;
        if (!sh.proxy) {
          for (int r = 0; r < N; ++r) rings[size_t(r)]->connect(rings[size_t((r + 1) % N)]->fifo());
        } else if (N > 1) {
          auto links = ncclz::transport::local_ring_channels(N, sh.channels, sh.slots, slot);
          for (int r = 0; r < N; ++r) {
            ncclz::transport::PersistentProxy::Fifos f;
            f.inbox = static_cast<uint8_t*>(rings[size_t(r)]->fifo_host());
            f.outbox = static_cast<uint8_t*>(rings[size_t(r)]->outbox_host());
            f.channels = sh.channels;
            f.slots = sh.slots;
            f.slot_bytes = slot;
            f.abort_word = aborts[size_t(r)]->host_ptr();
            ncclz::transport::PersistentProxy::Options po;
            po.rank = r;
            po.timeout = std::chrono::seconds(20);
            proxies.push_back(std::make_unique<ncclz::transport::PersistentProxy>(f, po));
            proxies.back()->start(std::move(links[size_t(r)]));
          }
        }
        // One call of every rank at once, timed from the release of the threads.
        auto call = [&]() {
          std::atomic<int> ready{0};
          std::atomic<bool> go{false};
          std::vector<int> rc(size_t(N), -1);
          std::vector<std::chrono::steady_clock::time_point> done(static_cast<size_t>(N));
          std::vector<std::thread> ts;
          for (int r = 0; r < N; ++r) {
            ts.emplace_back([&, r] {
              const void* src = m.type == ElemType::F32 ? static_cast<const void*>(x[size_t(r)]) : q[size_t(r)];
              ++ready;
              while (!go.load()) std::this_thread::yield();
              int e = rings[size_t(r)]->all_reduce_async(src, y[size_t(r)], n);
              nc::RingReport rep;
              if (e == 0) e = rings[size_t(r)]->synchronize(&rep);
              if (e != 0)
                std::fprintf(stderr, "%s %s rank %d: error %d (ring error %d, codec status %d, peer %d, step %u)\n",
                             sh.name().c_str(), m.name, r, e, rep.error, rep.codec_status, rep.peer, rep.step);
              rc[size_t(r)] = e;
              done[size_t(r)] = std::chrono::steady_clock::now();
            });
          }
          while (ready.load() < N) std::this_thread::yield();
          const auto t0 = std::chrono::steady_clock::now();
          go = true;
          for (auto& t : ts) t.join();
          for (int e : rc)
            if (e != 0) return -1.0;  // a rank failed (it said why): the shape's row fails, the sweep goes on
          const auto t1 = *std::max_element(done.begin(), done.end());
          return std::chrono::duration<double, std::milli>(t1 - t0).count();
        };
        for (int r = 0; r < N; ++r)  // no result of an earlier run left, and no two ranks alike before the call
          CK(cudaMemset(y[size_t(r)], 0xA0 + r, bytes));
        bool ok = call() >= 0;
        for (int r = 0; r < N; ++r) {
          const unsigned long long d = m.type == ElemType::F32
                                           ? count_diff(y[size_t(r)], y[0], bytes, nd)
                                           : count_diff(y[size_t(r)], sh.max ? want_max : want, bytes, nd);
          if (d)
            std::printf("  rank %d: %llu elements differ from the %s\n", r, d,
                        m.type == ElemType::F32 ? "rank 0's"
                        : sh.max                ? "exact max"
                                                : "exact sum");
          ok &= d == 0;
        }
        std::vector<double> t;
        for (int i = 0; i < warm && ok; ++i) ok = call() >= 0;
        for (int i = 0; i < reps && ok; ++i) {
          t.push_back(call());
          ok = t.back() >= 0;
        }
        for (auto& p : proxies) p->request_stop();  // all first: no proxy fails on a peer's close
        for (size_t r = 0; r < proxies.size(); ++r) {
          const std::string pe = proxies[r]->stop();
          if (!pe.empty())
            std::fprintf(stderr, "%s %s rank %zu's proxy: %s\n", sh.name().c_str(), m.name, r, pe.c_str());
        }
        row.ok = ok;
        row.ran = true;
        all_ok &= ok;
        if (!ok) {
          std::printf("%-22s %-8s %-12s FAILED\n", sh.name().c_str(), kDataNames[m.data], m.name);
          continue;
        }
        std::sort(t.begin(), t.end());
        row.ms = t[t.size() / 2];
        const double busbw = 2.0 * (N - 1) / N * double(bytes) / row.ms / 1e6;
        std::printf(
            "%-22s %-8s %-12s ratio %6.2f check %s | all_reduce %.3f ms, bus %.0f GB/s, %.2fx the D2D copy's time\n",
            sh.name().c_str(), kDataNames[m.data], m.name, row.ratio, ok ? "ok" : "FAILED", row.ms, busbw,
            row.ms / copy_ms);
        std::fflush(stdout);
      }
    }
  }
  // One row per shape: every mode's time, raw float32's bus bandwidth.
  std::string table = "| shape (channels x CTAs, slots) | CTAs per rank | check |";
  for (const Mode& m : kModes) table += std::string(" ") + kDataNames[m.data] + " " + m.name + " ms |";
  table += " raw float32 bus GB/s | coded none / raw int32 |\n|---|---|---|";
  for (int mi = 0; mi < kNumModes; ++mi) table += "---|";
  table += "---|---|\n";
  for (size_t si = 0; si < shapes.size(); ++si) {
    const Shape& sh = shapes[si];
    char cell[160];
    std::snprintf(cell, sizeof cell, "| %s | %d |", sh.name().c_str(), sh.channels * sh.ctas);
    table += cell;
    if (refused[si]) {
      std::snprintf(cell, sizeof cell, " refused: %d CTAs > %d resident |", N * sh.channels * sh.ctas, refused[si]);
      table += cell;
      for (int mi = 0; mi < kNumModes + 2; ++mi) table += " - |";
      table += "\n";
      continue;
    }
    bool ok = true;
    for (const Row& r : rows[si]) ok &= r.ok;
    table += ok ? " ok |" : " FAILED |";
    for (const Row& r : rows[si]) {
      std::snprintf(cell, sizeof cell, " %.3f |", r.ms);
      table += cell;
    }
    const Row& f32 = rows[si][3];
    std::snprintf(cell, sizeof cell, " %.0f | %.2f |\n", 2.0 * (N - 1) / N * double(bytes) / f32.ms / 1e6,
                  rows[si][0].ms / rows[si][2].ms);
    table += cell;
  }
  char title[400];
  std::snprintf(title, sizeof title,
                "Persistent ring all_reduce, %s, %d ranks as threads, %zu MiB int32/float32 per rank, rel %g; "
                "ratios: gaussian none %.2f, smooth delta1 %.2f (first shape's slot); D2D copy %.3f ms\n\n",
                prop.name, N, mib, rel, rows[0][0].ratio, rows[0][1].ratio, copy_ms);
  std::printf("\n%s%s", title, table.c_str());
  if (!md_path.empty()) {
    if (FILE* f = std::fopen(md_path.c_str(), "w")) {
      std::fprintf(f, "%s%s", title, table.c_str());
      std::fclose(f);
    }
  }
  for (int r = 0; r < N; ++r) {
    cudaFree(x[size_t(r)]);
    cudaFree(q[size_t(r)]);
    cudaFree(y[size_t(r)]);
  }
  cudaFree(want);
  cudaFree(want_max);
  cudaFree(slices);
  cudaFree(sizes);
  cudaFree(status);
  cudaFree(mm);
  cudaFree(nd);
  cudaFree(outliers);
  std::printf(all_ok ? "all checks passed\n" : "CHECK FAILED\n");
  return all_ok ? 0 : 1;
}
