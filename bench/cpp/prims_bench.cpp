// Micro-benchmark of the primitives' step routine (cpp/src/prims) on one
// core: the verbs of one ring all-reduce chunk, each over an in-memory
// connection, per wire mode. CPU time per verb for n float32 elements and the
// input GB/s it gives (4 bytes per element); the verbs are timed one after
// another in rounds (send, reduce, ..., recv; send, ...) and the median (or
// --best: fastest) round of each kept.
//
//   build: cmake -S bench/cpp -B build-bench -G Ninja && cmake --build build-bench --target prims_bench
//   run:   taskset -c 0 build-bench/prims_bench [rounds=9] [--wall] [--best] [--mode=M] [n=4194304]
//   --mode=M: only that mode (none, lossless, lossy, lossy-list), e.g. for an
//   instruction count of one mode under valgrind --tool=callgrind (deterministic,
//   where timings on a shared machine are not).
//
// Chain: rank 0 send -> rank 1 recvReduceSend -> rank 2 recvReduceCopySend
// (the owner's final sum) -> rank 3 recvCopySend (forward + decode) -> rank 4
// recv. Each rank has its own input (float32, N(0, 1) for "dense", 99% +0.0
// and N(0, 1e-3) otherwise for "sparse"). Modes, as the communicator sets
// them up:
//   none       float32 slots, reductions in float32 (WireMode::Raw)
//   lossless   float32 slices, the selector (FloatExp / Raw)
//   lossy      int32 codes at rel 1e-3 (E / 5 per rank) quantized and
//              dequantized slice by slice by core::LossyStage
//   lossy-list the sparse input, its nonzeros listed by the statistics scan
//              (core::NonzeroIndex): lists quantized, sent as Sparse slices,
//              merged, written out from lists; 8 MiB slices
// Slots: 1 MiB of data + the 24-byte header (NCCLZ_SLOT_BYTES's default).
// The same source builds against older trees (it uses only PrimsArgs, Prims,
// LossyStage's constructor and the transport's connection interface).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_timing.hpp"
#include "core/lossy_ops.hpp"
#include "core/lossy_plan.hpp"
#include "prims/prims.hpp"
#include "prims/reduce.hpp"
#include "transport/transport.hpp"

using namespace ncclz;

namespace {

// A connection whose slots are all in memory: the sender fills them one
// after the other, the receiver reads them back in order (no waiting).
class MemConn final : public transport::SendConn, public transport::RecvConn {
 public:
  MemConn(size_t slot_bytes, size_t nslots) : slot_(slot_bytes), mem_(slot_bytes * nslots + 64), bytes_(nslots) {}
  void rewind() { head_ = tail_ = 0; }
  uint8_t* acquire(transport::Clock::time_point) override { return base() + head_ * slot_; }
  void post(size_t bytes) override { bytes_[head_++] = bytes; }
  void flush(transport::Clock::time_point) override {}
  transport::SlotView wait(transport::Clock::time_point) override {
    transport::SlotView v;
    v.data = base() + tail_ * slot_;
    v.bytes = bytes_[tail_];
    return v;
  }
  void release() override { ++tail_; }
  size_t slot_bytes() const override { return slot_; }
  int peer() const override { return 0; }

 private:
  uint8_t* base() {
    return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(mem_.data()) + 63) & ~uintptr_t(63));
  }
  size_t slot_;
  std::vector<uint8_t> mem_;
  std::vector<size_t> bytes_;
  size_t head_ = 0, tail_ = 0;
};

constexpr int kRanks = 5;
const char* kVerbs[kRanks] = {"send", "recvReduceSend", "recvReduceCopySend", "recvCopySend", "recv"};

struct Result {
  std::string mode;
  double s[kRanks];
};

std::vector<std::vector<float>> make_inputs(size_t n, bool sparse) {
  std::vector<std::vector<float>> x(kRanks, std::vector<float>(n, 0.f));
  for (int r = 0; r < kRanks; ++r) {
    std::mt19937_64 g(1234 + uint64_t(r));
    std::normal_distribution<float> d(0.f, sparse ? 1e-3f : 1.f);
    std::uniform_real_distribution<double> u(0, 1);
    for (float& e : x[r]) e = !sparse || u(g) < 0.01 ? d(g) : 0.f;
  }
  return x;
}

Result run_mode(const std::string& mode, size_t n, int rounds) {
  const bool lossy = mode.rfind("lossy", 0) == 0, lists = mode == "lossy-list";
  const auto x = make_inputs(n, lists);
  const size_t slot = (lists ? size_t(8) << 20 : size_t(1) << 20) + codec::kHeaderBytes;
  const codec::ElemType wire = lossy ? codec::ElemType::I32 : codec::ElemType::F32;
  const size_t es = 4;
  const size_t nslots = n / ((slot - codec::kHeaderBytes) / es) + 2;
  std::vector<MemConn> conn;
  for (int i = 0; i + 1 < kRanks; ++i) conn.emplace_back(slot, nslots);

  // Lossy: the plan of a 5-rank sum at rel 1e-3 over every rank's input.
  core::DataStats g;
  std::vector<core::NonzeroIndex> index(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    const core::DataStats s = core::scan(DataType::F32, x[r].data(), n, nullptr, 1, lists ? &index[r] : nullptr);
    g.any_finite = true;
    g.lo = r ? std::min(g.lo, s.lo) : s.lo;
    g.hi = r ? std::max(g.hi, s.hi) : s.hi;
    g.maxabs = std::max(g.maxabs, s.maxabs);
  }
  const core::LossyPlan plan =
      core::plan_lossy(codec::ElemType::F32, core::Combine::Sum, kRanks, 1e-3 * (g.hi - g.lo), g);
  std::vector<std::vector<int32_t>> codes(kRanks, std::vector<int32_t>(n));  // address ranges of the wire buffers
  std::vector<std::vector<float>> out(kRanks, std::vector<float>(n));
  std::vector<std::unique_ptr<core::LossyStage>> stage(kRanks);
  if (lossy) {
    for (int r = 0; r < kRanks; ++r) {
      stage[r] = std::make_unique<core::LossyStage>(DataType::F32, plan, x[r].data(), codes[r].data(), out[r].data(),
                                                    codes[r].data(), 2 * plan.eb, lists ? &index[r] : nullptr, false);
    }
  }
  std::vector<std::vector<uint64_t>> scratch(kRanks, std::vector<uint64_t>(slot / 8 + 8));
  prims::ChannelStats st[kRanks];

  auto prims_of = [&](int r) {
    prims::PrimsArgs a;
    a.type = wire;
    a.mode = mode == "none" ? prims::WireMode::Raw : prims::WireMode::Coded;
    a.reduce = prims::reduce_fn(wire, RedOp::Sum);
    a.int_sum = lossy;
    a.raw_esize = 4;
    a.deadline = transport::Clock::now() + std::chrono::hours(1);
    a.stage = lossy ? stage[r].get() : nullptr;
    a.slice_bytes = slot;
    return prims::Prims(r + 1 < kRanks ? &conn[r] : nullptr, r > 0 ? &conn[r - 1] : nullptr, a, &st[r],
                        scratch[r].data());
  };
  // The verbs' buffers: the inputs (or the code ranges the stage maps), the outputs.
  auto src = [&](int r) -> const void* { return lossy ? static_cast<const void*>(codes[r].data()) : x[r].data(); };
  auto dst = [&](int r) -> void* { return lossy ? static_cast<void*>(codes[r].data()) : out[r].data(); };

  std::vector<std::vector<double>> t(kRanks);
  auto verb = [&](int r) {
    prims::Prims p = prims_of(r);
    const double a = ncclz_bench::now_seconds();
    switch (r) {
      case 0: p.send(src(0), n); break;
      case 1: p.recvReduceSend(src(1), n); break;
      case 2: p.recvReduceCopySend(src(2), dst(2), n); break;
      case 3: p.recvCopySend(dst(3), n); break;
      default: p.recv(dst(4), n); break;
    }
    t[r].push_back(ncclz_bench::now_seconds() - a);
  };
  for (int round = 0; round <= rounds; ++round) {
    for (auto& c : conn) c.rewind();
    for (int r = 0; r < kRanks; ++r) verb(r);
    if (round == 0) {
      for (auto& v : t) v.clear();  // warm-up
    }
  }
  // The result must be the same on ranks 2, 3 and 4, and near the exact sum.
  double err = 0;
  for (size_t i = 0; i < n; ++i) {
    double want = 0;
    for (int r = 0; r < 3; ++r) want += double(x[r][i]);
    err = std::max(err, std::fabs(double(out[4][i]) - want));
    if (out[4][i] != out[2][i] || out[3][i] != out[2][i]) {
      std::fprintf(stderr, "%s: ranks disagree at %zu\n", mode.c_str(), i);
      std::exit(1);
    }
  }
  const double bound = lossy ? plan.E : 1e-3;
  if (!(err <= bound)) {
    std::fprintf(stderr, "%s: error %g over %g\n", mode.c_str(), err, bound);
    std::exit(1);
  }
  Result res{mode, {}};
  for (int r = 0; r < kRanks; ++r) {
    std::sort(t[r].begin(), t[r].end());
    res.s[r] = ncclz_bench::g_best ? t[r].front() : t[r][t[r].size() / 2];
  }
  return res;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 9;
  size_t n = size_t(1) << 22;
  int pos = 0;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--mode=", 0) == 0) {
      only = a.substr(7);
    } else if (a == "--wall") {
      ncclz_bench::g_wall = true;
    } else if (a == "--best") {
      ncclz_bench::g_best = true;
    } else if (pos++ == 0) {
      rounds = std::atoi(argv[i]);
    } else {
      n = size_t(std::atoll(argv[i]));
    }
  }
  std::printf("# prims_bench: n = %zu float32 (%.1f MiB), %d rounds, %s of %s time, ms per verb (input GB/s)\n", n,
              double(n) * 4 / (1 << 20), rounds, ncclz_bench::g_best ? "fastest" : "median",
              ncclz_bench::g_wall ? "wall" : "thread CPU");
  std::printf("| mode |");
  for (const char* v : kVerbs) std::printf(" %s |", v);
  std::printf("\n|---|---|---|---|---|---|\n");
  for (const char* m : {"none", "lossless", "lossy", "lossy-list"}) {
    if (!only.empty() && only != m) continue;
    const Result r = run_mode(m, n, rounds);
    std::printf("| %s |", m);
    for (int k = 0; k < kRanks; ++k) std::printf(" %.3f (%.2f) |", 1e3 * r.s[k], double(n) * 4 / r.s[k] / 1e9);
    std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}
