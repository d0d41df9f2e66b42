// The ncclz._core extension module: one register_<area>() per binding file.
#include <nanobind/nanobind.h>

#include "ncclz/cuda_support.hpp"

namespace nb = nanobind;

void register_errors(nb::module_& m);
void register_codec(nb::module_& m);
void register_comm(nb::module_& m);
void register_stages(nb::module_& m);

NB_MODULE(_core, m) {
  m.doc() = "ncclz native core (thin bindings; use the ncclz package)";
  m.def("built_with_cuda", &ncclz::cuda::built_with_cuda, "True when the CUDA code was built");
  m.def("cuda_device_count", &ncclz::cuda::device_count, "Visible CUDA devices (0 without GPU or driver)");
  register_errors(m);
  register_codec(m);
  register_comm(m);
  register_stages(m);
}
