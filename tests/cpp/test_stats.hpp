// Test helper shared by the GoogleTest files: the statistics scan's answer
// for a float vector, written out (what core::scan gives it).
#pragma once

#include <cmath>
#include <vector>

#include "core/lossy_plan.hpp"

namespace ncclz_test {

inline ncclz::core::DataStats stats_of(const std::vector<float>& x) {
  ncclz::core::DataStats s;
  s.any_finite = true;
  s.lo = s.hi = x[0];
  for (float v : x) {
    s.lo = std::fmin(s.lo, v);
    s.hi = std::fmax(s.hi, v);
  }
  s.maxabs = std::fmax(std::fabs(s.lo), std::fabs(s.hi));
  return s;
}

}  // namespace ncclz_test
