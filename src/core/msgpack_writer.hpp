// Writes msgpack in its canonical form: every value in the shortest encoding
// the format allows. The same values always give the same bytes, which is
// what lets a hash of the bytes identify the values.
//
// Only the types TensorHub encodes are offered: unsigned integers, booleans,
// nil, strings, byte strings, arrays and maps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace tensorhub::core {

class MsgpackWriter {
 public:
  explicit MsgpackWriter(std::vector<std::uint8_t>& out) : out_(out) {}

  void write_uint(std::uint64_t value);
  void write_bool(bool value);
  void write_nil();
  void write_str(std::string_view value);
  void write_bin(std::span<const std::uint8_t> value);
  void write_array_header(std::uint32_t count);
  void write_map_header(std::uint32_t count);

  std::size_t size() const { return out_.size(); }

 private:
  void put_be(std::uint64_t value, int bytes);
  std::vector<std::uint8_t>& out_;
};

}  // namespace tensorhub::core
