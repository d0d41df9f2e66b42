// Translates ncclz's C++ exceptions into the Python exception classes that
// python/ncclz/errors.py defines (looked up at import, so the classes live in
// Python and can carry docs).
#include <nanobind/nanobind.h>

#include "ncclz/error.hpp"

namespace nb = nanobind;

void register_errors(nb::module_& m) {
  nb::module_ errors = nb::module_::import_("ncclz.errors");
  static nb::object error = errors.attr("Error");
  static nb::object invalid = errors.attr("InvalidArgumentError");
  static nb::object corrupt = errors.attr("CorruptDataError");
  static nb::object remote = errors.attr("RemoteError");
  static nb::object timeout = errors.attr("TimeoutError");
  static nb::object aborted = errors.attr("AbortedError");
  static nb::object system = errors.attr("SystemError");
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    auto raise = [](const nb::object& cls, const char* what) { PyErr_SetString(cls.ptr(), what); };
    try {
      std::rethrow_exception(p);
    } catch (const ncclz::InvalidArgument& e) {
      raise(invalid, e.what());
    } catch (const ncclz::CorruptData& e) {
      raise(corrupt, e.what());
    } catch (const ncclz::Timeout& e) {
      raise(timeout, e.what());
    } catch (const ncclz::Aborted& e) {
      raise(aborted, e.what());
    } catch (const ncclz::RemoteError& e) {
      raise(remote, e.what());
    } catch (const ncclz::SystemError& e) {
      raise(system, e.what());
    } catch (const ncclz::Error& e) {
      raise(error, e.what());
    }
  });
  (void)m;
}
