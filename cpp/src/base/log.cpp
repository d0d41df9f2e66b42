#include "base/log.hpp"

#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace ncclz::log {
namespace {

std::atomic<int> g_level{-1};  // -1: not read yet

int parse_level() {
  const char* v = std::getenv("NCCLZ_DEBUG");
  if (v == nullptr || *v == '\0') return static_cast<int>(Level::Warn);
  std::string s;
  for (const char* p = v; *p; ++p) s += static_cast<char>(std::toupper(static_cast<unsigned char>(*p)));
  if (s == "NONE" || s == "OFF") return static_cast<int>(Level::None);
  if (s == "WARN" || s == "VERSION") return static_cast<int>(Level::Warn);
  if (s == "INFO") return static_cast<int>(Level::Info);
  if (s == "TRACE") return static_cast<int>(Level::Trace);
  std::fprintf(stderr, "ncclz: WARN NCCLZ_DEBUG='%s' is not one of NONE, WARN, INFO, TRACE; using WARN\n", v);
  return static_cast<int>(Level::Warn);
}

const char* name(Level l) {
  switch (l) {
    case Level::Warn: return "WARN";
    case Level::Info: return "INFO";
    case Level::Trace: return "TRACE";
    default: return "";
  }
}

}  // namespace

Level level() {
  int l = g_level.load(std::memory_order_relaxed);
  if (l < 0) {
    int parsed = parse_level();
    g_level.compare_exchange_strong(l, parsed);
    l = g_level.load(std::memory_order_relaxed);
  }
  return static_cast<Level>(l);
}

void set_level(Level l) { g_level.store(static_cast<int>(l)); }

void write(Level l, int rank, const char* fmt, ...) {
  if (!enabled(l) || l == Level::None) return;
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  char line[2200];
  int n;
  if (rank >= 0) {
    n = std::snprintf(line, sizeof line, "ncclz rank %d: %s %s\n", rank, name(l), msg);
  } else {
    n = std::snprintf(line, sizeof line, "ncclz: %s %s\n", name(l), msg);
  }
  if (n < 0) return;
  size_t len = static_cast<size_t>(n) < sizeof line ? static_cast<size_t>(n) : sizeof line - 1;
  // One write(2) per line: lines from threads/processes do not interleave.
  ssize_t w = ::write(STDERR_FILENO, line, len);
  (void)w;
}

}  // namespace ncclz::log
