#include "core/byte_size.hpp"

#include <cctype>
#include <cstdio>

#include "core/quoted.hpp"

namespace tensorhub::core {
namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

struct Suffix {
  std::string_view name;
  std::uint64_t multiplier;
};
constexpr Suffix kSuffixes[] = {
    {"", 1},          {"b", 1},
    {"k", 1ull << 10}, {"kib", 1ull << 10}, {"kb", 1000ull},
    {"m", 1ull << 20}, {"mib", 1ull << 20}, {"mb", 1000ull * 1000},
    {"g", 1ull << 30}, {"gib", 1ull << 30}, {"gb", 1000ull * 1000 * 1000},
    {"t", 1ull << 40}, {"tib", 1ull << 40}, {"tb", 1000ull * 1000 * 1000 * 1000},
};

}  // namespace

Result<std::uint64_t> parse_byte_size(std::string_view text) {
  const std::string quoted = core::quoted(text);
  std::size_t pos = 0;
  unsigned __int128 whole = 0;
  std::size_t digits = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) {
    whole = whole * 10 + static_cast<unsigned>(text[pos] - '0');
    if (whole > UINT64_MAX) return Status::invalid_argument("size " + quoted + " is too large");
    ++pos;
    ++digits;
  }
  unsigned __int128 fraction = 0, fraction_scale = 1;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) {
      if (fraction_scale < 1000000000000000000ull) {
        fraction = fraction * 10 + static_cast<unsigned>(text[pos] - '0');
        fraction_scale *= 10;
      }
      ++pos;
      ++digits;
    }
  }
  if (digits == 0) return Status::invalid_argument("size " + quoted + " does not start with a number");
  std::string_view suffix = text.substr(pos);
  while (!suffix.empty() && suffix.front() == ' ') suffix.remove_prefix(1);
  for (const Suffix& s : kSuffixes) {
    if (!iequals(suffix, s.name)) continue;
    unsigned __int128 total = whole * s.multiplier;
    unsigned __int128 fractional = fraction * s.multiplier;
    if (fractional % fraction_scale != 0) {
      return Status::invalid_argument("size " + quoted + " is not a whole number of bytes");
    }
    total += fractional / fraction_scale;
    if (total > UINT64_MAX) return Status::invalid_argument("size " + quoted + " is too large");
    return static_cast<std::uint64_t>(total);
  }
  return Status::invalid_argument("size " + quoted +
                                  " has an unknown unit (use B, KiB, MiB, GiB, TiB, or KB, MB, GB, TB)");
}

std::string format_byte_size(std::uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 6) {
    value /= 1024;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, value >= 100 ? "%.0f %s" : value >= 10 ? "%.1f %s" : "%.2f %s", value, kUnits[unit]);
  return buf;
}

std::string format_rate(double bytes_per_second) {
  char buf[32];
  if (bytes_per_second >= 1e9) std::snprintf(buf, sizeof buf, "%.2f GB/s", bytes_per_second / 1e9);
  else if (bytes_per_second >= 1e6) std::snprintf(buf, sizeof buf, "%.1f MB/s", bytes_per_second / 1e6);
  else std::snprintf(buf, sizeof buf, "%.0f kB/s", bytes_per_second / 1e3);
  return buf;
}

}  // namespace tensorhub::core
