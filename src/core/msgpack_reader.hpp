// A strict, bounded, zero-copy msgpack pull reader.
//
// Strict: only canonical (shortest) encodings are accepted, so a successful
// decode followed by MsgpackWriter reproduces the input byte for byte.
// Bounded: every length is checked against the caller's limit and against the
// bytes that remain before anything is allocated, so a few bytes of input can
// never claim gigabytes. Zero-copy: strings and byte strings are views into
// the input.
//
// The first failure sticks: later reads fail too, and status() reports the
// first one as "malformed at byte offset X: <field>: <reason>".
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "tensorhub/status.hpp"

namespace tensorhub::core {

class MsgpackReader {
 public:
  explicit MsgpackReader(std::span<const std::uint8_t> input) : input_(input) {}

  // Each read names the field it reads, for the error message, and returns
  // false on failure.
  bool read_uint(std::string_view field, std::uint64_t& value);
  // Also fails when value > max.
  bool read_uint(std::string_view field, std::uint64_t& value, std::uint64_t max);
  bool read_bool(std::string_view field, bool& value);
  bool read_str(std::string_view field, std::string_view& value, std::size_t max_bytes);
  bool read_bin(std::string_view field, std::span<const std::uint8_t>& value, std::size_t max_bytes);
  // A byte string of exactly out.size() bytes, copied into out.
  bool read_bin_exact(std::string_view field, std::span<std::uint8_t> out);
  // An array header. Each element takes at least `min_element_bytes` bytes
  // (at least 1), so count * min_element_bytes must fit in what remains.
  bool read_array_header(std::string_view field, std::uint32_t& count, std::uint32_t max_count,
                         std::size_t min_element_bytes = 1);
  // A map header; each entry takes at least 2 bytes.
  bool read_map_header(std::string_view field, std::uint32_t& count, std::uint32_t max_count);
  // Reads a string and fails unless it equals `key`.
  bool expect_key(std::string_view key);
  // An array or map header with exactly `count` entries.
  bool expect_array(std::string_view field, std::uint32_t count);
  bool expect_map(std::string_view field, std::uint32_t count);

  // Records a failure at the current offset (for checks made by the caller).
  bool fail(std::string_view field, std::string_view reason);
  bool fail_at(std::size_t offset, std::string_view field, std::string_view reason);

  bool ok() const { return error_.is_ok(); }
  std::size_t offset() const { return offset_; }
  std::size_t remaining() const { return input_.size() - offset_; }
  // The first error, or "trailing bytes" when input remains, or ok.
  Status finish() const;
  const Status& status() const { return error_; }

 private:
  bool take(std::string_view field, std::size_t n, const std::uint8_t*& out);
  bool read_be(std::string_view field, int bytes, std::uint64_t& out);
  enum class ContainerKind { kString, kBinary, kArray, kMap };
  bool read_length(std::string_view field, std::uint8_t tag, ContainerKind kind, std::uint64_t& length);

  std::span<const std::uint8_t> input_;
  std::size_t offset_ = 0;
  Status error_;
};

}  // namespace tensorhub::core
