// Test helper shared by the GoogleTest files: a connection as a K-slot FIFO
// in memory, both ends driven by (possibly different) threads, for testing
// the prims without a transport.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "ncclz/error.hpp"
#include "prims/prims.hpp"
#include "prims/reduce.hpp"
#include "transport/transport.hpp"

namespace ncclz_test {

using ncclz::transport::Clock;

/// A K-slot FIFO in memory; both ends are driven by (possibly different) threads.
struct Fifo {
  size_t slot_bytes;
  int nslots;
  std::vector<std::vector<uint8_t>> slots;
  std::vector<size_t> sizes;
  uint64_t head = 0, tail = 0;  // released / posted
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::vector<uint8_t>> log;  // every posted slot's bytes, in order
  Fifo(size_t sb, int k) : slot_bytes(sb), nslots(k), slots(size_t(k), std::vector<uint8_t>(sb)), sizes(size_t(k)) {}
};

class FakeSend : public ncclz::transport::SendConn {
 public:
  explicit FakeSend(Fifo* f) : f_(f) {}
  uint8_t* acquire(Clock::time_point deadline) override {
    std::unique_lock<std::mutex> lk(f_->mu);
    if (!f_->cv.wait_until(lk, deadline, [&] { return f_->tail - f_->head < uint64_t(f_->nslots); })) {
      throw ncclz::Timeout("fake acquire timed out");
    }
    return f_->slots[f_->tail % uint64_t(f_->nslots)].data();
  }
  void post(size_t bytes) override {
    std::lock_guard<std::mutex> lk(f_->mu);
    const size_t s = f_->tail % uint64_t(f_->nslots);
    f_->sizes[s] = bytes;
    f_->log.emplace_back(f_->slots[s].begin(), f_->slots[s].begin() + long(bytes));
    ++f_->tail;
    f_->cv.notify_all();
  }
  void flush(Clock::time_point) override {}
  size_t slot_bytes() const override { return f_->slot_bytes; }
  int peer() const override { return 1; }

 private:
  Fifo* f_;
};

class FakeRecv : public ncclz::transport::RecvConn {
 public:
  explicit FakeRecv(Fifo* f) : f_(f) {}
  ncclz::transport::SlotView wait(Clock::time_point deadline) override {
    std::unique_lock<std::mutex> lk(f_->mu);
    if (!f_->cv.wait_until(lk, deadline, [&] { return f_->tail > f_->head; }))
      throw ncclz::Timeout("fake wait timed out");
    const size_t s = f_->head % uint64_t(f_->nslots);
    return {f_->slots[s].data(), f_->sizes[s]};
  }
  bool ready() const override {
    std::lock_guard<std::mutex> lk(f_->mu);
    return f_->tail > f_->head;
  }
  void release() override {
    std::lock_guard<std::mutex> lk(f_->mu);
    ++f_->head;
    f_->cv.notify_all();
  }
  size_t slot_bytes() const override { return f_->slot_bytes; }
  int peer() const override { return 0; }

 private:
  Fifo* f_;
};

/// The prims arguments of a wire over these FIFOs: `t` elements in mode `m`,
/// reduced with `op` (integer sums as the lossy codes': int_sum), 30 s to
/// finish.
inline ncclz::prims::PrimsArgs wire_args(ncclz::codec::ElemType t, ncclz::prims::WireMode m, ncclz::RedOp op) {
  using ncclz::codec::ElemType;
  ncclz::prims::PrimsArgs pa;
  pa.type = t;
  pa.mode = m;
  pa.op = op;
  pa.reduce = ncclz::prims::reduce_fn(t, op);
  pa.int_sum = op == ncclz::RedOp::Sum && (t == ElemType::I32 || t == ElemType::I64);
  pa.raw_esize = ncclz::codec::elem_size(t);
  pa.deadline = Clock::now() + std::chrono::seconds(30);
  return pa;
}

}  // namespace ncclz_test
