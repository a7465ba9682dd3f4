#include "tensorhub/tensor_slice.hpp"

#include <limits>

namespace tensorhub {

TensorSlice TensorSlice::whole(std::span<const std::uint64_t> shape) {
  TensorSlice slice;
  slice.ranges.reserve(shape.size());
  for (std::uint64_t extent : shape) slice.ranges.push_back(IndexRange{0, extent});
  return slice;
}

std::vector<std::uint64_t> TensorSlice::shape() const {
  std::vector<std::uint64_t> extents;
  extents.reserve(ranges.size());
  for (const IndexRange& r : ranges) extents.push_back(r.size());
  return extents;
}

std::uint64_t TensorSlice::element_count() const {
  std::uint64_t count = 1;
  for (const IndexRange& r : ranges) count *= r.size();
  return count;
}

std::string TensorSlice::to_string() const {
  std::string s = "[";
  for (std::size_t d = 0; d < ranges.size(); ++d) {
    if (d > 0) s += ", ";
    s += std::to_string(ranges[d].begin) + ":" + std::to_string(ranges[d].end);
  }
  return s + "]";
}

Status validate_slice(const TensorSlice& slice, std::span<const std::uint64_t> shape) {
  if (slice.ranges.size() != shape.size()) {
    return Status::invalid_argument("a slice of " + std::to_string(slice.ranges.size()) +
                                    " dimensions for a tensor of " + std::to_string(shape.size()));
  }
  std::uint64_t elements = 1;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    const IndexRange& r = slice.ranges[d];
    if (r.begin >= r.end || r.end > shape[d]) {
      return Status::invalid_argument("dimension " + std::to_string(d) + " of the slice, " + std::to_string(r.begin) +
                                      ":" + std::to_string(r.end) + ", is empty or outside 0:" +
                                      std::to_string(shape[d]));
    }
    if (shape[d] != 0 && elements > std::numeric_limits<std::uint64_t>::max() / shape[d]) {
      return Status::invalid_argument("a tensor of more than 2^64 elements");
    }
    elements *= shape[d];
  }
  return Status::ok();
}

}  // namespace tensorhub
