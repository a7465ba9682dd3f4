#include <doctest/doctest.h>

#include "core/bitfield.hpp"
#include "core/random_fill.hpp"

using tensorhub::core::Bitfield;

TEST_CASE("bitfield: set, reset, count, find") {
  Bitfield b(130);
  CHECK(b.none());
  b.set(0);
  b.set(64);
  b.set(129);
  CHECK(b.count() == 3);
  CHECK(b.test(64));
  CHECK_FALSE(b.test(63));
  CHECK(b.find_next(0, true) == 0);
  CHECK(b.find_next(1, true) == 64);
  CHECK(b.find_next(65, true) == 129);
  CHECK(b.find_next(130, true) == 130);
  CHECK(b.find_next(0, false) == 1);
  b.reset(64);
  CHECK(b.count() == 2);
  b.set_all();
  CHECK(b.all());
  CHECK(b.count() == 130);
  CHECK(b.find_next(0, false) == 130);
  b.reset_all();
  CHECK(b.none());
}

TEST_CASE("bitfield: wire form round trips and is BitTorrent's bit order") {
  Bitfield b(11);
  b.set(0);
  b.set(9);
  auto bytes = b.to_bytes();
  REQUIRE(bytes.size() == 2);
  CHECK(bytes[0] == 0x80);
  CHECK(bytes[1] == 0x40);
  auto back = Bitfield::from_bytes(bytes, 11);
  REQUIRE(back.is_ok());
  CHECK(*back == b);

  tensorhub::core::SplitMix64 rng(9);
  for (int round = 0; round < 200; ++round) {
    const std::size_t size = rng.below(300);
    Bitfield r(size);
    for (std::size_t i = 0; i < size; ++i) {
      if (rng.below(2)) r.set(i);
    }
    auto again = Bitfield::from_bytes(r.to_bytes(), size);
    REQUIRE(again.is_ok());
    CHECK(*again == r);
  }
}

TEST_CASE("bitfield: rejects wrong length and padding bits") {
  const std::uint8_t one[1] = {0x01};
  CHECK_FALSE(Bitfield::from_bytes(one, 7).is_ok());    // padding bit 7 set
  CHECK(Bitfield::from_bytes(one, 8).is_ok());
  CHECK_FALSE(Bitfield::from_bytes(one, 9).is_ok());    // needs two bytes
  CHECK_FALSE(Bitfield::from_bytes({}, 1).is_ok());
  CHECK(Bitfield::from_bytes({}, 0).is_ok());
}
