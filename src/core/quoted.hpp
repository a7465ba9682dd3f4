// Quotes user-supplied text for one-line error messages: 'text', with control
// characters shown as '?' and anything past `max_chars` cut to "...".
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tensorhub::core {

inline std::string quoted(std::string_view text, std::size_t max_chars = 80) {
  std::string out;  // built by appends: GCC 12 -O3 misreports operator+ chains (-Wrestrict)
  out.reserve(std::min(text.size(), max_chars) + 5);
  out.push_back('\'');
  for (char c : text.substr(0, max_chars)) out.push_back(static_cast<unsigned char>(c) < 0x20 ? '?' : c);
  if (text.size() > max_chars) out.append("...");
  out.push_back('\'');
  return out;
}

}  // namespace tensorhub::core
