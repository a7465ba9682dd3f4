#include <doctest/doctest.h>

#include <msgpack.hpp>  // msgpack-cxx: the reference implementation, as an oracle

#include "core/msgpack_reader.hpp"
#include "core/msgpack_writer.hpp"

using namespace tensorhub;
using core::MsgpackReader;
using core::MsgpackWriter;

namespace {
std::vector<std::uint8_t> from_sbuffer(const msgpack::sbuffer& b) {
  return {reinterpret_cast<const std::uint8_t*>(b.data()), reinterpret_cast<const std::uint8_t*>(b.data()) + b.size()};
}
}  // namespace

TEST_CASE("msgpack: the writer matches msgpack-cxx byte for byte at every width boundary") {
  for (std::uint64_t v : {0ull, 1ull, 127ull, 128ull, 255ull, 256ull, 65535ull, 65536ull, 4294967295ull,
                          4294967296ull, ~0ull}) {
    std::vector<std::uint8_t> ours;
    MsgpackWriter(ours).write_uint(v);
    msgpack::sbuffer ref;
    msgpack::pack(ref, v);
    CHECK(ours == from_sbuffer(ref));
    std::uint64_t back = 0;
    MsgpackReader r(ours);
    CHECK(r.read_uint("v", back));
    CHECK(back == v);
    CHECK(r.finish().is_ok());
  }
  for (std::size_t n : {0u, 1u, 31u, 32u, 255u, 256u, 65535u, 65536u}) {
    const std::string s(n, 'x');
    std::vector<std::uint8_t> ours;
    MsgpackWriter(ours).write_str(s);
    msgpack::sbuffer ref;
    msgpack::pack(ref, s);
    CHECK(ours == from_sbuffer(ref));
    std::string_view back;
    MsgpackReader r(ours);
    CHECK(r.read_str("s", back, n));
    CHECK(back == s);

    const std::vector<char> bin(n, 'y');
    std::vector<std::uint8_t> ours_bin;
    MsgpackWriter(ours_bin).write_bin({reinterpret_cast<const std::uint8_t*>(bin.data()), bin.size()});
    msgpack::sbuffer ref_bin;
    msgpack::packer<msgpack::sbuffer>(ref_bin).pack_bin(static_cast<std::uint32_t>(n)).pack_bin_body(bin.data(),
                                                                                                    static_cast<std::uint32_t>(n));
    CHECK(ours_bin == from_sbuffer(ref_bin));
  }
  for (std::uint32_t n : {0u, 15u, 16u, 65535u, 65536u}) {
    std::vector<std::uint8_t> ours;
    MsgpackWriter(ours).write_array_header(n);
    msgpack::sbuffer ref;
    msgpack::packer<msgpack::sbuffer>(ref).pack_array(n);
    CHECK(ours == from_sbuffer(ref));
    std::vector<std::uint8_t> ours_map;
    MsgpackWriter(ours_map).write_map_header(n);
    msgpack::sbuffer ref_map;
    msgpack::packer<msgpack::sbuffer>(ref_map).pack_map(n);
    CHECK(ours_map == from_sbuffer(ref_map));
  }
}

TEST_CASE("msgpack: msgpack-cxx reads what we write") {
  std::vector<std::uint8_t> out;
  MsgpackWriter w(out);
  w.write_map_header(2);
  w.write_str("n");
  w.write_uint(300);
  w.write_str("list");
  w.write_array_header(3);
  w.write_bool(true);
  w.write_nil();
  w.write_str("z");
  auto handle = msgpack::unpack(reinterpret_cast<const char*>(out.data()), out.size());
  const msgpack::object& o = handle.get();
  REQUIRE(o.type == msgpack::type::MAP);
  REQUIRE(o.via.map.size == 2);
  CHECK(o.via.map.ptr[0].val.as<int>() == 300);
  CHECK(o.via.map.ptr[1].val.via.array.size == 3);
}

TEST_CASE("msgpack: only shortest encodings are accepted") {
  auto rejects_uint = [](std::vector<std::uint8_t> bytes) {
    std::uint64_t v = 0;
    MsgpackReader r(bytes);
    return !r.read_uint("v", v) && r.status().message().find("shortest") != std::string::npos;
  };
  CHECK(rejects_uint({0xcc, 0x05}));
  CHECK(rejects_uint({0xcd, 0x00, 0xff}));
  CHECK(rejects_uint({0xce, 0x00, 0x00, 0xff, 0xff}));
  CHECK(rejects_uint({0xcf, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}));

  std::string_view s;
  std::vector<std::uint8_t> str8 = {0xd9, 0x02, 'h', 'i'};
  MsgpackReader rs(str8);
  CHECK_FALSE(rs.read_str("s", s, 10));
  std::vector<std::uint8_t> arr16 = {0xdc, 0x00, 0x01, 0x01};
  std::uint32_t count = 0;
  MsgpackReader ra(arr16);
  CHECK_FALSE(ra.read_array_header("a", count, 10));
  std::vector<std::uint8_t> bin16 = {0xc5, 0x00, 0x01, 0x00};
  std::span<const std::uint8_t> b;
  MsgpackReader rb(bin16);
  CHECK_FALSE(rb.read_bin("b", b, 10));
  std::vector<std::uint8_t> bin8 = {0xc4, 0x01, 0x00};  // bin8 is the shortest bin form
  MsgpackReader rb8(bin8);
  CHECK(rb8.read_bin("b", b, 10));
}

TEST_CASE("msgpack: bounds are checked before anything is allocated") {
  std::uint32_t count = 0;
  // An array that claims 2^32-1 elements in a 5-byte input.
  std::vector<std::uint8_t> huge = {0xdd, 0xff, 0xff, 0xff, 0xff};
  MsgpackReader r1(huge);
  CHECK_FALSE(r1.read_array_header("a", count, UINT32_MAX));
  CHECK(r1.status().message().find("remain") != std::string::npos);
  // Over the caller's limit.
  std::vector<std::uint8_t> ten = {0x9a, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  MsgpackReader r2(ten);
  CHECK_FALSE(r2.read_array_header("a", count, 9));
  // Element-size bound: 10 elements of at least 2 bytes cannot fit in 10 bytes.
  MsgpackReader r3(ten);
  CHECK_FALSE(r3.read_array_header("a", count, 100, 2));
  MsgpackReader r4(ten);
  CHECK(r4.read_array_header("a", count, 100, 1));
  CHECK(count == 10);
  // Strings longer than allowed, and truncated strings.
  std::vector<std::uint8_t> str = {0xa5, 'h', 'e', 'l', 'l', 'o'};
  std::string_view s;
  MsgpackReader r5(str);
  CHECK_FALSE(r5.read_str("s", s, 4));
  std::vector<std::uint8_t> cut(str.begin(), str.end() - 1);
  MsgpackReader r6(cut);
  CHECK_FALSE(r6.read_str("s", s, 10));
  CHECK(r6.status().message().find("truncated") != std::string::npos);
}

TEST_CASE("msgpack: errors stick, name the field and the offset, trailing bytes are caught") {
  std::vector<std::uint8_t> bytes = {0x01, 0xa1, 'x', 0x02};
  MsgpackReader r(bytes);
  std::uint64_t v = 0;
  CHECK(r.read_uint("first", v));
  CHECK_FALSE(r.read_uint("second", v));
  CHECK(r.status().message() ==
        "malformed at byte offset 1: second: expected an unsigned integer, found string (tag 0xa1)");
  CHECK_FALSE(r.read_uint("third", v));  // sticky
  CHECK(r.status().message().find("second") != std::string::npos);

  std::vector<std::uint8_t> extra = {0x01, 0x02};
  MsgpackReader t(extra);
  CHECK(t.read_uint("v", v));
  CHECK(t.finish().message().find("1 trailing bytes") != std::string::npos);
}
