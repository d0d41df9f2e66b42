// Throughput of the device codec (cpp/include/ncclz/cuda_codec.hpp) on one
// GPU: quantize + Block encode and Block decode + dequantize of float32 data,
// next to a cudaMemcpy device-to-device of the same bytes, in one run.
//
//   gpu_codec_bench [--mib 256] [--rel 1e-3] [--reps 10] [--warm 3] [--slice 262144]
//                   [--kernels 1234] [--select 1] [--json out.json] [--md out.md]
//
// --kernels: which slice kernels (DeviceCodec::set_kernels) get a row each,
// one after the other on the same data: "1234" (default) all four (4 = the
// CTA slice coder, one CTA per slice: cuda/cta_slice.cuh, the persistent
// kernels' coder), or any subset ("2", "34"). Where v1 ran first, every later
// row's slices are also compared with v1's, byte for byte ("same bytes as
// v1"). The v3 and v4 rows also time the fused calls (v4: the CTA coder's),
// quantize_encode_slices_async (floats to slices) and
// decode_dequantize_slices_async (slices to floats), their slices compared
// with v1's and their values with dequantize_async's ("fused" columns).
// Then, per dataset, the selecting encodes (the device selector,
// cuda/select_kernels.cu): encode_slices_select_async of the quantized codes
// and the fused quantize_encode_slices_select_async, default EncodeOptions:
// the choices per slice, the ratio, their time, the round trip through
// decode_slices_async, and every slice that chose Block with predictor p
// compared byte for byte with the v1 kernels' slice for p ("select" rows;
// --select 0 leaves them out).
//
// Datasets (generated on the device): "gaussian" (N(0,1), hashed Box-Muller)
// and "smooth" (a sum of slow sines). Bound: abs E = rel * (max - min), grid
// half step eb = E (the container's small slack is not applied here).
// Throughput = float32 input bytes / median time (events, after warm-up).
// memcpy: bytes / time and, in brackets, (read + written) / time.
// Every round trip is checked (codes equal, every element within eb or an
// outlier) before anything is timed; a failed check is reported and the
// program exits non-zero.
// Built with -DNCCLZ_BUILD_GPU_BENCH=ON (tools/gpu_session.sh).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "codec/slice.hpp"
#include "gpu_bench_util.cuh"
#include "ncclz/cuda_codec.hpp"

using ncclz::codec::ElemType;
using ncclz::codec::Predictor;
namespace nc = ncclz::cuda;

namespace {

// Counts the bytes where the slices of two encodes differ (sizes included).
__global__ void diff_kernel(const uint8_t* a, const uint8_t* b, const uint64_t* sa, const uint64_t* sb, size_t S,
                            size_t slot, unsigned long long* ndiff) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < S * slot; i += size_t(gridDim.x) * blockDim.x) {
    const size_t k = i / slot, j = i - k * slot;
    const bool bad = (j == 0 && sa[k] != sb[k]) || (j < sa[k] && a[i] != b[i]);
    if (bad) atomicAdd(ndiff, 1ull);
  }
}

// Counts the bytes where slices of `a` whose header says (codec, pred) differ
// from b's (sizes included), and those slices.
__global__ void diff_choice_kernel(const uint8_t* a, const uint8_t* b, const uint64_t* sa, const uint64_t* sb, size_t S,
                                   size_t slot, uint8_t codec, uint8_t pred, unsigned long long* ndiff,
                                   unsigned long long* nslices) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < S * slot; i += size_t(gridDim.x) * blockDim.x) {
    const size_t k = i / slot, j = i - k * slot;
    const uint8_t* h = a + k * slot;
    if (sa[k] < 24 || h[4] != codec || h[6] != pred) continue;
    if (j == 0) atomicAdd(nslices, 1ull);
    const bool bad = (j == 0 && sa[k] != sb[k]) || (j < sa[k] && a[i] != b[i]);
    if (bad) atomicAdd(ndiff, 1ull);
  }
}

struct Timer {
  cudaEvent_t a, b;
  Timer() {
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
  }
  ~Timer() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  // Median milliseconds of `reps` runs of f after `warm` warm-up runs.
  double median_ms(const std::function<void()>& f, int warm, int reps) {
    for (int i = 0; i < warm; ++i) f();
    CK(cudaDeviceSynchronize());
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
      CK(cudaEventRecord(a));
      f();
      CK(cudaEventRecord(b));
      CK(cudaEventSynchronize(b));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, a, b));
      t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  }
};

struct Row {
  std::string data, pred;
  int kernels = 2;
  int same_as_v1 = -1;  // -1: not compared
  int fused_same_as_v1 = -1;
  double ratio = 0, enc_ms = 0, dec_ms = 0, q_ms = 0, e_ms = 0, d_ms = 0, dq_ms = 0;
  double fenc_ms = 0, fdec_ms = 0;  // fused calls (v3 rows), 0: not run
  uint64_t outliers = 0, bytes = 0;
  bool ok = false;
};

// A selecting encode's row (per dataset).
struct SelRow {
  std::string data, choices;
  double ratio = 0, enc_ms = 0, fenc_ms = 0;
  unsigned long long block_slices = 0;  // slices that chose Block, compared with v1's
  int same_as_v1 = -1;
  bool ok = false;
};

}  // namespace

int main(int argc, char** argv) {
  size_t mib = 256;
  double rel = 1e-3;
  int reps = 10, warm = 3;
  uint32_t L = 1u << 18;
  std::string json_path, md_path, kernel_list = "1234";
  int select = 1;
  const bool args_ok = BenchArgs()
                           .add("--mib", &mib)
                           .add("--rel", &rel)
                           .add("--reps", &reps)
                           .add("--warm", &warm)
                           .add("--slice", &L)
                           .add("--kernels", &kernel_list)
                           .add("--select", &select)
                           .add("--json", &json_path)
                           .add("--md", &md_path)
                           .parse(argc, argv);
  if (!args_ok) return 2;
  reps = std::max(1, reps);
  warm = std::max(0, warm);
  int dev = 0;
  CK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, dev));
  std::printf("device: %s, %d SMs, %.1f GiB, L2 %d MiB\n", prop.name, prop.multiProcessorCount,
              prop.totalGlobalMem / 1073741824.0, prop.l2CacheSize >> 20);

  const size_t n = mib * (size_t(1) << 20) / 4;
  const size_t bytes = n * 4;
  const size_t S = (n + L - 1) / L, slot = nc::slice_slot_bytes(ElemType::I32, L);
  // The codec, on the legacy default stream, its scratch sized up front: no
  // call below allocates.
  nc::DeviceCodec codec(nullptr);
  CL(codec.reserve(n, L));
  float *x, *y, *x2;
  int32_t *q, *q2;
  uint8_t *slots, *slots_v1;
  uint64_t *sizes, *sizes_v1, *count, *count2, *idx;
  unsigned long long* ndiff;
  int* status;
  unsigned* mm;
  const size_t idx_cap = n / 64 + 1024;
  CK(cudaMalloc(&x, bytes));
  CK(cudaMalloc(&x2, bytes));
  CK(cudaMalloc(&y, bytes));
  CK(cudaMalloc(&q, bytes));
  CK(cudaMalloc(&q2, bytes));
  CK(cudaMalloc(&slots, S * slot));
  CK(cudaMalloc(&sizes, S * 8));
  CK(cudaMalloc(&slots_v1, S * slot));
  CK(cudaMalloc(&sizes_v1, S * 8));
  CK(cudaMalloc(&ndiff, 8));
  CK(cudaMalloc(&status, S * 4));
  CK(cudaMalloc(&count, 8));
  CK(cudaMalloc(&count2, 8));
  CK(cudaMalloc(&idx, idx_cap * 8));
  CK(cudaMalloc(&mm, 8));
  Timer timer;

  // cudaMemcpy device to device of the same bytes (the reference).
  const double copy_ms =
      timer.median_ms([&] { CK(cudaMemcpyAsync(x2, x, bytes, cudaMemcpyDeviceToDevice)); }, warm, reps);
  const double copy_gbs = bytes / copy_ms / 1e6;
  std::printf("cudaMemcpy D2D %zu MiB: %.3f ms = %.0f GB/s (read+write %.0f GB/s)\n", mib, copy_ms, copy_gbs,
              2 * copy_gbs);

  std::vector<Row> rows;
  std::vector<SelRow> sel_rows;
  bool all_ok = true;
  for (int kind = 0; kind < 2; ++kind) {
    gen_kernel<<<4096, 256>>>(x, n, kind, 0);
    CK(cudaGetLastError());
    const unsigned init[2] = {0xffffffffu, 0u};
    CK(cudaMemcpy(mm, init, 8, cudaMemcpyHostToDevice));
    minmax_kernel<<<4096, 256>>>(x, n, mm, mm + 1);
    unsigned keys[2];
    CK(cudaMemcpy(keys, mm, 8, cudaMemcpyDeviceToHost));
    const double lo = key_to_float(keys[0]), hi = key_to_float(keys[1]);
    const double eb = rel * (hi - lo);
    for (Predictor p : {Predictor::None, Predictor::Delta1, Predictor::Delta2}) {
      bool have_v1 = false;
      for (const char kc : kernel_list) {
        if (kc < '1' || kc > '4') continue;
        Row r;
        r.kernels = kc - '0';
        codec.set_kernels(r.kernels);
        r.data = kind == 0 ? "gaussian" : "smooth";
        r.pred = p == Predictor::None ? "none" : p == Predictor::Delta1 ? "delta1" : "delta2";
        const int64_t limit = int64_t(1) << 20;
        auto quant = [&] {
          CL(codec.quantize_async(x, ElemType::F32, n, eb, limit, q, ElemType::I32, count, idx, idx_cap));
        };
        auto enc = [&] { CL(codec.encode_slices_async(q, ElemType::I32, n, L, p, 0, 0, slots, slot, sizes, status)); };
        auto dec = [&] { CL(codec.decode_slices_async(slots, slot, sizes, n, L, ElemType::I32, q2, status)); };
        auto deq = [&] {
          CL(codec.dequantize_async(q2, ElemType::I32, n, eb, y, ElemType::F32));
          CL(codec.scatter_outliers_async(x, ElemType::F32, idx, count, idx_cap, y));
        };
        // Bytes where this row's slices differ from v1's (sizes included).
        auto differs_from_v1 = [&] {
          CK(cudaMemset(ndiff, 0, 8));
          diff_kernel<<<4096, 256>>>(slots, slots_v1, sizes, sizes_v1, S, slot, ndiff);
          CK(cudaGetLastError());
          unsigned long long nd = 0;
          CK(cudaMemcpy(&nd, ndiff, 8, cudaMemcpyDeviceToHost));
          if (nd) std::printf("  %llu bytes differ from the v1 kernels' slices\n", nd);
          return nd;
        };
        auto fenc = [&] {
          CL(codec.quantize_encode_slices_async(x, ElemType::F32, n, eb, limit, ElemType::I32, L, p, 0, 0, slots, slot,
                                                sizes, status, count2));
        };
        auto fdec = [&] {
          CL(codec.decode_dequantize_slices_async(slots, slot, sizes, n, L, ElemType::I32, eb, y, ElemType::F32,
                                                  status));
        };
        // Check once, untimed.
        quant();
        enc();
        CK(cudaDeviceSynchronize());
        std::vector<uint64_t> sz(S);
        std::vector<int> st(S);
        CK(cudaMemcpy(sz.data(), sizes, S * 8, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(st.data(), status, S * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(&r.outliers, count, 8, cudaMemcpyDeviceToHost));
        bool ok = r.outliers <= idx_cap;
        for (size_t k = 0; k < S; ++k) {
          ok &= st[k] == 0;
          r.bytes += sz[k];
        }
        if (r.kernels == 1) {
          CK(cudaMemcpy(slots_v1, slots, S * slot, cudaMemcpyDeviceToDevice));
          CK(cudaMemcpy(sizes_v1, sizes, S * 8, cudaMemcpyDeviceToDevice));
          have_v1 = true;
        } else if (have_v1) {
          r.same_as_v1 = differs_from_v1() == 0;
          ok &= r.same_as_v1 == 1;
        }
        CK(cudaMemset(q2, 0xA5, bytes));
        dec();
        deq();
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(st.data(), status, S * 4, cudaMemcpyDeviceToHost));
        for (size_t k = 0; k < S; ++k) ok &= st[k] == 0;
        {
          std::vector<int32_t> a(n), b(n);
          std::vector<float> xa(n), ya(n);
          CK(cudaMemcpy(a.data(), q, bytes, cudaMemcpyDeviceToHost));
          CK(cudaMemcpy(b.data(), q2, bytes, cudaMemcpyDeviceToHost));
          CK(cudaMemcpy(xa.data(), x, bytes, cudaMemcpyDeviceToHost));
          CK(cudaMemcpy(ya.data(), y, bytes, cudaMemcpyDeviceToHost));
          ok &= a == b;
          size_t bad = 0;
          for (size_t i = 0; i < n; ++i) bad += !(std::fabs(double(xa[i]) - double(ya[i])) <= eb);
          if (bad) std::printf("  %zu elements outside the bound\n", bad);
          ok &= bad == 0;
        }
        if (r.kernels >= 3) {  // the fused calls: same slices, same outliers, values within the bound
          fenc();
          CK(cudaDeviceSynchronize());
          uint64_t fout = 0;
          CK(cudaMemcpy(&fout, count2, 8, cudaMemcpyDeviceToHost));
          CK(cudaMemcpy(st.data(), status, S * 4, cudaMemcpyDeviceToHost));
          bool fok = fout == r.outliers;
          for (size_t k = 0; k < S; ++k) fok &= st[k] == 0;
          if (have_v1) {
            r.fused_same_as_v1 = differs_from_v1() == 0;
            fok &= r.fused_same_as_v1 == 1;
          }
          CK(cudaMemset(y, 0xA5, bytes));
          fdec();
          CK(cudaDeviceSynchronize());
          CK(cudaMemcpy(st.data(), status, S * 4, cudaMemcpyDeviceToHost));
          for (size_t k = 0; k < S; ++k) fok &= st[k] == 0;
          // The values must be dequantize_async's of the decoded codes (q2), bit
          // for bit (outliers included: the fused path has no indices to
          // scatter; a caller with outliers falls back).
          CL(codec.dequantize_async(q2, ElemType::I32, n, eb, x2, ElemType::F32));
          CK(cudaDeviceSynchronize());
          std::vector<float> xa(n), ya(n);
          CK(cudaMemcpy(xa.data(), x2, bytes, cudaMemcpyDeviceToHost));
          CK(cudaMemcpy(ya.data(), y, bytes, cudaMemcpyDeviceToHost));
          const size_t bad = std::memcmp(xa.data(), ya.data(), bytes) != 0;
          if (bad) std::printf("  fused: values differ from dequantize_async's\n");
          if (!fok)
            std::printf("  fused calls: check FAILED (outliers %llu vs %llu)\n", (unsigned long long)fout,
                        (unsigned long long)r.outliers);
          ok &= fok && bad == 0;
        }
        r.ok = ok;
        all_ok &= ok;
        r.ratio = double(bytes) / double(r.bytes);
        r.q_ms = timer.median_ms(quant, warm, reps);
        r.e_ms = timer.median_ms(enc, warm, reps);
        r.enc_ms = timer.median_ms(
            [&] {
              quant();
              enc();
            },
            warm, reps);
        r.d_ms = timer.median_ms(dec, warm, reps);
        r.dq_ms = timer.median_ms(deq, warm, reps);
        r.dec_ms = timer.median_ms(
            [&] {
              dec();
              deq();
            },
            warm, reps);
        if (r.kernels >= 3) {
          r.fenc_ms = timer.median_ms(fenc, warm, reps);
          r.fdec_ms = timer.median_ms(fdec, warm, reps);
        }
        std::printf(
            "v%d %-8s %-6s ratio %7.2f outliers %llu check %s | quantize+encode %.3f ms = %.0f GB/s "
            "(q %.3f, enc %.3f) | decode+dequantize %.3f ms = %.0f GB/s (dec %.3f, deq %.3f)\n",
            r.kernels, r.data.c_str(), r.pred.c_str(), r.ratio, (unsigned long long)r.outliers, ok ? "ok" : "FAILED",
            r.enc_ms, bytes / r.enc_ms / 1e6, r.q_ms, r.e_ms, r.dec_ms, bytes / r.dec_ms / 1e6, r.d_ms, r.dq_ms);
        if (r.kernels >= 3)
          std::printf(
              "v%d %-8s %-6s fused | quantize_encode_slices %.3f ms = %.0f GB/s | "
              "decode_dequantize_slices %.3f ms = %.0f GB/s\n",
              r.kernels, r.data.c_str(), r.pred.c_str(), r.fenc_ms, bytes / r.fenc_ms / 1e6, r.fdec_ms,
              bytes / r.fdec_ms / 1e6);
        std::fflush(stdout);
        rows.push_back(r);
      }
    }
    if (select) {
      SelRow sr;
      sr.data = kind == 0 ? "gaussian" : "smooth";
      const int64_t limit = int64_t(1) << 20;
      const ncclz::codec::EncodeOptions opt;  // the CPU's defaults (allow_rans = false on the device)
      CL(codec.quantize_async(x, ElemType::F32, n, eb, limit, q, ElemType::I32, count, idx, idx_cap));
      auto senc = [&] {
        CL(codec.encode_slices_select_async(q, ElemType::I32, n, L, opt, slots, slot, sizes, status));
      };
      auto sfenc = [&] {
        CL(codec.quantize_encode_slices_select_async(x, ElemType::F32, n, eb, limit, ElemType::I32, L, opt, slots, slot,
                                                     sizes, status, count2));
      };
      // Check once, untimed (the first call also grows the scratch).
      sfenc();
      CK(cudaDeviceSynchronize());
      std::vector<uint64_t> fsz(S);
      CK(cudaMemcpy(fsz.data(), sizes, S * 8, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(slots_v1, slots, S * slot, cudaMemcpyDeviceToDevice));  // the fused call's slices
      senc();
      CK(cudaDeviceSynchronize());
      std::vector<uint64_t> sz(S);
      std::vector<int> st(S);
      CK(cudaMemcpy(sz.data(), sizes, S * 8, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(st.data(), status, S * 4, cudaMemcpyDeviceToHost));
      bool ok = fsz == sz;
      if (!ok) std::printf("  select: the fused call's sizes differ from quantize + select\n");
      uint64_t total = 0;
      int tally[8][8] = {};
      for (size_t k = 0; k < S; ++k) {
        ok &= st[k] == 0;
        total += sz[k];
        uint8_t h[24] = {};
        CK(cudaMemcpy(h, slots + k * slot, 24, cudaMemcpyDeviceToHost));
        ++tally[h[4] & 7][h[6] & 7];
      }
      {
        unsigned long long nd = 0;
        CK(cudaMemset(ndiff, 0, 8));
        diff_kernel<<<4096, 256>>>(slots, slots_v1, sizes, sizes, S, slot, ndiff);
        CK(cudaMemcpy(&nd, ndiff, 8, cudaMemcpyDeviceToHost));
        if (nd) std::printf("  select: the fused call's slices differ in %llu bytes\n", nd);
        ok &= nd == 0;
      }
      static const char* codec_names[] = {"raw", "block", "rans", "floatexp", "sparse", "?", "?", "?"};
      static const char* pred_names[] = {"none", "delta1", "delta2", "lorenzo2d", "lorenzo3d", "?", "?", "?"};
      for (int c = 0; c < 8; ++c)
        for (int pp = 0; pp < 8; ++pp)
          if (tally[c][pp])
            sr.choices += std::string(sr.choices.empty() ? "" : " ") + codec_names[c] + "/" + pred_names[pp] + ":" +
                          std::to_string(tally[c][pp]);
      sr.ratio = double(bytes) / double(total);
      // Round trip: decode_slices_async gives the codes back.
      CK(cudaMemset(q2, 0xA5, bytes));
      CL(codec.decode_slices_async(slots, slot, sizes, n, L, ElemType::I32, q2, status));
      CK(cudaDeviceSynchronize());
      CK(cudaMemcpy(st.data(), status, S * 4, cudaMemcpyDeviceToHost));
      for (size_t k = 0; k < S; ++k) ok &= st[k] == 0;
      {
        std::vector<int32_t> a(n), b(n);
        CK(cudaMemcpy(a.data(), q, bytes, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(b.data(), q2, bytes, cudaMemcpyDeviceToHost));
        if (a != b) std::printf("  select: decoded codes differ\n");
        ok &= a == b;
      }
      // Slices that chose Block with predictor p: v1's bytes for p.
      sr.same_as_v1 = 1;
      for (Predictor p : {Predictor::None, Predictor::Delta1, Predictor::Delta2}) {
        codec.set_kernels(1);
        CL(codec.encode_slices_async(q, ElemType::I32, n, L, p, 0, 0, slots_v1, slot, sizes_v1, status));
        unsigned long long* cnt2 = reinterpret_cast<unsigned long long*>(count2);
        CK(cudaMemset(ndiff, 0, 8));
        CK(cudaMemset(cnt2, 0, 8));
        diff_choice_kernel<<<4096, 256>>>(slots, slots_v1, sizes, sizes_v1, S, slot, 1, uint8_t(p), ndiff, cnt2);
        CK(cudaGetLastError());
        unsigned long long nd = 0, ns = 0;
        CK(cudaMemcpy(&nd, ndiff, 8, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(&ns, cnt2, 8, cudaMemcpyDeviceToHost));
        sr.block_slices += ns;
        if (nd) {
          std::printf("  select: %llu bytes of Block/%d slices differ from v1's\n", nd, int(p));
          sr.same_as_v1 = 0;
        }
      }
      ok &= sr.same_as_v1 == 1;
      codec.set_kernels(2);
      sr.ok = ok;
      all_ok &= ok;
      sr.enc_ms = timer.median_ms(senc, warm, reps);
      sr.fenc_ms = timer.median_ms(sfenc, warm, reps);
      std::printf(
          "select %-8s ratio %7.2f check %s | choices %s | encode_slices_select %.3f ms = %.0f GB/s | "
          "quantize_encode_slices_select %.3f ms = %.0f GB/s | %llu Block slices same as v1: %s\n",
          sr.data.c_str(), sr.ratio, ok ? "ok" : "FAILED", sr.choices.c_str(), sr.enc_ms, bytes / sr.enc_ms / 1e6,
          sr.fenc_ms, bytes / sr.fenc_ms / 1e6, sr.block_slices, sr.same_as_v1 ? "yes" : "NO");
      std::fflush(stdout);
      sel_rows.push_back(sr);
    }
  }

  if (!json_path.empty()) {
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (f) {
      std::fprintf(
          f, "{\n  \"device\": \"%s\", \"sms\": %d, \"mib\": %zu, \"rel\": %g, \"slice_len\": %u, \"reps\": %d,\n",
          prop.name, prop.multiProcessorCount, mib, rel, L, reps);
      std::fprintf(f, "  \"memcpy_d2d_ms\": %.4f, \"memcpy_d2d_gbs\": %.1f,\n  \"rows\": [\n", copy_ms, copy_gbs);
      for (size_t i = 0; i < rows.size(); ++i) {
        const Row& r = rows[i];
        std::fprintf(f,
                     "    {\"kernels\": %d, \"same_bytes_as_v1\": %s, \"data\": \"%s\", \"predictor\": \"%s\", "
                     "\"check_ok\": %s, \"ratio\": %.4f, \"outliers\": %llu, "
                     "\"encode_ms\": %.4f, \"encode_gbs\": %.1f, \"quantize_ms\": %.4f, \"block_encode_ms\": %.4f, "
                     "\"decode_ms\": %.4f, \"decode_gbs\": %.1f, \"block_decode_ms\": %.4f, \"dequantize_ms\": %.4f, "
                     "\"fused_same_bytes_as_v1\": %s, \"fused_encode_ms\": %.4f, \"fused_encode_gbs\": %.1f, "
                     "\"fused_decode_ms\": %.4f, \"fused_decode_gbs\": %.1f}%s\n",
                     r.kernels,
                     r.same_as_v1 < 0 ? "null"
                     : r.same_as_v1   ? "true"
                                      : "false",
                     r.data.c_str(), r.pred.c_str(), r.ok ? "true" : "false", r.ratio, (unsigned long long)r.outliers,
                     r.enc_ms, bytes / r.enc_ms / 1e6, r.q_ms, r.e_ms, r.dec_ms, bytes / r.dec_ms / 1e6, r.d_ms,
                     r.dq_ms,
                     r.fused_same_as_v1 < 0 ? "null"
                     : r.fused_same_as_v1   ? "true"
                                            : "false",
                     r.fenc_ms, r.fenc_ms > 0 ? bytes / r.fenc_ms / 1e6 : 0.0, r.fdec_ms,
                     r.fdec_ms > 0 ? bytes / r.fdec_ms / 1e6 : 0.0, i + 1 < rows.size() ? "," : "");
      }
      std::fprintf(f, "  ],\n  \"select\": [\n");
      for (size_t i = 0; i < sel_rows.size(); ++i) {
        const SelRow& r = sel_rows[i];
        std::fprintf(f,
                     "    {\"data\": \"%s\", \"check_ok\": %s, \"ratio\": %.4f, \"choices\": \"%s\", "
                     "\"select_encode_ms\": %.4f, \"select_encode_gbs\": %.1f, \"fused_select_encode_ms\": %.4f, "
                     "\"fused_select_encode_gbs\": %.1f, \"block_slices\": %llu, \"block_same_bytes_as_v1\": %s}%s\n",
                     r.data.c_str(), r.ok ? "true" : "false", r.ratio, r.choices.c_str(), r.enc_ms,
                     bytes / r.enc_ms / 1e6, r.fenc_ms, bytes / r.fenc_ms / 1e6, r.block_slices,
                     r.same_as_v1 ? "true" : "false", i + 1 < sel_rows.size() ? "," : "");
      }
      std::fprintf(f, "  ]\n}\n");
      std::fclose(f);
    }
  }
  if (!md_path.empty()) {
    FILE* f = std::fopen(md_path.c_str(), "w");
    if (f) {
      std::fprintf(f, "# Device codec throughput (%s, %zu MiB float32, rel %g, slices of %u)\n\n", prop.name, mib, rel,
                   L);
      std::fprintf(f, "cudaMemcpy D2D: %.3f ms, %.0f GB/s (read+write %.0f GB/s). Median of %d after %d warm-ups.\n\n",
                   copy_ms, copy_gbs, 2 * copy_gbs, reps, warm);
      std::fprintf(f,
                   "| kernels | data | predictor | check | same bytes as v1 | ratio | quantize+encode GB/s | "
                   "decode+dequantize GB/s | q ms | enc ms | dec ms | deq ms | enc GB/s | dec GB/s | outliers | "
                   "fused q+enc GB/s | fused dec+deq GB/s | fused same bytes as v1 |\n"
                   "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
      auto same = [](int v) { return v < 0 ? "-" : v ? "yes" : "NO"; };
      for (const Row& r : rows) {
        char fe[32] = "-", fd[32] = "-";
        if (r.fenc_ms > 0) std::snprintf(fe, sizeof fe, "%.0f", bytes / r.fenc_ms / 1e6);
        if (r.fdec_ms > 0) std::snprintf(fd, sizeof fd, "%.0f", bytes / r.fdec_ms / 1e6);
        std::fprintf(
            f,
            "| v%d | %s | %s | %s | %s | %.2f | %.0f | %.0f | %.3f | %.3f | %.3f | %.3f | %.0f | %.0f | %llu | "
            "%s | %s | %s |\n",
            r.kernels, r.data.c_str(), r.pred.c_str(), r.ok ? "ok" : "FAILED", same(r.same_as_v1), r.ratio,
            bytes / r.enc_ms / 1e6, bytes / r.dec_ms / 1e6, r.q_ms, r.e_ms, r.d_ms, r.dq_ms, bytes / r.e_ms / 1e6,
            bytes / r.d_ms / 1e6, (unsigned long long)r.outliers, fe, fd, same(r.fused_same_as_v1));
      }
      if (!sel_rows.empty()) {
        std::fprintf(f,
                     "\nSelecting encodes (default EncodeOptions; codes from quantize_async, or fused from the "
                     "floats):\n\n| data | check | ratio | choices (codec/predictor:slices) | select enc GB/s | "
                     "fused q+select GB/s | Block slices | same bytes as v1 |\n|---|---|---|---|---|---|---|---|\n");
        for (const SelRow& r : sel_rows)
          std::fprintf(f, "| %s | %s | %.2f | %s | %.0f | %.0f | %llu | %s |\n", r.data.c_str(), r.ok ? "ok" : "FAILED",
                       r.ratio, r.choices.c_str(), bytes / r.enc_ms / 1e6, bytes / r.fenc_ms / 1e6, r.block_slices,
                       r.same_as_v1 ? "yes" : "NO");
      }
      std::fprintf(f,
                   "\nIssue 21's targets (H100/H200): encode >= 1200 GB/s, decode >= 1600 GB/s of float32 input "
                   "(input bytes / time).\n");
      std::fclose(f);
    }
  }
  for (void* p :
       {static_cast<void*>(x), static_cast<void*>(x2), static_cast<void*>(y), static_cast<void*>(q),
        static_cast<void*>(q2), static_cast<void*>(slots), static_cast<void*>(sizes), static_cast<void*>(slots_v1),
        static_cast<void*>(sizes_v1), static_cast<void*>(ndiff), static_cast<void*>(status), static_cast<void*>(count),
        static_cast<void*>(count2), static_cast<void*>(idx), static_cast<void*>(mm)})
    CK(cudaFree(p));
  return all_ok ? 0 : 1;
}
