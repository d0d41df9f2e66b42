// A send connection that fails after a number of posts, for the tests of
// what a broken link does to a persistent ring's proxy (test_persistent_proxy.cpp
// with threads as kernels, test_cuda_persistent.cpp with kernels).
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "ncclz/error.hpp"
#include "transport/transport.hpp"

namespace ncclz_test {

/// Wraps `inner` and dies after `posts` posts: the next acquire throws
/// RemoteError ("test: the connection closed mid-call (to rank P)"), as a
/// transport whose link failed; its owner then destroys it, and with it the
/// real end (the peer sees it closed, after the slots posted before).
class DyingSend : public ncclz::transport::SendConn {
 public:
  DyingSend(std::unique_ptr<ncclz::transport::SendConn> inner, int posts)
      : inner_(std::move(inner)), left_(posts), slot_(inner_->slot_bytes()), peer_(inner_->peer()) {}
  uint8_t* acquire(ncclz::transport::Clock::time_point deadline) override {
    if (left_ == 0) {
      throw ncclz::RemoteError("test: the connection closed mid-call (to rank " + std::to_string(peer_) + ")");
    }
    return inner_->acquire(deadline);
  }
  void post(size_t bytes) override {
    inner_->post(bytes);
    --left_;
  }
  void flush(ncclz::transport::Clock::time_point deadline) override { inner_->flush(deadline); }
  size_t slot_bytes() const override { return slot_; }
  int peer() const override { return peer_; }

 private:
  std::unique_ptr<ncclz::transport::SendConn> inner_;
  int left_;
  size_t slot_;
  int peer_;
};

}  // namespace ncclz_test
