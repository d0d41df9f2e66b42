// core::DeviceWork on the device codec (see cpp/src/core/device_work.hpp):
// the statistics reduction, the quantizer and dequantizer passes over a
// whole buffer, the device buffers, and each channel's slice codec.
//
// Statistics: one kernel, a grid-stride loop of kStatsBlocks CTAs that each
// reduce their elements' finite min / max and non-finite flag in shared
// memory and write one record; the host combines the records (at most
// kStatsBlocks, read back in one copy). Min and max are exact, so the
// result is the host scan's, whatever the order.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "base/env.hpp"
#include "core/device_work.hpp"
#include "device_common.cuh"
#include "ncclz/cuda_codec.hpp"
#include "ncclz/error.hpp"

namespace ncclz::core {
namespace {

using codec::ElemType;

constexpr int kStatsThreads = 256;
constexpr unsigned kStatsBlocks = 512;

/// One CTA's statistics: finite min and max, whether it saw a finite element
/// and a non-finite one (as doubles, so the record is one array).
struct StatsRecord {
  double lo, hi, any, nonfinite;
};

template <class T>
__global__ void __launch_bounds__(kStatsThreads) stats_kernel(const T* __restrict__ x, size_t n, StatsRecord* out) {
  __shared__ double s_lo[kStatsThreads], s_hi[kStatsThreads];
  __shared__ int s_any[kStatsThreads], s_bad[kStatsThreads];
  double lo = 0, hi = 0;
  int any = 0, bad = 0;
  const size_t stride = size_t(gridDim.x) * kStatsThreads;
  for (size_t i = size_t(blockIdx.x) * kStatsThreads + threadIdx.x; i < n; i += stride) {
    const double v = codec::to_double(x[i]);
    if (v == v && codec::abs_of(v) <= 1.7976931348623157e308) {
      lo = any ? (v < lo ? v : lo) : v;
      hi = any ? (v > hi ? v : hi) : v;
      any = 1;
    } else {
      bad = 1;
    }
  }
  s_lo[threadIdx.x] = lo;
  s_hi[threadIdx.x] = hi;
  s_any[threadIdx.x] = any;
  s_bad[threadIdx.x] = bad;
  __syncthreads();
  for (int w = kStatsThreads / 2; w > 0; w /= 2) {
    if (int(threadIdx.x) < w) {
      const int o = int(threadIdx.x) + w;
      if (s_any[o]) {
        if (!s_any[threadIdx.x]) {
          s_lo[threadIdx.x] = s_lo[o];
          s_hi[threadIdx.x] = s_hi[o];
        } else {
          s_lo[threadIdx.x] = s_lo[o] < s_lo[threadIdx.x] ? s_lo[o] : s_lo[threadIdx.x];
          s_hi[threadIdx.x] = s_hi[o] > s_hi[threadIdx.x] ? s_hi[o] : s_hi[threadIdx.x];
        }
        s_any[threadIdx.x] = 1;
      }
      s_bad[threadIdx.x] |= s_bad[o];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    out[blockIdx.x] = StatsRecord{s_lo[0], s_hi[0], double(s_any[0]), double(s_bad[0])};
  }
}

std::string cuda_text(int e) {
  if (e < 0) return "rejected on the host (status " + std::to_string(-e) + ")";
  return std::string(cudaGetErrorName(cudaError_t(e))) + ": " + cudaGetErrorString(cudaError_t(e)) + " (" +
         std::to_string(e) + ")";
}

void check(int e, int device, const char* what) {
  if (e != 0) {
    // A failed call leaves its error as the thread's last one; taken here,
    // so that the next launch check of this thread reports only its own.
    (void)cudaGetLastError();
    throw Error("ncclz device path (CUDA device " + std::to_string(device) + "): " + what + " failed: " + cuda_text(e));
  }
}

class DeviceWorkImpl final : public DeviceWork {
 public:
  explicit DeviceWorkImpl(int device) : dev_(device) {
    check(dc_.status(), dev_, "creating a stream");
    check(int(cudaMalloc(reinterpret_cast<void**>(&d_stats_), kStatsBlocks * sizeof(StatsRecord))), dev_, "cudaMalloc");
    check(int(cudaMallocHost(reinterpret_cast<void**>(&h_stats_), kStatsBlocks * sizeof(StatsRecord))), dev_,
          "cudaMallocHost");
    check(int(cudaMalloc(reinterpret_cast<void**>(&d_count_), sizeof(uint64_t))), dev_, "cudaMalloc");
    check(int(cudaMallocHost(reinterpret_cast<void**>(&h_count_), sizeof(uint64_t))), dev_, "cudaMallocHost");
  }
  ~DeviceWorkImpl() override {
    cudaSetDevice(dev_);
    dc_.synchronize();
    // The slice codecs wait for their streams, then the streams go (a second
    // ring's codecs use their channel's stream).
    for (Channel& c : ch_) {
      for (Coder& k : c.coders) k.codec.reset();
      if (c.quant.dc) c.quant.dc->synchronize();
      c.quant.dc.reset();
    }
    for (Channel& c : ch_) {
      if (c.stream) cudaStreamDestroy(c.stream);
    }
    ch_.clear();
    for (void* p : buf_) cudaFree(p);
    cudaFree(d_stats_);
    cudaFreeHost(h_stats_);
    cudaFree(d_count_);
    cudaFreeHost(h_count_);
  }

  int device() const override { return dev_; }

  bound::DataStats scan(ElemType t, const void* d_x, size_t n) override {
    here();
    bound::DataStats s;
    if (n == 0) return s;
    const unsigned blocks = unsigned(std::min<size_t>(kStatsBlocks, (n + kStatsThreads - 1) / kStatsThreads));
    const cudaStream_t st = stream();
    const bool ok = cuda::detail::with_float_type(t, [&](auto tv) {
      using T = decltype(tv);
      stats_kernel<T><<<blocks, kStatsThreads, 0, st>>>(static_cast<const T*>(d_x), n, d_stats_);
    });
    if (!ok) throw InvalidArgument("ncclz device path: statistics of a type that is not a float");
    check(int(cudaGetLastError()), dev_, "the statistics kernel");
    check(int(cudaMemcpyAsync(h_stats_, d_stats_, blocks * sizeof(StatsRecord), cudaMemcpyDeviceToHost, st)), dev_,
          "reading the statistics back");
    check(dc_.synchronize(), dev_, "the statistics kernel");
    for (unsigned b = 0; b < blocks; ++b) {
      const StatsRecord& r = h_stats_[b];
      s.nonfinite = s.nonfinite || r.nonfinite != 0;
      if (r.any == 0) continue;
      s.lo = s.any_finite ? std::min(s.lo, r.lo) : r.lo;
      s.hi = s.any_finite ? std::max(s.hi, r.hi) : r.hi;
      s.any_finite = true;
    }
    if (s.any_finite) s.maxabs = std::max(std::fabs(s.lo), std::fabs(s.hi));
    return s;
  }

  size_t quantize(ElemType t, double eb, double check_eb, int64_t limit, bool wide, const void* d_x, size_t n,
                  void* d_q, bool exact_check) override {
    here();
    return quantize_with(dc_, d_count_, h_count_, t, eb, check_eb, limit, wide, d_x, n, d_q, exact_check);
  }

  void dequantize(ElemType t, bool wide, const void* d_q, size_t n, double step, void* d_out) override {
    here();
    dequantize_with(dc_, t, wide, d_q, n, step, d_out);
  }

  size_t quantize_on(int c, ElemType t, double eb, double check_eb, int64_t limit, bool wide, const void* d_x, size_t n,
                     void* d_q, bool exact_check) override {
    here();
    Quantizer& q = quantizer(c);
    return quantize_with(*q.dc, q.d_count, q.h_count, t, eb, check_eb, limit, wide, d_x, n, d_q, exact_check);
  }

  void dequantize_on(int c, ElemType t, bool wide, const void* d_q, size_t n, double step, void* d_out) override {
    here();
    dequantize_with(*quantizer(c).dc, t, wide, d_q, n, step, d_out);
  }

  void* codes(int i, size_t bytes) override {
    here();
    if (bytes > cap_[i]) {
      cudaFree(buf_[i]);
      buf_[i] = nullptr;
      cap_[i] = 0;
      check(int(cudaMalloc(&buf_[i], bytes)), dev_, "cudaMalloc of the codes");
      cap_[i] = bytes;
    }
    return buf_[i];
  }

  void to_host(void* h, const void* d, size_t bytes) override {
    here();
    if (bytes == 0) return;
    check(int(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, stream())), dev_, "copying to the host");
    check(dc_.synchronize(), dev_, "copying to the host");
  }

  void to_device(void* d, const void* h, size_t bytes) override {
    here();
    if (bytes == 0) return;
    check(int(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, stream())), dev_, "copying to the device");
    check(dc_.synchronize(), dev_, "copying to the device");
  }

  void copy(void* dst, const void* src, size_t bytes) override {
    here();
    if (bytes == 0 || dst == src) return;
    check(int(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream())), dev_, "copying on the device");
    check(dc_.synchronize(), dev_, "copying on the device");
  }

  void divide(ElemType t, void* d, size_t count, int n) override {
    here();
    if (count == 0) return;
    check(cuda::divide_values_async(stream(), t, d, count, n), dev_, "dividing on the device");
    check(dc_.synchronize(), dev_, "dividing on the device");
  }

  prims::DeviceSlices* slices(int c, const prims::PrimsArgs& a, size_t slot_bytes, size_t slice_elems) override {
    here();  // the channel's thread: its current device
    Channel& ch = channel(c);
    // Two slice codecs per channel, the least recently used one replaced: calls
    // that alternate between two wires (ring slices and the lanes' ordinary
    // ones, int32 and int64 codes) do not make a codec every call.
    Coder* use = nullptr;
    for (Coder& k : ch.coders) {
      if (k.codec && k.type == a.type && k.mode == a.mode && k.int_sum == a.int_sum && k.op == a.op &&
          k.slot_bytes == slot_bytes && k.slice_elems == slice_elems && same_enc(k.enc, a.enc)) {
        use = &k;
      }
    }
    if (use == nullptr) {
      use = &ch.coders[0];
      for (Coder& k : ch.coders) {
        if (!k.codec || k.used < use->used) use = &k;
      }
      use->codec.reset();
      use->codec = std::make_unique<prims::DeviceSliceCodec>(a.type, a.mode, a.enc, a.int_sum, slot_bytes, slice_elems,
                                                             stream_of(c), &pins_);
      use->codec->set_fused_step(fused_step_);
      // Values (an uncompressed call's Raw slices, a lossless call's coded
      // floats): reduced in their own type; a lossy max / min's codes: their
      // max / min. Codes of a sum (int_sum): added.
      if (!codec::is_code_type(a.type) || !a.int_sum) use->codec->set_value_reduction(a.op);
      use->type = a.type;
      use->mode = a.mode;
      use->int_sum = a.int_sum;
      use->op = a.op;
      use->slot_bytes = slot_bytes;
      use->slice_elems = slice_elems;
      use->enc = a.enc;
    }
    use->used = ++ch.tick;
    return use->codec.get();
  }

  void* scratch(int c, size_t bytes) override {
    Channel& ch = channel(c);
    if (bytes > ch.scratch_cap) {
      ch.scratch.reset();
      void* p = nullptr;
      check(int(cudaMalloc(&p, bytes)), dev_, "cudaMalloc of a channel's scratch");
      ch.scratch.reset(p);
      ch.scratch_cap = bytes;
    }
    return ch.scratch.get();
  }

  void pin_slots(const transport::SlotMemory& m) override {
    here();
    pins_.pin(m.data, m.bytes);
  }
  size_t pinned_bytes() const override { return pins_.pinned_bytes(); }

 private:
  struct CudaFree {
    void operator()(void* p) const { cudaFree(p); }
  };
  struct Coder {
    std::unique_ptr<prims::DeviceSliceCodec> codec;
    ElemType type = ElemType::U8;
    prims::WireMode mode = prims::WireMode::Raw;
    bool int_sum = false;
    RedOp op = RedOp::Sum;
    size_t slot_bytes = 0, slice_elems = 0;
    codec::EncodeOptions enc;
    uint64_t used = 0;  ///< the channel's tick when last used
  };
  /// A channel's quantizer on its stream (quantize_on, dequantize_on): a
  /// DeviceCodec and the outlier count's words.
  struct Quantizer {
    std::unique_ptr<cuda::DeviceCodec> dc;
    uint64_t* d_count = nullptr;
    uint64_t* h_count = nullptr;
    ~Quantizer() {
      cudaFree(d_count);
      cudaFreeHost(h_count);
    }
  };
  struct Channel {
    cudaStream_t stream = nullptr;  ///< made on first use; its entries' codecs code on it
    Quantizer quant;                ///< made on first use
    Coder coders[2];
    uint64_t tick = 0;
    std::unique_ptr<void, CudaFree> scratch;
    size_t scratch_cap = 0;
  };

  static bool same_enc(const codec::EncodeOptions& x, const codec::EncodeOptions& y) {
    return x.choice == y.choice && x.predictor == y.predictor && x.row == y.row && x.plane == y.plane &&
           x.allow_rans == y.allow_rans;
  }

  /// Channel c's state. Channels are used by their own threads at the same
  /// time, so the table has a fixed size and never moves.
  Channel& channel(int c) {
    if (c < 0 || c >= int(kMaxChannels)) throw Error("ncclz device path: channel " + std::to_string(c));
    return ch_[size_t(c)];
  }
  void here() const { cudaSetDevice(dev_); }
  cudaStream_t stream() const { return static_cast<cudaStream_t>(dc_.stream()); }
  /// The stream of entry c's codecs: its channel's (a second ring's entry
  /// shares channel c's), made on first use by the channel's own thread.
  cudaStream_t stream_of(int c) {
    Channel& ch = channel(c >= kSecondRing ? c - kSecondRing : c);
    if (!ch.stream) check(int(cudaStreamCreateWithFlags(&ch.stream, cudaStreamNonBlocking)), dev_, "creating a stream");
    return ch.stream;
  }

  /// Entry c's channel's quantizer, made on first use by its thread.
  Quantizer& quantizer(int c) {
    Channel& ch = channel(c >= kSecondRing ? c - kSecondRing : c);
    if (!ch.quant.dc) {
      auto dc = std::make_unique<cuda::DeviceCodec>(stream_of(c));
      check(dc->status(), dev_, "creating a quantizer");
      check(int(cudaMalloc(reinterpret_cast<void**>(&ch.quant.d_count), sizeof(uint64_t))), dev_, "cudaMalloc");
      check(int(cudaMallocHost(reinterpret_cast<void**>(&ch.quant.h_count), sizeof(uint64_t))), dev_, "cudaMallocHost");
      ch.quant.dc = std::move(dc);
    }
    return ch.quant;
  }
  /// quantize()'s work on dc's stream: the outlier count read back.
  size_t quantize_with(cuda::DeviceCodec& dc, uint64_t* d_count, uint64_t* h_count, ElemType t, double eb,
                       double check_eb, int64_t limit, bool wide, const void* d_x, size_t n, void* d_q,
                       bool exact_check) {
    const ElemType ct = wide ? ElemType::I64 : ElemType::I32;
    check(dc.quantize_checked_async(d_x, t, n, eb, check_eb, limit, d_q, ct, d_count, exact_check), dev_, "quantizing");
    check(int(cudaMemcpyAsync(h_count, d_count, sizeof(uint64_t), cudaMemcpyDeviceToHost,
                              static_cast<cudaStream_t>(dc.stream()))),
          dev_, "reading the outlier count back");
    check(dc.synchronize(), dev_, "quantizing");
    return size_t(*h_count);
  }
  void dequantize_with(cuda::DeviceCodec& dc, ElemType t, bool wide, const void* d_q, size_t n, double step,
                       void* d_out) {
    if (n == 0) return;
    const ElemType ct = wide ? ElemType::I64 : ElemType::I32;
    check(dc.dequantize_async(d_q, ct, n, step / 2, d_out, t), dev_, "dequantizing");
    check(dc.synchronize(), dev_, "dequantizing");
  }

  static constexpr size_t kMaxChannels = 2 * size_t(kSecondRing);
  int dev_;
  prims::HostPins pins_{env::get_bool("NCCLZ_DEVICE_PIN", true)};     ///< declared before ch_: outlives the codecs
  bool fused_step_ = env::get_bool("NCCLZ_DEVICE_FUSED_STEP", true);  ///< DeviceSliceCodec::set_fused_step
  cuda::DeviceCodec dc_;
  void* buf_[3] = {nullptr, nullptr, nullptr};
  size_t cap_[3] = {0, 0, 0};
  StatsRecord* d_stats_ = nullptr;
  StatsRecord* h_stats_ = nullptr;
  uint64_t* d_count_ = nullptr;
  uint64_t* h_count_ = nullptr;
  std::vector<Channel> ch_ = std::vector<Channel>(kMaxChannels);
};

}  // namespace

std::unique_ptr<DeviceWork> DeviceWork::create(int device) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // not left for a later launch check to find
    n = 0;
  }
  if (device < 0 || device >= n) {
    throw InvalidArgument("ncclz device path: CUDA device " + std::to_string(device) + " is not there (" +
                          std::to_string(n) + " visible)");
  }
  check(int(cudaSetDevice(device)), device, "cudaSetDevice");
  return std::make_unique<DeviceWorkImpl>(device);
}

}  // namespace ncclz::core
