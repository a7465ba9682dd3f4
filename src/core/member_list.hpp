// A member list file (PeerOptions::members, `tensorhub peer --members`):
// one peer's public key per line, as 64 hex digits (what `tensorhub keygen`
// prints), with blank lines and `#` comments allowed. At most
// kMaxMemberListEntries keys; a key listed twice counts once.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "tensorhub/identity.hpp"
#include "tensorhub/status.hpp"

namespace tensorhub::core {

inline constexpr std::size_t kMaxMemberListEntries = 65536;

// Errors: kInvalidArgument naming the first bad line (not a key, too many keys).
Result<std::vector<PublicKey>> parse_member_list(std::string_view text);
// Errors: as parse_member_list, with the path; kNotFound and others from reading.
Result<std::vector<PublicKey>> load_member_list(const std::string& path);

}  // namespace tensorhub::core
