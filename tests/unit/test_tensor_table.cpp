#include <doctest/doctest.h>

#include "tensorhub/tensor.hpp"

using namespace tensorhub;

namespace {
TensorEntry tensor(std::string name, DType dtype, std::vector<std::uint64_t> shape, std::uint64_t offset) {
  TensorEntry t{std::move(name), dtype, std::move(shape), offset, 0};
  t.byte_length = *tensor_byte_length(t.dtype, t.shape);
  return t;
}
bool rejects(const std::vector<TensorEntry>& t, std::uint64_t size, const std::string& words) {
  Status s = validate_tensor_table(t, size);
  if (s.is_ok()) return false;
  if (s.message().find(words) == std::string::npos) {
    MESSAGE("message was: " << s.message());
    return false;
  }
  return true;
}
}  // namespace

TEST_CASE("dtypes: names, sizes and lengths") {
  CHECK(dtype_name(DType::kBF16) == "BF16");
  CHECK(dtype_size(DType::kF64) == 8);
  CHECK(dtype_from_name("F8_E4M3") == DType::kF8E4M3);
  CHECK_FALSE(dtype_from_name("F4").has_value());
  CHECK_FALSE(dtype_from_name("f32").has_value());
  const std::uint64_t shape[] = {3, 4};
  CHECK(tensor_byte_length(DType::kF32, shape) == 48);
  CHECK(tensor_byte_length(DType::kF32, {}) == 4);  // a scalar
  const std::uint64_t overflow[] = {1ull << 40, 1ull << 40};
  CHECK_FALSE(tensor_byte_length(DType::kU8, overflow).has_value());
}

TEST_CASE("tensor table: valid tables pass, gaps allowed") {
  std::vector<TensorEntry> t = {tensor("a", DType::kF32, {2, 2}, 100), tensor("b", DType::kU8, {5}, 116),
                                tensor("empty", DType::kF16, {0, 3}, 200)};
  CHECK(validate_tensor_table(t, 200).is_ok());
}

TEST_CASE("tensor table: each rule rejects with a reason") {
  CHECK(rejects({tensor("", DType::kU8, {1}, 0)}, 10, "empty name"));
  CHECK(rejects({tensor(std::string(5000, 'n'), DType::kU8, {1}, 0)}, 10, "longer than"));
  CHECK(rejects({tensor("bad\xff", DType::kU8, {1}, 0)}, 10, "not UTF-8"));
  CHECK(rejects({tensor("\xc0\x80", DType::kU8, {1}, 0)}, 10, "not UTF-8"));  // overlong NUL
  CHECK(rejects({tensor("a", DType::kU8, {1}, 0), tensor("a", DType::kU8, {1}, 1)}, 10, "appears twice"));
  CHECK(rejects({tensor("a", DType::kU8, std::vector<std::uint64_t>(33, 1), 0)}, 10, "rank"));
  TensorEntry wrong = tensor("w", DType::kF32, {2}, 0);
  wrong.byte_length = 7;
  CHECK(rejects({wrong}, 10, "needs 8 bytes"));
  CHECK(rejects({tensor("o", DType::kF32, {2}, 5)}, 10, "outside the image"));
  CHECK(rejects({tensor("o", DType::kU8, {1}, ~0ull)}, 10, "outside the image"));
  CHECK(rejects({tensor("a", DType::kU8, {4}, 0), tensor("b", DType::kU8, {4}, 3)}, 10, "overlap"));
  CHECK(rejects({tensor("big", DType::kU8, {1ull << 40, 1ull << 40}, 0)}, 10, "overflows"));
  const std::vector<TensorEntry> unicode = {tensor("ü-名前", DType::kU8, {1}, 0)};
  CHECK(validate_tensor_table(unicode, 10).is_ok());
}
