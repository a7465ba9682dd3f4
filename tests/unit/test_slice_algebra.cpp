#include <doctest/doctest.h>

#include <map>
#include <random>
#include <set>
#include <vector>

#include "manifest/slice_algebra.hpp"

using namespace tensorhub;
using namespace tensorhub::manifest;

namespace {

using Shape = std::vector<std::uint64_t>;

TensorSlice slice_of(std::initializer_list<IndexRange> ranges) { return TensorSlice{std::vector<IndexRange>(ranges)}; }

// Every element's flat index in a row-major tensor of `shape`, in order.
template <typename Fn>
void for_each_element(const TensorSlice& slice, const Shape& shape, Fn fn) {
  std::vector<std::uint64_t> index;
  for (const auto& r : slice.ranges) index.push_back(r.begin);
  while (true) {
    std::uint64_t flat = 0;
    for (std::size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + index[d];
    fn(flat);
    std::size_t d = shape.size();
    while (d > 0) {
      --d;
      if (++index[d] < slice.ranges[d].end) break;
      index[d] = slice.ranges[d].begin;
      if (d == 0) return;
    }
    if (shape.empty()) return;
  }
}

// The oracle: runs built element by element.
std::vector<ByteRun> runs_by_element(const TensorSlice& slice, const Shape& shape, std::uint32_t size) {
  std::vector<ByteRun> runs;
  for_each_element(slice, shape, [&](std::uint64_t flat) {
    if (!runs.empty() && runs.back().offset + runs.back().length == flat * size) {
      runs.back().length += size;
    } else {
      runs.push_back(ByteRun{flat * size, size});
    }
  });
  return runs;
}

TensorSlice random_slice(const Shape& shape, std::mt19937_64& rng) {
  TensorSlice s;
  for (std::uint64_t extent : shape) {
    std::uint64_t a = rng() % extent, b = rng() % extent;
    if (a > b) std::swap(a, b);
    s.ranges.push_back(IndexRange{a, b + 1});
  }
  return s;
}

Shape random_shape(std::mt19937_64& rng) {
  Shape shape(rng() % 4);
  for (auto& e : shape) e = 1 + rng() % 6;
  return shape;
}

}  // namespace

TEST_CASE("slices: validation names the dimension that is empty or outside the tensor") {
  const Shape shape{8, 4};
  CHECK(validate_slice(TensorSlice::whole(shape), shape).is_ok());
  CHECK(validate_slice(slice_of({{2, 3}, {0, 4}}), shape).is_ok());
  Status rank = validate_slice(slice_of({{0, 8}}), shape);
  CHECK(rank.code() == StatusCode::kInvalidArgument);
  CHECK(rank.message().find("1 dimensions for a tensor of 2") != std::string::npos);
  Status outside = validate_slice(slice_of({{0, 8}, {2, 5}}), shape);
  CHECK(outside.message().find("dimension 1 of the slice, 2:5") != std::string::npos);
  CHECK_FALSE(validate_slice(slice_of({{3, 3}, {0, 4}}), shape).is_ok());  // empty
  CHECK_FALSE(validate_slice(slice_of({{5, 2}, {0, 4}}), shape).is_ok());  // reversed
  const Shape huge{1ull << 40, 1ull << 40};
  CHECK_FALSE(validate_slice(TensorSlice::whole(huge), huge).is_ok());  // 2^80 elements
  CHECK(validate_slice(TensorSlice{}, Shape{}).is_ok());                 // a scalar
  CHECK(TensorSlice{}.element_count() == 1);
  CHECK(slice_of({{0, 4096}, {512, 1024}}).to_string() == "[0:4096, 512:1024]");
}

TEST_CASE("slices: byte runs of rows, columns and blocks") {
  const Shape shape{4, 6};  // 2-byte elements: rows of 12 bytes
  std::vector<ByteRun> runs;
  byte_runs(TensorSlice::whole(shape), shape, 2, runs);
  CHECK(runs == std::vector<ByteRun>{{0, 48}});
  runs.clear();
  byte_runs(slice_of({{1, 3}, {0, 6}}), shape, 2, runs);  // FSDP's dim-0 rows: one run
  CHECK(runs == std::vector<ByteRun>{{12, 24}});
  CHECK(run_count(slice_of({{1, 3}, {0, 6}}), shape) == 1);
  runs.clear();
  byte_runs(slice_of({{0, 4}, {2, 4}}), shape, 2, runs);  // a column block: one run a row
  CHECK(runs == std::vector<ByteRun>{{4, 4}, {16, 4}, {28, 4}, {40, 4}});
  CHECK(run_count(slice_of({{0, 4}, {2, 4}}), shape) == 4);
  runs.clear();
  byte_runs(TensorSlice{}, Shape{}, 4, runs);  // a scalar
  CHECK(runs == std::vector<ByteRun>{{0, 4}});
  // Runs already in `out` stay as they are, even when the next one touches them.
  runs = {{0, 12}};
  byte_runs(slice_of({{1, 2}, {0, 6}}), shape, 2, runs);
  CHECK(runs == std::vector<ByteRun>{{0, 12}, {12, 12}});
}

TEST_CASE("slices: byte runs, intersections and offsets agree with element-by-element oracles") {
  std::mt19937_64 rng(47);
  for (int trial = 0; trial < 2000; ++trial) {
    const Shape shape = random_shape(rng);
    const std::uint32_t size = 1u << (rng() % 3);
    const TensorSlice a = shape.empty() ? TensorSlice{} : random_slice(shape, rng);
    REQUIRE(validate_slice(a, shape).is_ok());
    std::vector<ByteRun> runs;
    byte_runs(a, shape, size, runs);
    CHECK(runs == runs_by_element(a, shape, size));
    CHECK(run_count(a, shape) == runs.size());

    const TensorSlice b = shape.empty() ? TensorSlice{} : random_slice(shape, rng);
    std::set<std::uint64_t> in_a, in_both;
    for_each_element(a, shape, [&](std::uint64_t f) { in_a.insert(f); });
    for_each_element(b, shape, [&](std::uint64_t f) {
      if (in_a.count(f)) in_both.insert(f);
    });
    const auto both = intersect(a, b);
    if (in_both.empty()) {
      CHECK_FALSE(both.has_value());
      continue;
    }
    REQUIRE(both.has_value());
    std::set<std::uint64_t> got;
    for_each_element(*both, shape, [&](std::uint64_t f) { got.insert(f); });
    CHECK(got == in_both);
    // The intersection inside `a`'s own tensor: the same elements, each at
    // its global index minus a's corner, flattened in a's shape.
    const TensorSlice inside = relative_to(*both, a);
    const Shape a_shape = a.shape();
    REQUIRE(validate_slice(inside, a_shape).is_ok());
    std::vector<std::uint64_t> expected, by_local;
    for_each_element(*both, shape, [&](std::uint64_t flat) {
      std::vector<std::uint64_t> index(shape.size());
      for (std::size_t d = shape.size(); d > 0; --d) {
        index[d - 1] = flat % shape[d - 1];
        flat /= shape[d - 1];
      }
      std::uint64_t local = 0;
      for (std::size_t d = 0; d < shape.size(); ++d) local = local * a_shape[d] + (index[d] - a.ranges[d].begin);
      expected.push_back(local);
    });
    for_each_element(inside, a_shape, [&](std::uint64_t f) { by_local.push_back(f); });
    CHECK(by_local == expected);
  }
}

TEST_CASE("slices: exact cover accepts the usual splits and names overlaps and gaps") {
  const Shape shape{8, 6};
  // FSDP: rows to four ranks, given in any order.
  std::vector<PartSlice> rows{{2, slice_of({{4, 6}, {0, 6}})},
                              {0, slice_of({{0, 2}, {0, 6}})},
                              {3, slice_of({{6, 8}, {0, 6}})},
                              {1, slice_of({{2, 4}, {0, 6}})}};
  CHECK(check_exact_cover("w", shape, rows).is_ok());
  // Tensor parallel: column blocks.
  std::vector<PartSlice> columns{{0, slice_of({{0, 8}, {0, 3}})}, {1, slice_of({{0, 8}, {3, 6}})}};
  CHECK(check_exact_cover("w", shape, columns).is_ok());
  // 2-D blocks.
  std::vector<PartSlice> blocks{{0, slice_of({{0, 4}, {0, 3}})},
                                {1, slice_of({{0, 4}, {3, 6}})},
                                {2, slice_of({{4, 8}, {0, 3}})},
                                {3, slice_of({{4, 8}, {3, 6}})}};
  CHECK(check_exact_cover("w", shape, blocks).is_ok());

  rows[3].slice = slice_of({{1, 4}, {0, 6}});  // rank 1 takes row 1 too
  Status overlap = check_exact_cover("model.layers.0.mlp.up_proj.weight", shape, rows);
  CHECK(overlap.code() == StatusCode::kInvalidArgument);
  CHECK(overlap.message() ==
        "tensor 'model.layers.0.mlp.up_proj.weight': parts 0 and 1 both cover [1:2, 0:6]");
  std::vector<PartSlice> gap{columns[0]};
  Status missing = check_exact_cover("w", shape, gap);
  CHECK(missing.message() == "tensor 'w': 24 of 48 elements are in no part");
  CHECK_FALSE(check_exact_cover("s", Shape{}, std::vector<PartSlice>{}).is_ok());
  // A tensor of no elements is held once, like a scalar.
  const Shape none{0, 5};
  const std::vector<PartSlice> empty_twice{{1, slice_of({{0, 0}, {0, 5}})}, {2, slice_of({{0, 0}, {0, 5}})}};
  CHECK(check_exact_cover("e", none, empty_twice).message() == "tensor 'e': parts 1 and 2 both hold it");
  CHECK(check_exact_cover("e", none, std::span(empty_twice).first(1)).is_ok());
  CHECK(check_exact_cover("s", Shape{}, std::vector<PartSlice>{{5, TensorSlice{}}}).is_ok());
  CHECK(check_exact_cover("s", Shape{}, std::vector<PartSlice>{{5, TensorSlice{}}, {6, TensorSlice{}}})
            .message() == "tensor 's': parts 5 and 6 both hold it");
}

namespace {

// Cuts `whole` into pieces by random straight cuts: an exact cover.
void guillotine(const TensorSlice& whole, int cuts, std::mt19937_64& rng, std::vector<TensorSlice>& out) {
  const std::size_t d = rng() % whole.ranges.size();
  const IndexRange r = whole.ranges[d];
  if (cuts == 0 || r.size() < 2) {
    out.push_back(whole);
    return;
  }
  const std::uint64_t at = r.begin + 1 + rng() % (r.size() - 1);
  TensorSlice low = whole, high = whole;
  low.ranges[d].end = at;
  high.ranges[d].begin = at;
  guillotine(low, cuts - 1, rng, out);
  guillotine(high, cuts - 1, rng, out);
}

}  // namespace

TEST_CASE("slices: exact cover agrees with counting every element, for random sets of slices") {
  std::mt19937_64 rng(48);
  for (int trial = 0; trial < 2000; ++trial) {
    Shape shape = random_shape(rng);
    if (shape.empty()) shape = {3};
    std::vector<PartSlice> parts;
    if (trial % 2 == 0) {  // random slices: seldom a cover
      const std::size_t n = 1 + rng() % 5;
      for (std::size_t p = 0; p < n; ++p) parts.push_back({static_cast<std::uint32_t>(p), random_slice(shape, rng)});
    } else {  // a cover by cuts, one of its pieces perhaps grown, shrunk or dropped
      std::vector<TensorSlice> pieces;
      guillotine(TensorSlice::whole(shape), 1 + static_cast<int>(rng() % 3), rng, pieces);
      for (std::size_t p = 0; p < pieces.size(); ++p) parts.push_back({static_cast<std::uint32_t>(p), pieces[p]});
      const std::size_t victim = rng() % parts.size();
      IndexRange& r = parts[victim].slice.ranges[rng() % shape.size()];
      switch (rng() % 4) {
        case 0: break;
        case 1: if (r.begin > 0) --r.begin; break;
        case 2: if (r.size() > 1) --r.end; break;
        case 3: if (parts.size() > 1) parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(victim)); break;
      }
    }
    std::map<std::uint64_t, int> times;
    for (const auto& p : parts) for_each_element(p.slice, shape, [&](std::uint64_t f) { ++times[f]; });
    std::uint64_t total = 1;
    for (auto e : shape) total *= e;
    bool exact = times.size() == total;
    for (const auto& [f, t] : times) exact = exact && t == 1;
    CHECK(check_exact_cover("t", shape, parts).is_ok() == exact);
  }
}

TEST_CASE("slices: a cover too fragmented to check in bounded time is refused, and the usual splits stay far inside") {
  // Part i holds rows [i, n) of column i: disjoint staircases whose sweep
  // never stops early (n^2 / 2 pairs unbounded).
  const std::uint64_t n = 2048;
  std::vector<PartSlice> stairs;
  for (std::uint64_t i = 0; i < n; ++i) {
    stairs.push_back({static_cast<std::uint32_t>(i), slice_of({{i, n}, {i, i + 1}})});
  }
  const Status refused = check_exact_cover("w", Shape{n, n}, stairs);
  CHECK(refused.code() == StatusCode::kInvalidArgument);
  CHECK(refused.message().find("too fragmented to check") != std::string::npos);
  // 256 parts as a 16 x 16 grid of blocks, in any order: checked.
  std::vector<PartSlice> grid;
  for (std::uint64_t r = 0; r < 16; ++r) {
    for (std::uint64_t c = 0; c < 16; ++c) {
      grid.push_back({static_cast<std::uint32_t>(c * 16 + r), slice_of({{r * 64, r * 64 + 64}, {c * 32, c * 32 + 32}})});
    }
  }
  CHECK(check_exact_cover("w", Shape{1024, 512}, grid).is_ok());
}
