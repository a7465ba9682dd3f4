#include <doctest/doctest.h>

#include <atomic>
#include <vector>

#include "core/parallel_for.hpp"
#include "core/random_fill.hpp"

using namespace tensorhub::core;

TEST_CASE("parallel_for calls every index exactly once") {
  for (unsigned threads : {0u, 1u, 2u, 7u}) {
    std::vector<std::atomic<int>> calls(1000);
    parallel_for(calls.size(), threads, [&](std::size_t i) { calls[i].fetch_add(1); });
    for (auto& c : calls) CHECK(c.load() == 1);
  }
  parallel_for(0, 4, [](std::size_t) { FAIL("called for an empty range"); });
}

TEST_CASE("pseudo-random fill is positional: any part regenerates alone") {
  std::vector<std::byte> whole(1000);
  fill_pseudo_random(whole, 5);
  for (std::size_t start : {0u, 1u, 7u, 8u, 13u, 999u}) {
    std::vector<std::byte> part(whole.size() - start);
    fill_pseudo_random(part, 5, start);
    CHECK(std::equal(part.begin(), part.end(), whole.begin() + static_cast<std::ptrdiff_t>(start)));
  }
  std::vector<std::byte> other(1000);
  fill_pseudo_random(other, 6);
  CHECK(other != whole);
}
