// The member list file: keys, comments and blank lines; every bad line named.
#include <doctest/doctest.h>

#include <string>

#include "core/member_list.hpp"
#include "core/rng.hpp"

using namespace tensorhub;

namespace {
std::string key_hex(std::uint64_t n) {
  PublicKey k;
  for (std::size_t i = 0; i < 8; ++i) k.bytes[i] = static_cast<std::uint8_t>(n >> (8 * i));
  return k.hex();
}
}  // namespace

TEST_CASE("member list: keys one a line, with comments, blank lines and duplicates") {
  const std::string text = "# trainers\n" + key_hex(1) + "\n\n  " + key_hex(2) + "\t# worker 2\r\n" + key_hex(1) +
                           "\n" + key_hex(3);  // no final newline
  auto keys = core::parse_member_list(text);
  REQUIRE(keys.is_ok());
  REQUIRE(keys->size() == 3);
  CHECK((*keys)[0].hex() == key_hex(1));
  CHECK((*keys)[2].hex() == key_hex(3));
  CHECK(core::parse_member_list("").value().empty());
  CHECK(core::parse_member_list("# nobody\n\n").value().empty());
}

TEST_CASE("member list: a bad line is refused, naming it") {
  for (const std::string& bad : {key_hex(1) + "\nzz" + key_hex(2).substr(2) + "\n",  // not hex
                                 key_hex(1) + "\n" + key_hex(2).substr(1) + "\n",     // too short
                                 key_hex(1) + "\n" + key_hex(2) + " " + key_hex(3) + "\n",  // two on a line
                                 key_hex(1) + "\n" + std::string(2000, ' ') + "\n"}) {
    auto keys = core::parse_member_list(bad);
    REQUIRE_FALSE(keys.is_ok());
    CHECK(keys.status().code() == StatusCode::kInvalidArgument);
    CHECK(keys.status().message().find("line 2") != std::string::npos);
  }
  std::string many;
  for (std::uint64_t i = 0; i <= core::kMaxMemberListEntries; ++i) many += key_hex(i + 1) + "\n";
  auto too_many = core::parse_member_list(many);
  REQUIRE_FALSE(too_many.is_ok());
  CHECK(too_many.status().message().find("more than 65536") != std::string::npos);
}

TEST_CASE("mutation: member list parser") {
  // Random edits of a valid list never crash the parser, and what it accepts
  // is a list of at most as many keys as lines.
  const std::string valid = "# list\n" + key_hex(1) + "\n" + key_hex(2) + " # two\n\n" + key_hex(3) + "\n";
  core::SplitMix64 rng(7);
  for (int i = 0; i < 4000; ++i) {
    std::string m = valid;
    const int edits = 1 + static_cast<int>(rng.below(4));
    for (int e = 0; e < edits; ++e) {
      const std::size_t at = rng.below(m.size());
      switch (rng.below(3)) {
        case 0: m[at] = static_cast<char>(rng.below(256)); break;
        case 1: m.erase(at, 1 + rng.below(8)); break;
        default: m.insert(at, 1, static_cast<char>(rng.below(256))); break;
      }
    }
    auto keys = core::parse_member_list(m);
    if (keys.is_ok()) CHECK(keys->size() <= 3 + static_cast<std::size_t>(edits));
  }
}
