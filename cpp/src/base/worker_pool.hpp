// A small pool of persistent threads for a communicator's channels and the
// API layer's element-wise passes, so a call does not pay a thread start per
// channel (tens of microseconds each).
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ncclz::base {

class WorkerPool {
 public:
  /// `nworkers` threads besides the caller's.
  explicit WorkerPool(int nworkers);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  /// Runs fn(i) for i = 0..n-1 concurrently (i = 0 on the calling thread) and
  /// returns when all have finished. n - 1 must not exceed the worker count;
  /// fn must not throw. One run at a time (the communicator serializes calls).
  /// `idle`, if given, runs on the caller every kIdleMs while it waits for
  /// the workers after its own part (the channels: the interrupt check).
  void run(int n, const std::function<void(int)>& fn, const std::function<void()>& idle = nullptr);
  static constexpr int kIdleMs = 20;
  int workers() const { return int(threads_.size()); }

 private:
  void loop(int index);

  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(int)>* job_ = nullptr;
  int njob_ = 0;  // parts of the current job (part 0 is the caller's)
  unsigned long long generation_ = 0;
  int pending_ = 0;  // worker parts not finished yet
  bool stop_ = false;
};

/// Runs fn(begin, end, part) over `parts` contiguous parts of [0, n) on the
/// pool (part 0 on the caller); small n uses fewer parts.
template <class Fn>
void parallel_for(WorkerPool* pool, int parts, size_t n, Fn&& fn) {
  constexpr size_t kMinPerPart = size_t(1) << 17;
  if (!pool) parts = 1;
  if (parts > (pool ? pool->workers() + 1 : 1)) parts = pool->workers() + 1;
  if (parts < 1) parts = 1;
  if (n / kMinPerPart < size_t(parts)) parts = int(n / kMinPerPart > 0 ? n / kMinPerPart : 1);
  if (parts == 1) {
    fn(size_t(0), n, 0);
    return;
  }
  const size_t p = size_t(parts);
  pool->run(parts, [&](int i) { fn(n * size_t(i) / p, n * size_t(i + 1) / p, i); });
}

}  // namespace ncclz::base
