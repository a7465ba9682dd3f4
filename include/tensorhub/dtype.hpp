// Element types of tensors, named as safetensors names them.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace tensorhub {

enum class DType : std::uint8_t {
  kBool,
  kU8, kI8,
  kF8E5M2, kF8E4M3, kF8E8M0,
  kU16, kI16, kF16, kBF16,
  kU32, kI32, kF32,
  kU64, kI64, kF64,
};

// "F32", "BF16", ...: the safetensors spelling, used in manifests too.
std::string_view dtype_name(DType dtype);
// The inverse of dtype_name; nullopt for an unknown name.
std::optional<DType> dtype_from_name(std::string_view name);
// Bytes per element.
std::uint32_t dtype_size(DType dtype);

}  // namespace tensorhub
