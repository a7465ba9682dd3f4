// Quotes user-supplied text for one-line error messages: 'text', in printable
// ASCII (any other byte shown as '?', so a message is valid UTF-8 and valid
// JSON whatever the text held) and anything past `max_chars` cut to "...".
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tensorhub::core {

inline bool is_printable_ascii(char c) { return c >= 0x20 && c < 0x7f; }
inline bool is_printable_ascii(std::string_view text) {
  for (char c : text) {
    if (!is_printable_ascii(c)) return false;
  }
  return true;
}

inline std::string quoted(std::string_view text, std::size_t max_chars = 80) {
  std::string out;  // built by appends: GCC 12 -O3 misreports operator+ chains (-Wrestrict)
  out.reserve(std::min(text.size(), max_chars) + 5);
  out.push_back('\'');
  for (char c : text.substr(0, max_chars)) out.push_back(is_printable_ascii(c) ? c : '?');
  if (text.size() > max_chars) out.append("...");
  out.push_back('\'');
  return out;
}

}  // namespace tensorhub::core
