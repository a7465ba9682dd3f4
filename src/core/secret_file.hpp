// Files that hold one 32-byte secret (a peer's Ed25519 seed, a swarm key).
//
// Format, one secret per file:
//   # comment lines
//   <label> <64 hex characters>
// The file is written with mode 0600 and refused on read when its group or
// others have any access, the way ssh treats private keys.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "tensorhub/status.hpp"

namespace tensorhub::core {

using Secret32 = std::array<std::uint8_t, 32>;

Status write_secret_file(const std::string& path, std::string_view label, std::string_view comment,
                         const Secret32& secret, bool overwrite);
Result<Secret32> read_secret_file(const std::string& path, std::string_view label);

}  // namespace tensorhub::core
