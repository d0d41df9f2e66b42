// Environment variables, NCCL style (NCCLZ_DEBUG, NCCLZ_SOCKET_IFNAME, ...).
//
// Every variable the library reads is listed in docs/TRANSPORTS.md (transport
// and bootstrap ones) and read through these helpers, so a malformed value is
// reported the same way everywhere: InvalidArgument naming the variable, the
// value and what is expected. Explicit API arguments override the
// environment, which overrides the defaults.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ncclz::env {

/// The raw value, or nullopt when the variable is unset or empty.
std::optional<std::string> get(const char* name);
/// The value, or `def` when unset/empty.
std::string get_string(const char* name, const std::string& def);
/// An integer (decimal, or with a K/M/G suffix for powers of 1024); throws
/// InvalidArgument when malformed or outside [lo, hi].
int64_t get_int(const char* name, int64_t def, int64_t lo = INT64_MIN, int64_t hi = INT64_MAX);
/// A floating-point number; throws InvalidArgument when malformed or outside [lo, hi].
double get_double(const char* name, double def, double lo = -1e300, double hi = 1e300);
/// 1/0, true/false, yes/no, on/off (case-insensitive); throws when anything else.
bool get_bool(const char* name, bool def);

/// Parses `text` as get_int does (`what` names the source in the error).
int64_t parse_int(const std::string& text, const char* what);

}  // namespace ncclz::env
