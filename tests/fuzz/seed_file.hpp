// What the seed makers of the fuzz targets share: a seed is one selector
// byte (which decoder the target runs) followed by valid input for it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace tensorhub::fuzz {

inline void write_seed(const std::string& path, std::uint8_t selector, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.put(static_cast<char>(selector));
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// The directory a seed maker writes into: its one argument.
inline std::optional<std::string> seed_dir(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return std::nullopt;
  }
  return std::string(argv[1]);
}

}  // namespace tensorhub::fuzz
