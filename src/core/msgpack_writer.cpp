#include "core/msgpack_writer.hpp"

namespace tensorhub::core {

void MsgpackWriter::put_be(std::uint64_t value, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out_.push_back(static_cast<std::uint8_t>(value >> (8 * i)));
}

void MsgpackWriter::write_uint(std::uint64_t value) {
  if (value <= 0x7f) {
    out_.push_back(static_cast<std::uint8_t>(value));
  } else if (value <= 0xff) {
    out_.push_back(0xcc);
    put_be(value, 1);
  } else if (value <= 0xffff) {
    out_.push_back(0xcd);
    put_be(value, 2);
  } else if (value <= 0xffffffffu) {
    out_.push_back(0xce);
    put_be(value, 4);
  } else {
    out_.push_back(0xcf);
    put_be(value, 8);
  }
}

void MsgpackWriter::write_bool(bool value) { out_.push_back(value ? 0xc3 : 0xc2); }

void MsgpackWriter::write_nil() { out_.push_back(0xc0); }

void MsgpackWriter::write_str(std::string_view value) {
  const std::uint64_t n = value.size();
  if (n <= 31) {
    out_.push_back(static_cast<std::uint8_t>(0xa0 | n));
  } else if (n <= 0xff) {
    out_.push_back(0xd9);
    put_be(n, 1);
  } else if (n <= 0xffff) {
    out_.push_back(0xda);
    put_be(n, 2);
  } else {
    out_.push_back(0xdb);
    put_be(n, 4);
  }
  out_.insert(out_.end(), value.begin(), value.end());
}

void MsgpackWriter::write_bin(std::span<const std::uint8_t> value) {
  const std::uint64_t n = value.size();
  if (n <= 0xff) {
    out_.push_back(0xc4);
    put_be(n, 1);
  } else if (n <= 0xffff) {
    out_.push_back(0xc5);
    put_be(n, 2);
  } else {
    out_.push_back(0xc6);
    put_be(n, 4);
  }
  out_.insert(out_.end(), value.begin(), value.end());
}

void MsgpackWriter::write_array_header(std::uint32_t count) {
  if (count <= 15) {
    out_.push_back(static_cast<std::uint8_t>(0x90 | count));
  } else if (count <= 0xffff) {
    out_.push_back(0xdc);
    put_be(count, 2);
  } else {
    out_.push_back(0xdd);
    put_be(count, 4);
  }
}

void MsgpackWriter::write_map_header(std::uint32_t count) {
  if (count <= 15) {
    out_.push_back(static_cast<std::uint8_t>(0x80 | count));
  } else if (count <= 0xffff) {
    out_.push_back(0xde);
    put_be(count, 2);
  } else {
    out_.push_back(0xdf);
    put_be(count, 4);
  }
}

}  // namespace tensorhub::core
