#include "base/env.hpp"

#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "ncclz/error.hpp"

namespace ncclz::env {

std::optional<std::string> get(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::string get_string(const char* name, const std::string& def) {
  auto v = get(name);
  return v ? *v : def;
}

int64_t parse_int(const std::string& text, const char* what) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str() || errno == ERANGE) {
    throw InvalidArgument(std::string(what) + "='" + text + "' is not an integer");
  }
  int64_t mult = 1;
  if (*end != '\0') {
    switch (std::toupper(static_cast<unsigned char>(*end))) {
      case 'K': mult = int64_t(1) << 10; break;
      case 'M': mult = int64_t(1) << 20; break;
      case 'G': mult = int64_t(1) << 30; break;
      default:
        throw InvalidArgument(std::string(what) + "='" + text + "' is not an integer (allowed suffixes: K, M, G)");
    }
    ++end;
    if (*end == 'i' || *end == 'I') ++end;  // accept KiB-style "Ki"
    if (*end == 'b' || *end == 'B') ++end;
    if (*end != '\0') {
      throw InvalidArgument(std::string(what) + "='" + text + "' has trailing characters");
    }
  }
  if (v > INT64_MAX / mult || v < INT64_MIN / mult) {
    throw InvalidArgument(std::string(what) + "='" + text + "' is out of range");
  }
  return static_cast<int64_t>(v) * mult;
}

int64_t get_int(const char* name, int64_t def, int64_t lo, int64_t hi) {
  auto v = get(name);
  if (!v) return def;
  int64_t x = parse_int(*v, name);
  if (x < lo || x > hi) {
    throw InvalidArgument(std::string(name) + "=" + *v + " is outside the allowed range [" + std::to_string(lo) + ", " +
                          std::to_string(hi) + "]");
  }
  return x;
}

double get_double(const char* name, double def, double lo, double hi) {
  auto v = get(name);
  if (!v) return def;
  errno = 0;
  char* end = nullptr;
  double x = std::strtod(v->c_str(), &end);
  if (end == v->c_str() || *end != '\0' || errno == ERANGE || x != x) {
    throw InvalidArgument(std::string(name) + "='" + *v + "' is not a number");
  }
  if (x < lo || x > hi) {
    throw InvalidArgument(std::string(name) + "=" + *v + " is outside the allowed range [" + std::to_string(lo) + ", " +
                          std::to_string(hi) + "]");
  }
  return x;
}

bool get_bool(const char* name, bool def) {
  auto v = get(name);
  if (!v) return def;
  std::string s;
  for (char c : *v) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s == "0" || s == "false" || s == "no" || s == "off") return false;
  throw InvalidArgument(std::string(name) + "='" + *v + "' is not a boolean (use 1/0, true/false)");
}

}  // namespace ncclz::env
