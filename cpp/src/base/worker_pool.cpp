// WorkerPool (see worker_pool.hpp): a generation counter wakes the workers,
// each runs its part and the last one to finish wakes the caller.
#include "base/worker_pool.hpp"

#include <chrono>

namespace ncclz::base {

WorkerPool::WorkerPool(int nworkers) {
  for (int i = 0; i < nworkers; ++i) threads_.emplace_back([this, i] { loop(i + 1); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void WorkerPool::run(int n, const std::function<void(int)>& fn, const std::function<void()>& idle) {
  if (n > workers() + 1) n = workers() + 1;
  if (n > 1) {
    std::lock_guard<std::mutex> lk(mu_);
    job_ = &fn;
    njob_ = n;
    pending_ = n - 1;
    ++generation_;
  }
  if (n > 1) start_cv_.notify_all();
  fn(0);
  if (n > 1) {
    std::unique_lock<std::mutex> lk(mu_);
    while (!done_cv_.wait_for(lk, std::chrono::milliseconds(kIdleMs), [&] { return pending_ == 0; })) {
      if (!idle) continue;
      lk.unlock();
      idle();
      lk.lock();
    }
    job_ = nullptr;
  }
}

void WorkerPool::loop(int index) {
  unsigned long long seen = 0;
  for (;;) {
    const std::function<void(int)>* job = nullptr;
    {
      std::unique_lock<std::mutex> lk(mu_);
      start_cv_.wait(lk, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (index >= njob_) continue;  // not needed for this job
      job = job_;
    }
    (*job)(index);
    std::lock_guard<std::mutex> lk(mu_);
    if (--pending_ == 0) done_cv_.notify_one();
  }
}

}  // namespace ncclz::base
