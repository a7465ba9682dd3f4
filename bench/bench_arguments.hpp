// Command-line values shared by the benchmarks.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/byte_size.hpp"

namespace tensorhub::bench {

// The byte size after argv[i] ("4GiB", "16MiB"), advancing i past it; a
// missing or malformed value ends the program with status 2 and a reason.
inline std::uint64_t size_argument(int& i, int argc, char** argv) {
  const std::string option = argv[i];
  if (i + 1 >= argc) {
    std::fprintf(stderr, "%s needs a value\n", option.c_str());
    std::exit(2);
  }
  auto parsed = core::parse_byte_size(argv[++i]);
  if (!parsed) {
    std::fprintf(stderr, "%s: %s\n", option.c_str(), parsed.status().message().c_str());
    std::exit(2);
  }
  return *parsed;
}

}  // namespace tensorhub::bench
