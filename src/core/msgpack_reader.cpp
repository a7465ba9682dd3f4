#include "core/msgpack_reader.hpp"

#include <cstdio>

namespace tensorhub::core {
namespace {

std::string describe_tag(std::uint8_t tag) {
  const char* kind = "unknown type";
  if (tag <= 0x7f || tag == 0xcc || tag == 0xcd || tag == 0xce || tag == 0xcf) kind = "unsigned integer";
  else if (tag >= 0xe0 || (tag >= 0xd0 && tag <= 0xd3)) kind = "negative or signed integer";
  else if ((tag & 0xf0) == 0x80 || tag == 0xde || tag == 0xdf) kind = "map";
  else if ((tag & 0xf0) == 0x90 || tag == 0xdc || tag == 0xdd) kind = "array";
  else if ((tag & 0xe0) == 0xa0 || tag == 0xd9 || tag == 0xda || tag == 0xdb) kind = "string";
  else if (tag == 0xc4 || tag == 0xc5 || tag == 0xc6) kind = "byte string";
  else if (tag == 0xc0) kind = "nil";
  else if (tag == 0xc2 || tag == 0xc3) kind = "boolean";
  else if (tag == 0xca || tag == 0xcb) kind = "float";
  else if ((tag >= 0xc7 && tag <= 0xc9) || (tag >= 0xd4 && tag <= 0xd8)) kind = "extension";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s (tag 0x%02x)", kind, tag);
  return buf;
}

}  // namespace

bool MsgpackReader::fail_at(std::size_t offset, std::string_view field, std::string_view reason) {
  if (error_.is_ok()) {
    std::string message = "malformed at byte offset " + std::to_string(offset) + ": ";
    if (!field.empty()) {
      message += field;
      message += ": ";
    }
    message += reason;
    error_ = Status::corrupt(std::move(message));
  }
  return false;
}

bool MsgpackReader::fail(std::string_view field, std::string_view reason) { return fail_at(offset_, field, reason); }

bool MsgpackReader::take(std::string_view field, std::size_t n, const std::uint8_t*& out) {
  if (!ok()) return false;
  if (n > remaining()) {
    return fail(field, "truncated: needs " + std::to_string(n) + " more bytes, " + std::to_string(remaining()) +
                           " remain");
  }
  out = input_.data() + offset_;
  offset_ += n;
  return true;
}

bool MsgpackReader::read_be(std::string_view field, int bytes, std::uint64_t& out) {
  const std::uint8_t* p = nullptr;
  if (!take(field, static_cast<std::size_t>(bytes), p)) return false;
  out = 0;
  for (int i = 0; i < bytes; ++i) out = out << 8 | p[i];
  return true;
}

bool MsgpackReader::read_uint(std::string_view field, std::uint64_t& value) {
  const std::size_t start = offset_;
  const std::uint8_t* p = nullptr;
  if (!take(field, 1, p)) return false;
  const std::uint8_t tag = *p;
  if (tag <= 0x7f) {
    value = tag;
    return true;
  }
  int width = 0;
  std::uint64_t smallest = 0;  // the shortest-encoding rule
  switch (tag) {
    case 0xcc: width = 1; smallest = 0x80; break;
    case 0xcd: width = 2; smallest = 0x100; break;
    case 0xce: width = 4; smallest = 0x10000; break;
    case 0xcf: width = 8; smallest = 0x100000000ull; break;
    default: return fail_at(start, field, "expected an unsigned integer, found " + describe_tag(tag));
  }
  if (!read_be(field, width, value)) return false;
  if (value < smallest) return fail_at(start, field, "integer not in its shortest encoding");
  return true;
}

bool MsgpackReader::read_uint(std::string_view field, std::uint64_t& value, std::uint64_t max) {
  const std::size_t start = offset_;
  if (!read_uint(field, value)) return false;
  if (value > max) {
    return fail_at(start, field, std::to_string(value) + " exceeds the limit of " + std::to_string(max));
  }
  return true;
}

bool MsgpackReader::read_bool(std::string_view field, bool& value) {
  const std::size_t start = offset_;
  const std::uint8_t* p = nullptr;
  if (!take(field, 1, p)) return false;
  if (*p == 0xc2 || *p == 0xc3) {
    value = *p == 0xc3;
    return true;
  }
  return fail_at(start, field, "expected a boolean, found " + describe_tag(*p));
}

// Reads the length of a str, bin, array or map whose tag is already taken.
// Canonical form: a length must use the shortest header that can hold it.
bool MsgpackReader::read_length(std::string_view field, std::uint8_t tag, ContainerKind kind, std::uint64_t& length) {
  const std::size_t start = offset_ - 1;
  struct Form {
    std::uint8_t tag;
    int width;
    std::uint64_t smallest;  // the shortest-encoding rule
  };
  static constexpr Form kString[] = {{0xd9, 1, 32}, {0xda, 2, 0x100}, {0xdb, 4, 0x10000}};
  static constexpr Form kBinary[] = {{0xc4, 1, 0}, {0xc5, 2, 0x100}, {0xc6, 4, 0x10000}};
  static constexpr Form kArray[] = {{0xdc, 2, 16}, {0xdd, 4, 0x10000}};
  static constexpr Form kMap[] = {{0xde, 2, 16}, {0xdf, 4, 0x10000}};
  std::span<const Form> forms;
  const char* name = "";
  switch (kind) {
    case ContainerKind::kString:
      if ((tag & 0xe0) == 0xa0) { length = tag & 0x1f; return true; }
      forms = kString;
      name = "string";
      break;
    case ContainerKind::kBinary:
      forms = kBinary;
      name = "byte string";
      break;
    case ContainerKind::kArray:
      if ((tag & 0xf0) == 0x90) { length = tag & 0x0f; return true; }
      forms = kArray;
      name = "array";
      break;
    case ContainerKind::kMap:
      if ((tag & 0xf0) == 0x80) { length = tag & 0x0f; return true; }
      forms = kMap;
      name = "map";
      break;
  }
  for (const Form& form : forms) {
    if (form.tag != tag) continue;
    if (!read_be(field, form.width, length)) return false;
    if (length < form.smallest) return fail_at(start, field, std::string(name) + " length not in its shortest encoding");
    return true;
  }
  return fail_at(start, field, std::string("expected a ") + name + ", found " + describe_tag(tag));
}

bool MsgpackReader::read_str(std::string_view field, std::string_view& value, std::size_t max_bytes) {
  const std::size_t start = offset_;
  const std::uint8_t* p = nullptr;
  if (!take(field, 1, p)) return false;
  std::uint64_t length = 0;
  if (!read_length(field, *p, ContainerKind::kString, length)) return false;
  if (length > max_bytes) {
    return fail_at(start, field, "string of " + std::to_string(length) + " bytes exceeds the limit of " +
                                     std::to_string(max_bytes));
  }
  const std::uint8_t* bytes = nullptr;
  if (!take(field, static_cast<std::size_t>(length), bytes)) return false;
  value = std::string_view(reinterpret_cast<const char*>(bytes), static_cast<std::size_t>(length));
  return true;
}

bool MsgpackReader::read_bin(std::string_view field, std::span<const std::uint8_t>& value, std::size_t max_bytes) {
  const std::size_t start = offset_;
  const std::uint8_t* p = nullptr;
  if (!take(field, 1, p)) return false;
  std::uint64_t length = 0;
  if (!read_length(field, *p, ContainerKind::kBinary, length)) return false;
  if (length > max_bytes) {
    return fail_at(start, field, "byte string of " + std::to_string(length) + " bytes exceeds the limit of " +
                                     std::to_string(max_bytes));
  }
  const std::uint8_t* bytes = nullptr;
  if (!take(field, static_cast<std::size_t>(length), bytes)) return false;
  value = std::span<const std::uint8_t>(bytes, static_cast<std::size_t>(length));
  return true;
}

bool MsgpackReader::read_bin_exact(std::string_view field, std::span<std::uint8_t> out) {
  const std::size_t start = offset_;
  std::span<const std::uint8_t> bytes;
  if (!read_bin(field, bytes, out.size())) return false;
  if (bytes.size() != out.size()) {
    return fail_at(start, field, "expected " + std::to_string(out.size()) + " bytes, found " +
                                     std::to_string(bytes.size()));
  }
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = bytes[i];
  return true;
}

bool MsgpackReader::read_array_header(std::string_view field, std::uint32_t& count, std::uint32_t max_count,
                                      std::size_t min_element_bytes) {
  const std::size_t start = offset_;
  const std::uint8_t* p = nullptr;
  if (!take(field, 1, p)) return false;
  std::uint64_t length = 0;
  if (!read_length(field, *p, ContainerKind::kArray, length)) return false;
  if (length > max_count) {
    return fail_at(start, field, "array of " + std::to_string(length) + " elements exceeds the limit of " +
                                     std::to_string(max_count));
  }
  if (min_element_bytes == 0) min_element_bytes = 1;
  if (length > remaining() / min_element_bytes) {
    return fail_at(start, field, "array claims " + std::to_string(length) + " elements but only " +
                                     std::to_string(remaining()) + " bytes remain");
  }
  count = static_cast<std::uint32_t>(length);
  return true;
}

bool MsgpackReader::read_map_header(std::string_view field, std::uint32_t& count, std::uint32_t max_count) {
  const std::size_t start = offset_;
  const std::uint8_t* p = nullptr;
  if (!take(field, 1, p)) return false;
  std::uint64_t length = 0;
  if (!read_length(field, *p, ContainerKind::kMap, length)) return false;
  if (length > max_count) {
    return fail_at(start, field, "map of " + std::to_string(length) + " entries exceeds the limit of " +
                                     std::to_string(max_count));
  }
  if (length > remaining() / 2) {
    return fail_at(start, field, "map claims " + std::to_string(length) + " entries but only " +
                                     std::to_string(remaining()) + " bytes remain");
  }
  count = static_cast<std::uint32_t>(length);
  return true;
}

bool MsgpackReader::expect_key(std::string_view key) {
  const std::size_t start = offset_;
  std::string_view found;
  if (!read_str(key, found, 256)) return false;
  if (found != key) return fail_at(start, "", "expected key \"" + std::string(key) + "\"");
  return true;
}

bool MsgpackReader::expect_array(std::string_view field, std::uint32_t count) {
  const std::size_t start = offset_;
  std::uint32_t found = 0;
  if (!read_array_header(field, found, count)) return false;
  if (found != count) {
    return fail_at(start, field, "expected an array of " + std::to_string(count) + ", found " +
                                     std::to_string(found) + " elements");
  }
  return true;
}

bool MsgpackReader::expect_map(std::string_view field, std::uint32_t count) {
  const std::size_t start = offset_;
  std::uint32_t found = 0;
  if (!read_map_header(field, found, count)) return false;
  if (found != count) {
    return fail_at(start, field, "expected a map of " + std::to_string(count) + ", found " +
                                     std::to_string(found) + " entries");
  }
  return true;
}

Status MsgpackReader::finish() const {
  if (!ok()) return error_;
  if (remaining() != 0) {
    return Status::corrupt("malformed at byte offset " + std::to_string(offset_) + ": " +
                           std::to_string(remaining()) + " trailing bytes");
  }
  return Status::ok();
}

}  // namespace tensorhub::core
