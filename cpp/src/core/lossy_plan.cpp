// The runtime's lossy plan (see lossy_plan.hpp).
#include "core/lossy_plan.hpp"

namespace ncclz::core {

double resolve_bound(const Compression& c, const DataStats& g) {
  if (c.mode == Compression::Mode::LossyAbs) return c.bound;
  return g.any_finite ? bound::relative_bound(c.bound, g.lo, g.hi) : 0.0;
}

void apply_min_bytes(LossyPlan& p, const Compression& c, size_t bytes) {
  if (p.compress && c.min_bytes && bytes < c.min_bytes) {
    p.compress = false;
    p.why_not = "message smaller than min_bytes";
  }
}

}  // namespace ncclz::core
