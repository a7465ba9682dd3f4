// Descriptions of tensors inside a flat byte image.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tensorhub/dtype.hpp"
#include "tensorhub/status.hpp"
#include "tensorhub/tensor_slice.hpp"

namespace tensorhub {

// Where one tensor lives in a flat image. Offsets are bytes from the start of
// the image. Invariant (checked by validate_tensor_table): byte_length equals
// dtype_size(dtype) times the product of shape.
//
// In the manifest of one part of a version (a trainer rank's), a tensor may
// be a rectangular slice of a larger one: `global_shape` is the whole
// tensor's shape and `slice_begin` where the slice starts in it; the slice's
// extents are `shape`. Both are empty for a whole tensor.
struct TensorEntry {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<std::uint64_t> shape;
  std::uint64_t byte_offset = 0;
  std::uint64_t byte_length = 0;
  std::vector<std::uint64_t> global_shape = {};  // empty: the tensor is whole
  std::vector<std::uint64_t> slice_begin = {};   // empty: the tensor is whole

  bool is_slice() const { return !global_shape.empty() || !slice_begin.empty(); }
  // The shape of the whole tensor: global_shape, or shape for a whole one.
  const std::vector<std::uint64_t>& whole_shape() const { return is_slice() ? global_shape : shape; }
  // What this entry holds of the whole tensor (all of it when whole).
  // REQUIRES: the entry passed validate_tensor_table.
  TensorSlice slice() const;

  friend bool operator==(const TensorEntry&, const TensorEntry&) = default;
};

// A tensor and a read-only view of its bytes. The view borrows: whoever owns
// the memory (a mapped file, a published region) must outlive it.
struct TensorView {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<std::uint64_t> shape;
  std::span<const std::byte> data;
};

// The byte length a tensor of this dtype and shape must have, or nullopt when
// it overflows 64 bits.
std::optional<std::uint64_t> tensor_byte_length(DType dtype, std::span<const std::uint64_t> shape);

// Checks a tensor table against an image of `image_size` bytes: names are
// non-empty UTF-8, at most kMaxTensorNameBytes and unique; ranks are at most
// kMaxTensorRank; dtype times shape matches each length; every tensor lies
// inside the image; no two overlap. Gaps are allowed (a safetensors header
// is one). A slice (TensorEntry::is_slice) gives global_shape and
// slice_begin of its own rank, lies inside the whole tensor, is not all of
// it (a whole tensor is written without them), and the whole tensor's byte
// length fits in 64 bits.
// Errors: kInvalidArgument (the first rule broken; the message names the
// offending tensor).
Status validate_tensor_table(std::span<const TensorEntry> tensors, std::uint64_t image_size);

inline constexpr std::size_t kMaxTensorNameBytes = 4096;
inline constexpr std::size_t kMaxTensorRank = 32;

}  // namespace tensorhub
