#include <algorithm>
#include <numeric>
#include <string>
#include <string_view>
#include <unordered_set>

#include "core/quoted.hpp"
#include "core/utf8.hpp"
#include "tensorhub/tensor.hpp"

namespace tensorhub {
namespace {

using core::is_valid_utf8;
using core::quoted;

}  // namespace

std::optional<std::uint64_t> tensor_byte_length(DType dtype, std::span<const std::uint64_t> shape) {
  std::uint64_t total = dtype_size(dtype);
  for (std::uint64_t dim : shape) {
    if (dim != 0 && total > UINT64_MAX / dim) return std::nullopt;
    total *= dim;
  }
  return total;
}

TensorSlice TensorEntry::slice() const {
  if (!is_slice()) return TensorSlice::whole(shape);
  TensorSlice s;
  s.ranges.reserve(shape.size());
  for (std::size_t d = 0; d < shape.size(); ++d) s.ranges.push_back(IndexRange{slice_begin[d], slice_begin[d] + shape[d]});
  return s;
}

namespace {

// The rules of a slice's global_shape and slice_begin (validate_tensor_table).
Status validate_slice_of(const TensorEntry& t) {
  if (!t.is_slice()) return Status::ok();
  const std::string named = "tensor " + quoted(t.name);
  if (t.global_shape.size() != t.shape.size() || t.slice_begin.size() != t.shape.size()) {
    return Status::invalid_argument(named + " is a slice of rank " + std::to_string(t.shape.size()) +
                                    " with a global shape of rank " + std::to_string(t.global_shape.size()) +
                                    " and a start of rank " + std::to_string(t.slice_begin.size()));
  }
  if (!tensor_byte_length(t.dtype, t.global_shape)) {
    return Status::invalid_argument(named + " has a global shape whose size overflows");
  }
  bool whole = true;
  for (std::size_t d = 0; d < t.shape.size(); ++d) {
    if (t.shape[d] == 0 || t.slice_begin[d] > t.global_shape[d] ||
        t.shape[d] > t.global_shape[d] - t.slice_begin[d]) {
      return Status::invalid_argument(named + ": its slice along dimension " + std::to_string(d) + ", " +
                                      std::to_string(t.slice_begin[d]) + " + " + std::to_string(t.shape[d]) +
                                      ", is empty or outside the global extent " + std::to_string(t.global_shape[d]));
    }
    whole = whole && t.slice_begin[d] == 0 && t.shape[d] == t.global_shape[d];
  }
  if (whole) return Status::invalid_argument(named + " is all of its global tensor: write it without a slice");
  return Status::ok();
}

}  // namespace

Status validate_tensor_table(std::span<const TensorEntry> tensors, std::uint64_t image_size) {
  std::unordered_set<std::string_view> names;
  names.reserve(tensors.size());
  for (const TensorEntry& t : tensors) {
    if (t.name.empty()) return Status::invalid_argument("a tensor has an empty name");
    if (t.name.size() > kMaxTensorNameBytes) {
      return Status::invalid_argument("tensor " + quoted(t.name) + " has a name longer than " +
                                      std::to_string(kMaxTensorNameBytes) + " bytes");
    }
    if (!is_valid_utf8(t.name)) return Status::invalid_argument("tensor " + quoted(t.name) + " has a name that is not UTF-8");
    if (!names.insert(t.name).second) return Status::invalid_argument("tensor " + quoted(t.name) + " appears twice");
    if (t.shape.size() > kMaxTensorRank) {
      return Status::invalid_argument("tensor " + quoted(t.name) + " has rank " + std::to_string(t.shape.size()) +
                                      ", more than " + std::to_string(kMaxTensorRank));
    }
    auto expected = tensor_byte_length(t.dtype, t.shape);
    if (!expected) return Status::invalid_argument("tensor " + quoted(t.name) + " has a shape whose size overflows");
    if (*expected != t.byte_length) {
      return Status::invalid_argument("tensor " + quoted(t.name) + ": " + std::string(dtype_name(t.dtype)) +
                                      " with this shape needs " + std::to_string(*expected) + " bytes, but it has " +
                                      std::to_string(t.byte_length));
    }
    TENSORHUB_RETURN_IF_ERROR(validate_slice_of(t));
    if (t.byte_offset > image_size || t.byte_length > image_size - t.byte_offset) {
      return Status::invalid_argument("tensor " + quoted(t.name) + " at bytes [" + std::to_string(t.byte_offset) +
                                      ", +" + std::to_string(t.byte_length) + ") lies outside the image of " +
                                      std::to_string(image_size) + " bytes");
    }
  }
  std::vector<std::size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return tensors[a].byte_offset != tensors[b].byte_offset ? tensors[a].byte_offset < tensors[b].byte_offset
                                                            : tensors[a].byte_length < tensors[b].byte_length;
  });
  for (std::size_t k = 1; k < order.size(); ++k) {
    const TensorEntry& prev = tensors[order[k - 1]];
    const TensorEntry& cur = tensors[order[k]];
    if (cur.byte_offset < prev.byte_offset + prev.byte_length) {
      return Status::invalid_argument("tensors " + quoted(prev.name) + " and " + quoted(cur.name) + " overlap");
    }
  }
  return Status::ok();
}

}  // namespace tensorhub
