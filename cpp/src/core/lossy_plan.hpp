// The runtime's lossy plan: the error budget's formulas (bound/error_budget.hpp,
// shared with the standalone codec) under the names the runtime uses, and the
// two decisions that depend on the user's Compression: the bound E of a call
// and the messages too small to compress.
#pragma once

#include <cstddef>

#include "bound/error_budget.hpp"
#include "ncclz/communicator.hpp"

namespace ncclz::core {

using bound::Combine;
using bound::DataStats;
using bound::half_ulp_bound;
using bound::LossyPlan;
using bound::plan_lossy;
using bound::plan_lossy_hier;
using bound::unit_roundoff;

/// E of the call: the abs bound, or r * (max - min) of the finite inputs (0
/// when there are none: the call then runs exactly).
double resolve_bound(const Compression& c, const DataStats& g);
/// Lossy messages under c.min_bytes run on the exact path.
void apply_min_bytes(LossyPlan& p, const Compression& c, size_t bytes);

}  // namespace ncclz::core
