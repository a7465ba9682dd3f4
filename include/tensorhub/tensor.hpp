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

namespace tensorhub {

// Where one tensor lives in a flat image. Offsets are bytes from the start of
// the image. Invariant (checked by validate_tensor_table): byte_length equals
// dtype_size(dtype) times the product of shape.
struct TensorEntry {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<std::uint64_t> shape;
  std::uint64_t byte_offset = 0;
  std::uint64_t byte_length = 0;

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
// is one).
// Errors: kInvalidArgument (the first rule broken; the message names the
// offending tensor).
Status validate_tensor_table(std::span<const TensorEntry> tensors, std::uint64_t image_size);

inline constexpr std::size_t kMaxTensorNameBytes = 4096;
inline constexpr std::size_t kMaxTensorRank = 32;

}  // namespace tensorhub
