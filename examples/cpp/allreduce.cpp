// A C++ program on the ncclz C++ API (docs/C_API.md, "C++"): the ranks meet
// through the environment, all-reduce a field with an absolute error bound and
// check that bound on every element against a sum computed here in double;
// then every rank makes a call the library refuses, and catches the exception
// by its ncclz type (the library exports the exceptions' type information, so
// a catch clause in a program matches what libncclz.so throws).
//
// Built against an installed ncclz with CMake (examples/cpp/CMakeLists.txt),
// run one process per rank, e.g.:  ncclz-run -n 3 ./allreduce_cpp
// (RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT from the environment).
#include <cmath>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "ncclz/communicator.hpp"
#include "ncclz/error.hpp"

namespace {

// Rank r's input: a smooth wave whose amplitude and offset depend on the rank.
float input_at(size_t i, int r) { return float(std::cos(0.002 * double(i)) * (0.5 + r) - 0.02 * r); }

}  // namespace

int main() {
  try {
    std::unique_ptr<ncclz::Communicator> comm = ncclz::Communicator::create(ncclz::CommConfig::from_env());
    const int rank = comm->rank(), nranks = comm->size();

    const size_t n = size_t(1) << 20;
    std::vector<float> in(n), out(n);
    for (size_t i = 0; i < n; ++i) in[i] = input_at(i, rank);
    const double bound = 1e-3;
    ncclz::CallStats stats;
    comm->all_reduce(in.data(), out.data(), n, ncclz::DataType::F32, ncclz::RedOp::Sum,
                     ncclz::Compression::lossy_abs(bound), &stats);
    double max_err = 0;
    size_t over = 0;
    for (size_t i = 0; i < n; ++i) {
      double exact = 0;
      for (int r = 0; r < nranks; ++r) exact += double(input_at(i, r));
      const double err = std::fabs(double(out[i]) - exact);
      if (err > max_err) max_err = err;
      if (!(err <= bound)) ++over;  // a NaN counts as over
    }

    // A product has no lossy mode: every rank's call fails with InvalidArgument
    // (and the communicator stays usable). Caught by the derived type first:
    // landing in the base class's or std::exception's clause would mean that
    // the type the library threw is not the one this program knows.
    std::string caught = "nothing";
    try {
      comm->all_reduce(in.data(), out.data(), n, ncclz::DataType::F32, ncclz::RedOp::Prod,
                       ncclz::Compression::lossy_abs(bound));
    } catch (const ncclz::InvalidArgument& e) {
      caught = "ncclz::InvalidArgument";
      if (rank == 0) std::printf("refused as expected: %s\n", e.what());
    } catch (const ncclz::Error&) {
      caught = "ncclz::Error (not its derived type)";
    } catch (const std::exception&) {
      caught = "std::exception (not an ncclz type)";
    }
    comm->barrier();  // still usable after the refused call

    std::printf("rank %d of %d: max error %.3g <= %g (%zu over), ratio %.2f, refused call: %s\n", rank, nranks, max_err,
                bound, over, stats.ratio, caught.c_str());
    return over == 0 && caught == "ncclz::InvalidArgument" ? 0 : 2;
  } catch (const ncclz::Error& e) {
    std::fprintf(stderr, "ncclz error: %s\n", e.what());
    return 1;
  }
}
