// A rectangular slice of a tensor: a half-open range of indices along each
// dimension. What a trainer rank's part holds of a tensor (an FSDP dim-0
// shard, a tensor-parallel column block), and what a fetcher selects (one
// tensor-parallel rank's rows, one expert's weights).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tensorhub/status.hpp"

namespace tensorhub {

// Indices [begin, end) along one dimension.
struct IndexRange {
  std::uint64_t begin = 0;
  std::uint64_t end = 0;

  std::uint64_t size() const { return end > begin ? end - begin : 0; }
  friend bool operator==(const IndexRange&, const IndexRange&) = default;
};

struct TensorSlice {
  std::vector<IndexRange> ranges;  // one per dimension; none for a scalar

  // The whole of a tensor of `shape`.
  static TensorSlice whole(std::span<const std::uint64_t> shape);
  // The slice's extent along each dimension.
  std::vector<std::uint64_t> shape() const;
  // Elements in the slice (1 for a scalar). REQUIRES: it passed
  // validate_slice, so the count does not overflow.
  std::uint64_t element_count() const;
  // "[0:4096, 512:1024]", as messages name slices.
  std::string to_string() const;

  friend bool operator==(const TensorSlice&, const TensorSlice&) = default;
};

// One tensor of a fetch by selection (Peer::fetch with a selection): the
// tensor's name and the slice of it wanted; a slice with no ranges
// selects the whole tensor.
struct TensorSelection {
  std::string tensor;
  TensorSlice slice;
  friend bool operator==(const TensorSelection&, const TensorSelection&) = default;
};

// OK when `slice` has one range per dimension of `shape`, each with
// begin < end <= the dimension's extent (an empty slice selects nothing and
// is refused), and the tensor's element count fits in 64 bits.
// Errors: kInvalidArgument naming the first dimension that breaks a rule.
Status validate_slice(const TensorSlice& slice, std::span<const std::uint64_t> shape);

}  // namespace tensorhub
