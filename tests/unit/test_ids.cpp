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

TEST_CASE("ids: ordering and equality are byte-wise lexicographic at every position") {
  // The operators compare eight bytes at a time; a difference in any byte,
  // in either direction, must order as the bytes do. 64-byte signatures
  // and 32-byte keys alike.
  auto check_all_positions = [](auto zero) {
    using Id = decltype(zero);
    for (std::size_t pos = 0; pos < Id::kSize; ++pos) {
      Id low, high;
      for (std::size_t i = 0; i < Id::kSize; ++i) low.bytes[i] = high.bytes[i] = static_cast<std::uint8_t>(0x80 + i);
      low.bytes[pos] = 0x7f;
      high.bytes[pos] = 0x81;
      // Bytes after the difference order the other way: they must not count.
      if (pos + 1 < Id::kSize) low.bytes[pos + 1] = 0xff, high.bytes[pos + 1] = 0x00;
      CHECK(low < high);
      CHECK(high > low);
      CHECK(low != high);
      CHECK((low <=> high) == std::lexicographical_compare_three_way(low.bytes.begin(), low.bytes.end(),
                                                                      high.bytes.begin(), high.bytes.end()));
      Id copy = low;
      CHECK(copy == low);
      CHECK((copy <=> low) == std::strong_ordering::equal);
    }
  };
  check_all_positions(PublicKey{});
  check_all_positions(Signature{});
  static_assert(PublicKey{} == PublicKey{});  // still usable in constant expressions
}
