#include "base/bytes.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace memfit::train {

std::optional<size_t> parse_bytes(const std::string& s) {
  if (s.empty()) return std::nullopt;
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == 0) return std::nullopt;
  char* end = nullptr;
  std::string num = s.substr(0, i);
  double v = std::strtod(num.c_str(), &end);
  if (end != num.c_str() + num.size() || !(v >= 0)) return std::nullopt;
  std::string unit = s.substr(i);
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double mul;
  if (unit.empty() || unit == "b") mul = 1;
  else if (unit == "k" || unit == "kib") mul = 1024.0;
  else if (unit == "m" || unit == "mib") mul = 1024.0 * 1024;
  else if (unit == "g" || unit == "gib") mul = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tib") mul = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "kb") mul = 1e3;
  else if (unit == "mb") mul = 1e6;
  else if (unit == "gb") mul = 1e9;
  else if (unit == "tb") mul = 1e12;
  else return std::nullopt;
  double b = v * mul;
  if (b > 1e18) return std::nullopt;
  return static_cast<size_t>(std::llround(b));
}

std::string format_bytes(size_t b) {
  char buf[64];
  const double d = static_cast<double>(b);
  if (b >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", d / (1ull << 30));
  else if (b >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.1f MiB", d / (1ull << 20));
  else if (b >= 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", d / 1024);
  else std::snprintf(buf, sizeof buf, "%zu B", b);
  return buf;
}

std::string format_bytes_up(size_t b) {
  char buf[64];
  const double d = static_cast<double>(b);
  if (b >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", std::ceil(d / (1ull << 30) * 100 - 1e-9) / 100);
  else if (b >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.1f MiB", std::ceil(d / (1ull << 20) * 10 - 1e-9) / 10);
  else if (b >= 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", std::ceil(d / 1024 * 10 - 1e-9) / 10);
  else std::snprintf(buf, sizeof buf, "%zu B", b);
  return buf;
}

}  // namespace memfit::train
