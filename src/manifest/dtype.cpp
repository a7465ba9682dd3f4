#include "tensorhub/dtype.hpp"

#include <array>

namespace tensorhub {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  std::uint32_t size;
};

constexpr std::array<DTypeInfo, 16> kDTypes = {{
    {DType::kBool, "BOOL", 1},
    {DType::kU8, "U8", 1},
    {DType::kI8, "I8", 1},
    {DType::kF8E5M2, "F8_E5M2", 1},
    {DType::kF8E4M3, "F8_E4M3", 1},
    {DType::kF8E8M0, "F8_E8M0", 1},
    {DType::kU16, "U16", 2},
    {DType::kI16, "I16", 2},
    {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2},
    {DType::kU32, "U32", 4},
    {DType::kI32, "I32", 4},
    {DType::kF32, "F32", 4},
    {DType::kU64, "U64", 8},
    {DType::kI64, "I64", 8},
    {DType::kF64, "F64", 8},
}};

const DTypeInfo& info(DType dtype) {
  for (const auto& i : kDTypes) {
    if (i.dtype == dtype) return i;
  }
  return kDTypes[1];  // unreachable for valid enum values
}

}  // namespace

std::string_view dtype_name(DType dtype) { return info(dtype).name; }

std::uint32_t dtype_size(DType dtype) { return info(dtype).size; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& i : kDTypes) {
    if (i.name == name) return i.dtype;
  }
  return std::nullopt;
}

}  // namespace tensorhub
