#include <string>

#include "tensorhub/ids.hpp"

namespace tensorhub {
namespace {
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

std::string to_hex(std::span<const std::uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(bytes.size() * 2, '0');
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 0xf];
  }
  return out;
}

Status from_hex(std::string_view text, std::span<std::uint8_t> out) {
  if (text.size() != out.size() * 2) {
    return Status::invalid_argument("expected " + std::to_string(out.size() * 2) + " hex characters, got " +
                                    std::to_string(text.size()));
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    int hi = hex_value(text[2 * i]);
    int lo = hex_value(text[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return Status::invalid_argument("not a hex digit at position " + std::to_string(hi < 0 ? 2 * i : 2 * i + 1));
    }
    out[i] = static_cast<std::uint8_t>(hi << 4 | lo);
  }
  return Status::ok();
}

}  // namespace tensorhub
