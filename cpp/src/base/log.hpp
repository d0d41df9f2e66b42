// A tiny logger honouring NCCLZ_DEBUG=NONE|WARN|INFO|TRACE (default WARN).
//
// Lines go to stderr, one write per line so that threads and processes do not
// interleave within a line:
//   ncclz rank 3: WARN refused connection from 10.0.0.7:51234: wrong token
// rank < 0 prints "ncclz: ..." (before a rank is known).
#pragma once

#include <string>

namespace ncclz::log {

enum class Level : int { None = 0, Warn = 1, Info = 2, Trace = 3 };

/// The level from NCCLZ_DEBUG (read once; an unknown value means WARN and is warned about).
Level level();
/// Overrides the level (tests).
void set_level(Level l);
inline bool enabled(Level l) { return static_cast<int>(l) <= static_cast<int>(level()); }

/// Writes one line if `l` is enabled; printf-style.
void write(Level l, int rank, const char* fmt, ...) __attribute__((format(printf, 3, 4)));

}  // namespace ncclz::log

#define NCCLZ_WARN(rank, ...) ::ncclz::log::write(::ncclz::log::Level::Warn, (rank), __VA_ARGS__)
#define NCCLZ_INFO(rank, ...)                                              \
  do {                                                                     \
    if (::ncclz::log::enabled(::ncclz::log::Level::Info))                  \
      ::ncclz::log::write(::ncclz::log::Level::Info, (rank), __VA_ARGS__); \
  } while (0)
#define NCCLZ_TRACE(rank, ...)                                              \
  do {                                                                      \
    if (::ncclz::log::enabled(::ncclz::log::Level::Trace))                  \
      ::ncclz::log::write(::ncclz::log::Level::Trace, (rank), __VA_ARGS__); \
  } while (0)
