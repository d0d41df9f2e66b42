// Placeholder: the codec bindings (compress/decompress/inspect) land here.
#include <nanobind/nanobind.h>
namespace nb = nanobind;
void register_codec(nb::module_& m) { (void)m; }
