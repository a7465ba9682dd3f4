#include <doctest/doctest.h>

#include "core/byte_size.hpp"

using tensorhub::core::format_byte_size;
using tensorhub::core::parse_byte_size;

TEST_CASE("byte sizes parse with binary and decimal suffixes") {
  CHECK(*parse_byte_size("65536") == 65536);
  CHECK(*parse_byte_size("64KiB") == 65536);
  CHECK(*parse_byte_size("64k") == 65536);
  CHECK(*parse_byte_size("16MiB") == 16ull << 20);
  CHECK(*parse_byte_size("1GiB") == 1ull << 30);
  CHECK(*parse_byte_size("1gib") == 1ull << 30);
  CHECK(*parse_byte_size("2GB") == 2000000000ull);
  CHECK(*parse_byte_size("1.5GiB") == 3ull << 29);
  CHECK(*parse_byte_size("10 MiB") == 10ull << 20);
  CHECK(*parse_byte_size("0") == 0);
}

TEST_CASE("byte sizes reject junk, fractions of a byte and overflow") {
  CHECK_FALSE(parse_byte_size("").is_ok());
  CHECK_FALSE(parse_byte_size("MiB").is_ok());
  CHECK_FALSE(parse_byte_size("12XB").is_ok());
  CHECK_FALSE(parse_byte_size("-1").is_ok());
  CHECK_FALSE(parse_byte_size("1.5").is_ok());
  CHECK_FALSE(parse_byte_size("99999999999999999999").is_ok());
  CHECK_FALSE(parse_byte_size("20000000TiB").is_ok());
  CHECK(parse_byte_size("12XB").status().message().find("unknown unit") != std::string::npos);
}

TEST_CASE("byte sizes format with three significant digits") {
  CHECK(format_byte_size(0) == "0 B");
  CHECK(format_byte_size(1023) == "1023 B");
  CHECK(format_byte_size(1024) == "1.00 KiB");
  CHECK(format_byte_size(16ull << 20) == "16.0 MiB");
  CHECK(format_byte_size(3ull << 29) == "1.50 GiB");
  CHECK(format_byte_size(200ull << 30) == "200 GiB");
}
