#include <doctest/doctest.h>

#include <unordered_set>

#include "tensorhub/ids.hpp"

using namespace tensorhub;

TEST_CASE("ids: hex round trip and rejection") {
  ManifestId id;
  for (std::size_t i = 0; i < id.bytes.size(); ++i) id.bytes[i] = static_cast<std::uint8_t>(i * 7 + 1);
  const std::string hex = id.hex();
  CHECK(hex.size() == 64);
  CHECK(hex.substr(0, 6) == "01080f");
  auto back = ManifestId::from_hex(hex);
  REQUIRE(back.is_ok());
  CHECK(*back == id);
  auto upper = ManifestId::from_hex("01080F" + hex.substr(6));
  REQUIRE(upper.is_ok());
  CHECK(*upper == id);
  CHECK_FALSE(ManifestId::from_hex(hex.substr(1)).is_ok());
  CHECK_FALSE(ManifestId::from_hex("zz" + hex.substr(2)).is_ok());
  CHECK(id.short_hex(8) == hex.substr(0, 8));
  CHECK_FALSE(id.is_zero());
  CHECK(ManifestId{}.is_zero());
}

TEST_CASE("ids: strong indices compare and hash") {
  ShardIndex a{3}, b{4};
  CHECK(a < b);
  CHECK(a == ShardIndex{3});
  std::unordered_set<ShardIndex> set{a, b, ShardIndex{3}};
  CHECK(set.size() == 2);
  std::unordered_set<PublicKey> keys;
  PublicKey k1, k2;
  k2.bytes[0] = 1;
  keys.insert(k1);
  keys.insert(k2);
  keys.insert(k1);
  CHECK(keys.size() == 2);
}
