// Progress reports of long setup waits (issue: ranks started with different
// MASTER_PORTs used to wait silently for the whole NCCLZ_TIMEOUT).
//
// A wait that lasts NCCLZ_WAIT_REPORT seconds (R, default 5; 0 turns
// reports off) says what it waits for, as a WARN line, and says it again
// after intervals of 2R, 4R, 8R, ... at most 60 s, until it ends or times
// out: with the defaults at 5, 15, 35, 75, 135, 195 and 255 s of a 300 s
// timeout (7 lines).
#pragma once

#include <algorithm>
#include <chrono>

#include "base/env.hpp"

namespace ncclz::bootstrap {

class WaitReport {
 public:
  using Clock = std::chrono::steady_clock;
  WaitReport() : start_(Clock::now()) {
    const double first = env::get_double("NCCLZ_WAIT_REPORT", 5.0, 0.0, 1e9);
    interval_ = first;
    next_ = first > 0 ? start_ + to_dur(first) : Clock::time_point::max();
  }
  /// True when a report is due now (and schedules the next one).
  bool due(Clock::time_point now = Clock::now()) {
    if (now < next_) return false;
    interval_ = std::min(interval_ * 2, 60.0);
    next_ = now + to_dur(interval_);
    return true;
  }
  /// When the next report is due (for timed waits).
  Clock::time_point next() const { return next_; }
  /// Seconds since the wait began.
  double waited(Clock::time_point now = Clock::now()) const {
    return std::chrono::duration<double>(now - start_).count();
  }

 private:
  static Clock::duration to_dur(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::min(s, 1e8)));
  }
  Clock::time_point start_, next_;
  double interval_ = 5;
};

}  // namespace ncclz::bootstrap
