// Test helper shared by the device-buffer communicator tests
// (test_cuda_comm.cpp, test_cuda_comm_random.cpp): the collectives as one
// enum, inputs of every type, a call of every rank with each rank's buffers
// on a device or in host memory, and the float64 reference of its output.
// Built with CUDA and in the CPU emulator (tools/cuda_emu), like those files.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "codec/quantizer.hpp"
#include "cuda_test_util.hpp"
#include "ncclz/communicator.hpp"
#include "ncclz/cuda_support.hpp"
#include "ncclz/error.hpp"
#include "prims/float8.hpp"
#include "test_ranks.hpp"

namespace ncclz_test::comm_calls {

using namespace ncclz;

/// RingShift (not in kAllOps): a group of a send to r+1 and a recv from r-1 (Communicator::group).
enum class Op { AllReduce, ReduceScatter, AllGather, Broadcast, Reduce, Gather, Scatter, AllToAll, RingShift };
inline constexpr Op kAllOps[] = {Op::AllReduce, Op::ReduceScatter, Op::AllGather, Op::Broadcast,
                                 Op::Reduce,    Op::Gather,        Op::Scatter,   Op::AllToAll};
inline constexpr int kRoot = 1;

inline const char* name(Op o) {
  switch (o) {
    case Op::AllReduce: return "all_reduce";
    case Op::ReduceScatter: return "reduce_scatter";
    case Op::AllGather: return "all_gather";
    case Op::Broadcast: return "broadcast";
    case Op::Reduce: return "reduce";
    case Op::Gather: return "gather";
    case Op::Scatter: return "scatter";
    case Op::RingShift: return "group ring shift";
    default: return "all_to_all";
  }
}
inline bool reduces(Op o) { return o == Op::AllReduce || o == Op::ReduceScatter || o == Op::Reduce; }
/// Whether rank r has an output (reduce and gather: the root only).
inline bool has_output(Op o, int r) { return (o != Op::Reduce && o != Op::Gather) || r == kRoot; }

inline size_t esize(DataType t) { return dtype_size(t); }

/// Element i of a buffer of type t as a double.
inline double value_at(DataType t, const std::vector<uint8_t>& b, size_t i) {
  switch (t) {
    case DataType::F64: {
      double v;
      std::memcpy(&v, b.data() + 8 * i, 8);
      return v;
    }
    case DataType::BF16: {
      codec::Bf16 v;
      std::memcpy(&v.bits, b.data() + 2 * i, 2);
      return codec::to_double(v);
    }
    case DataType::F16: {
      codec::F16 v;
      std::memcpy(&v.bits, b.data() + 2 * i, 2);
      return codec::to_double(v);
    }
    case DataType::I32: {
      int32_t v;
      std::memcpy(&v, b.data() + 4 * i, 4);
      return double(v);
    }
    case DataType::U32: {
      uint32_t v;
      std::memcpy(&v, b.data() + 4 * i, 4);
      return double(v);
    }
    case DataType::U64: {
      uint64_t v;
      std::memcpy(&v, b.data() + 8 * i, 8);
      return double(v);
    }
    case DataType::I8: return double(int8_t(b[i]));
    case DataType::F8E4M3: return prims::F8E4M3::widen(b[i]);
    case DataType::F8E5M2: return prims::F8E5M2::widen(b[i]);
    default: {
      float v;
      std::memcpy(&v, b.data() + 4 * i, 4);
      return v;
    }
  }
}

inline void put_value(DataType t, std::vector<uint8_t>& b, size_t i, double x) {
  switch (t) {
    case DataType::F64: std::memcpy(b.data() + 8 * i, &x, 8); break;
    case DataType::BF16: {
      const codec::Bf16 v = codec::from_double<codec::Bf16>(x);
      std::memcpy(b.data() + 2 * i, &v.bits, 2);
      break;
    }
    case DataType::F16: {
      const codec::F16 v = codec::from_double<codec::F16>(x);
      std::memcpy(b.data() + 2 * i, &v.bits, 2);
      break;
    }
    case DataType::I32: {
      const int32_t v = int32_t(std::lround(x * 1000));  // distinct integers of both signs
      std::memcpy(b.data() + 4 * i, &v, 4);
      break;
    }
    // Integers of both signs as the type's bits: the unsigned types' negative
    // ones are near their top, where a signed order disagrees.
    case DataType::U32: {
      const uint32_t v = uint32_t(int32_t(std::lround(x * 1000)));
      std::memcpy(b.data() + 4 * i, &v, 4);
      break;
    }
    case DataType::U64: {
      const uint64_t v = uint64_t(int64_t(std::llround(x * 1000)));
      std::memcpy(b.data() + 8 * i, &v, 8);
      break;
    }
    case DataType::I8: b[i] = uint8_t(int64_t(std::llround(x * 20))); break;
    case DataType::U8: b[i] = uint8_t(int64_t(std::llround(x * 4))); break;  // about 5 bits of entropy
    case DataType::F8E4M3: b[i] = prims::F8E4M3::narrow(float(x)); break;
    case DataType::F8E5M2: b[i] = prims::F8E5M2::narrow(float(x)); break;
    default: {
      const float v = float(x);
      std::memcpy(b.data() + 4 * i, &v, 4);
    }
  }
}

/// Rank r's input of n elements: a smooth field plus noise, different per rank.
inline std::vector<uint8_t> input(DataType t, size_t n, int r, unsigned seed) {
  std::mt19937 g(seed * 131u + unsigned(r));
  std::normal_distribution<double> noise(0, 0.05);
  std::vector<uint8_t> b(n * esize(t));
  for (size_t i = 0; i < n; ++i) put_value(t, b, i, std::sin(0.01 * double(i) + r) * (1 + r) + noise(g));
  return b;
}

/// Elements each rank's input and output buffers hold in `o` on `nranks` ranks of `count`.
inline size_t in_count(Op o, size_t count, int nranks) {
  return o == Op::ReduceScatter || o == Op::Scatter || o == Op::AllToAll ? count * size_t(nranks) : count;
}
inline size_t out_count(Op o, size_t count, int nranks) {
  return o == Op::AllGather || o == Op::Gather || o == Op::AllToAll ? count * size_t(nranks) : count;
}

struct Result {
  std::vector<uint8_t> out;
  CallStats stats;
  std::string error;  ///< the exception's message, "" if none
};

/// Runs `o` on every rank of R; rank r's buffers on CUDA device dev[r], in
/// host memory where dev[r] < 0 (the rank's thread's current device is set to
/// it first, as a framework's rank does).
inline std::vector<Result> run(Ranks& R, Op o, DataType t, RedOp op, const Compression& c, size_t count,
                               const std::vector<std::vector<uint8_t>>& in, const std::vector<int>& dev) {
  std::vector<Result> res(size_t(R.size()));
  R.run([&](int r, Communicator& comm) {
    const int N = comm.size();
    const size_t es = esize(t), ni = in_count(o, count, N), no = out_count(o, count, N);
    Result& x = res[size_t(r)];
    std::unique_ptr<DevBuf> dsend, drecv;
    std::vector<uint8_t> hsend = in[size_t(r)], hrecv(no * es);
    const void* send = hsend.data();
    void* recv = hrecv.data();
    if (dev[size_t(r)] >= 0) {
      if (cudaSetDevice(dev[size_t(r)]) != cudaSuccess) throw Error("cudaSetDevice " + std::to_string(dev[size_t(r)]));
      dsend = std::make_unique<DevBuf>(ni * es);
      ncclz_test::to_device(dsend->get(), hsend);
      drecv = std::make_unique<DevBuf>(no * es);
      send = dsend->get();
      recv = drecv->get();
      set_buffer_device(dev[size_t(r)]);
    }
    try {
      switch (o) {
        case Op::AllReduce: comm.all_reduce(send, recv, count, t, op, c, &x.stats); break;
        case Op::ReduceScatter: comm.reduce_scatter(send, recv, count, t, op, c, &x.stats); break;
        case Op::AllGather: comm.all_gather(send, recv, count, t, c, &x.stats); break;
        case Op::Broadcast: comm.broadcast(const_cast<void*>(send), count, t, kRoot, c, &x.stats); break;
        case Op::Reduce: comm.reduce(send, recv, count, t, op, kRoot, c, &x.stats); break;
        case Op::Gather: comm.gather(send, recv, count, t, kRoot, c, &x.stats); break;
        case Op::Scatter: comm.scatter(send, recv, count, t, kRoot, c, &x.stats); break;
        case Op::AllToAll: comm.all_to_all(send, recv, count, t, c, &x.stats); break;
        case Op::RingShift: {
          PeerCall out, in;  // (their buffers: the thread's buffer device)
          out.buf = const_cast<void*>(send);
          out.peer = (r + 1) % N;
          in.send = false;
          in.buf = recv;
          in.peer = (r + N - 1) % N;
          for (PeerCall* pc : {&out, &in}) {
            pc->count = count;
            pc->type = t;
            pc->compression = c;
          }
          comm.group({out, in}, &x.stats);
          break;
        }
      }
    } catch (const std::exception& e) {
      x.error = e.what();
    }
    set_buffer_device(-1);
    const void* result = o == Op::Broadcast ? send : recv;
    if (dev[size_t(r)] >= 0) {
      x.out = from_device(result, no * es);
    } else {
      x.out.assign(static_cast<const uint8_t*>(result), static_cast<const uint8_t*>(result) + no * es);
    }
  });
  return res;
}

/// The same with rank r's buffers on device 0 where dev[r], else in host memory.
inline std::vector<Result> run(Ranks& R, Op o, DataType t, RedOp op, const Compression& c, size_t count,
                               const std::vector<std::vector<uint8_t>>& in, const std::vector<bool>& dev) {
  std::vector<int> ordinal(dev.size());
  for (size_t r = 0; r < dev.size(); ++r) ordinal[r] = dev[r] ? 0 : -1;
  return run(R, o, t, op, c, count, in, ordinal);
}

/// The float64 reference of rank r's output.
inline std::vector<double> reference(Op o, DataType t, RedOp op, size_t count, int N, int r,
                                     const std::vector<std::vector<uint8_t>>& in) {
  const size_t no = out_count(o, count, N);
  std::vector<double> ref(no, 0.0);
  for (size_t i = 0; i < no; ++i) {
    if (o == Op::AllGather || o == Op::Gather) {
      ref[i] = value_at(t, in[i / count], i % count);
    } else if (o == Op::Broadcast) {
      ref[i] = value_at(t, in[kRoot], i);
    } else if (o == Op::Scatter) {
      ref[i] = value_at(t, in[kRoot], size_t(r) * count + i);
    } else if (o == Op::AllToAll) {
      ref[i] = value_at(t, in[i / count], size_t(r) * count + i % count);
    } else if (o == Op::RingShift) {
      ref[i] = value_at(t, in[size_t((r + N - 1) % N)], i);
    } else {
      const size_t j = o == Op::ReduceScatter ? size_t(r) * count + i : i;
      ref[i] = value_at(t, in[0], j);
      for (int q = 1; q < N; ++q) {
        const double v = value_at(t, in[size_t(q)], j);
        ref[i] = op == RedOp::Max ? std::max(ref[i], v) : op == RedOp::Min ? std::min(ref[i], v) : ref[i] + v;
      }
      if (op == RedOp::Avg) ref[i] /= N;
    }
  }
  return ref;
}

/// Checks rank r's lossy result against the float64 reference on every
/// element: within the bound it reports, which is at most the requested E.
inline void expect_within_bound(const Result& d, Op o, DataType t, RedOp op, size_t count, int N, int r,
                                const std::vector<std::vector<uint8_t>>& in, double E) {
  const auto ref = reference(o, t, op, count, N, r, in);
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::fabs(value_at(t, d.out, i) - ref[i]));
  EXPECT_LE(worst, d.stats.error_bound * (1 + 1e-9)) << "max error " << worst;
  EXPECT_LE(d.stats.error_bound, E * (1 + 1e-12));
}

/// Slots of 4 KiB; larger slices of 16 KiB where `large` (which the device
/// path then takes: NCCLZ_SPARSE_SLICE_BYTES), else none.
/// `direct`: false turns the direct schedules off (CommConfig::direct_from_bytes
/// = 0), which only host buffers take (peer memory).
inline Ranks make_ranks(int n, bool large = false, bool direct = true) {
  return Ranks(n, [large, direct](int, CommConfig& cfg) {
    cfg.slot_bytes = 4096;
    cfg.sparse_slice_bytes = large ? 16384 : 4096;
    if (!direct) cfg.direct_from_bytes = 0;
  });
}

}  // namespace ncclz_test::comm_calls
