// Byte sizes as people write them: "65536", "64KiB", "16MiB", "1.5GiB", "2GB".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tensorhub/status.hpp"

namespace tensorhub::core {

// Binary suffixes (K, KiB, M, MiB, G, GiB, T, TiB) multiply by powers of 1024;
// decimal ones (KB, MB, GB, TB) by powers of 1000; B or no suffix means bytes.
// Suffixes are case-insensitive. A fraction is allowed when the result is a
// whole number of bytes. Rejects empty input, junk, and overflow.
Result<std::uint64_t> parse_byte_size(std::string_view text);

// "0 B", "512 B", "64.0 KiB", "1.50 GiB": three significant digits.
std::string format_byte_size(std::uint64_t bytes);

// "1.23 GB/s" from bytes and seconds.
std::string format_rate(double bytes_per_second);

}  // namespace tensorhub::core
