// Arithmetic on rectangular tensor slices: intersections, the byte runs a
// slice takes in a row-major tensor, and whether the parts of a version
// cover each tensor exactly once. No I/O; every function bounds its work by
// what its caller can check first (run_count before byte_runs).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "tensorhub/status.hpp"
#include "tensorhub/tensor_slice.hpp"

namespace tensorhub::manifest {

// Bytes [offset, offset + length) of a tensor's row-major bytes.
struct ByteRun {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  friend bool operator==(const ByteRun&, const ByteRun&) = default;
};

// What `a` and `b` both cover; nullopt when nothing.
// REQUIRES: both have the same number of dimensions.
std::optional<TensorSlice> intersect(const TensorSlice& a, const TensorSlice& b);

// `inner`'s indices counted from `outer`'s first corner: where a selection
// lies inside a part's own (smaller) tensor.
// REQUIRES: `inner` lies inside `outer`.
TensorSlice relative_to(const TensorSlice& inner, const TensorSlice& outer);

// How many contiguous byte runs `slice` takes in a row-major tensor of
// `shape`: the product of its extents along the dimensions before the
// longest suffix it covers whole (runs next to each other merge).
// REQUIRES: validate_slice(slice, shape) is OK.
std::uint64_t run_count(const TensorSlice& slice, std::span<const std::uint64_t> shape);

// Appends the byte runs of `slice` in a row-major tensor of `shape` whose
// elements are `element_size` bytes, in increasing order, adjacent ones
// merged (never with a run already in `out`). REQUIRES:
// validate_slice(slice, shape) is OK, the tensor's bytes fit in 64 bits
// (tensor_byte_length), and the caller accepts run_count(slice, shape) runs.
void byte_runs(const TensorSlice& slice, std::span<const std::uint64_t> shape, std::uint32_t element_size,
               std::vector<ByteRun>& out);

inline constexpr std::uint64_t kMaxCoverComparisons = 64;

// One part's slice of a tensor.
struct PartSlice {
  std::uint32_t part = 0;
  TensorSlice slice;
};

// OK when the slices cover every element of a tensor of `shape` exactly
// once; a tensor of no elements (a scalar's one, or a zero extent) is held
// by exactly one part. The check compares at most kMaxCoverComparisons
// pairs per part, which the usual splits (rows, columns, blocks, experts)
// stay far below. REQUIRES: each slice is inside `shape` (TensorEntry's
// rules), and its rank is shape's.
// Errors: kInvalidArgument naming `tensor` and either the two parts that
// overlap (with where), how many elements no part covers, or that its
// slices are too fragmented to check within the bound.
Status check_exact_cover(std::string_view tensor, std::span<const std::uint64_t> shape,
                         std::span<const PartSlice> parts);

}  // namespace tensorhub::manifest
