#include <doctest/doctest.h>

#include <numeric>
#include <vector>

#include "core/random_fill.hpp"
#include "core/regions.hpp"

using namespace tensorhub;

TEST_CASE("regions: a range is visited piece by piece across region boundaries, and copied region to region") {
  std::vector<std::byte> a(10), b(1), c(25);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = std::byte(i);
  b[0] = std::byte(10);
  for (std::size_t i = 0; i < c.size(); ++i) c[i] = std::byte(11 + i);
  const std::span<const std::byte> spans[] = {a, b, c};
  const core::ConstRegions regions{std::span<const std::span<const std::byte>>(spans)};
  CHECK(regions.size() == 36);
  CHECK(regions.count() == 3);
  // Every range of the image reads back the bytes 0..35 in order.
  for (std::uint64_t offset = 0; offset <= 36; ++offset) {
    for (std::uint64_t length = 0; offset + length <= 36; ++length) {
      std::vector<int> seen;
      std::size_t pieces = 0;
      regions.for_each(offset, length, [&](std::span<const std::byte> piece) {
        CHECK_FALSE(piece.empty());
        ++pieces;
        for (std::byte x : piece) seen.push_back(static_cast<int>(x));
      });
      std::vector<int> want(length);
      std::iota(want.begin(), want.end(), static_cast<int>(offset));
      CHECK(seen == want);
      CHECK(pieces <= 3);
    }
  }
  std::vector<std::span<const std::byte>> out;
  regions.pieces(9, 3, out);  // the last of a, all of b, the first of c
  REQUIRE(out.size() == 3);
  CHECK(out[0].size() == 1);
  CHECK(out[1].size() == 1);
  CHECK(out[2].size() == 1);

  // Copied into regions cut elsewhere, a middle range lands where it belongs.
  std::vector<std::byte> x(7), y(29);
  const std::span<std::byte> targets[] = {x, y};
  const core::MutableRegions into{std::span<const std::span<std::byte>>(targets)};
  core::copy_range(regions, into, 5, 20);
  for (std::size_t i = 5; i < 25; ++i) {
    const std::byte got = i < 7 ? x[i] : y[i - 7];
    CHECK(static_cast<int>(got) == static_cast<int>(i));
  }
  CHECK(static_cast<int>(x[4]) == 0);   // outside the range: untouched
  CHECK(static_cast<int>(y[18]) == 0);
}
