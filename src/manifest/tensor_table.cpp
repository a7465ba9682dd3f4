#include <algorithm>
#include <numeric>
#include <string>
#include <string_view>
#include <unordered_set>

#include "core/quoted.hpp"
#include "tensorhub/tensor.hpp"

namespace tensorhub {
namespace {

using core::quoted;

// Strict UTF-8: no overlongs, no surrogates, nothing above U+10FFFF.
bool is_valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t extra = 0;
    std::uint32_t cp = 0, min = 0;
    if (c < 0x80) { ++i; continue; }
    if ((c & 0xe0) == 0xc0) { extra = 1; cp = c & 0x1f; min = 0x80; }
    else if ((c & 0xf0) == 0xe0) { extra = 2; cp = c & 0x0f; min = 0x800; }
    else if ((c & 0xf8) == 0xf0) { extra = 3; cp = c & 0x07; min = 0x10000; }
    else return false;
    if (s.size() - i <= extra) return false;
    for (std::size_t k = 1; k <= extra; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = cp << 6 | (cc & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += extra + 1;
  }
  return true;
}

}  // namespace

std::optional<std::uint64_t> tensor_byte_length(DType dtype, std::span<const std::uint64_t> shape) {
  std::uint64_t total = dtype_size(dtype);
  for (std::uint64_t dim : shape) {
    if (dim != 0 && total > UINT64_MAX / dim) return std::nullopt;
    total *= dim;
  }
  return total;
}

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
