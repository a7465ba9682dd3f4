// Manifests of one part of a version published in parts: the "part" field
// and tensors that are slices of larger ones (TensorEntry::global_shape,
// slice_begin), encoded only when set.
#include <doctest/doctest.h>

#include <algorithm>

#include "core/msgpack_writer.hpp"
#include "core/random_fill.hpp"
#include "manifest/manifest_codec.hpp"
#include "support/model_fixture.hpp"

using namespace tensorhub;
using namespace tensorhub::testing;

namespace {

// Rank 1 of 4 in an FSDP-style split: rows 2..3 of an [8, 16] F32 weight,
// a whole bias, and columns 4..7 of a [4, 16] BF16 projection.
std::vector<TensorEntry> part_tensors() {
  std::vector<TensorEntry> t(3);
  t[0] = TensorEntry{"w", DType::kF32, {2, 16}, 0, 2 * 16 * 4, {8, 16}, {2, 0}};
  t[1] = TensorEntry{"b", DType::kF32, {16}, 128, 16 * 4};
  t[2] = TensorEntry{"p", DType::kBF16, {4, 4}, 192, 4 * 4 * 2, {4, 16}, {0, 4}};
  return t;
}

std::vector<std::byte> part_image() {
  std::vector<std::byte> image(224);
  core::fill_pseudo_random(image, 48);
  return image;
}

ManifestBuildOptions part_options(std::uint32_t index = 1, std::uint32_t count = 4) {
  ManifestBuildOptions o = small_options();
  o.part = PartOf{index, count};
  return o;
}

// The signed encoding of `body` as decode_manifest reads it, valid or not.
std::vector<std::uint8_t> envelope_of(const ManifestBody& body) {
  std::vector<std::uint8_t> out;
  core::MsgpackWriter w(out);
  w.write_array_header(2);
  const auto encoded = manifest_detail::encode_body(body);
  out.insert(out.end(), encoded.begin(), encoded.end());
  w.write_bin(std::vector<std::uint8_t>(64, 0));
  return out;
}

std::string build_error(const ManifestBuildOptions& options, std::vector<TensorEntry> tensors) {
  auto m = build_manifest(options, part_image(), std::move(tensors), test_identity());
  if (m.is_ok()) return "";
  CHECK(m.status().code() == StatusCode::kInvalidArgument);
  return m.status().message();
}

}  // namespace

TEST_CASE("part manifests: a part and its slices round-trip, and a whole version's encoding is as before") {
  const auto image = part_image();
  auto m = build_manifest(part_options(), image, part_tensors(), test_identity());
  REQUIRE_MESSAGE(m.is_ok(), m.status().to_string());
  REQUIRE(m->part().has_value());
  CHECK(*m->part() == PartOf{1, 4});
  const auto& tensors = m->tensors();
  REQUIRE(tensors.size() == 3);
  CHECK(tensors[0].is_slice());
  CHECK(tensors[0].slice() == TensorSlice{{{2, 4}, {0, 16}}});
  CHECK(tensors[0].whole_shape() == std::vector<std::uint64_t>{8, 16});
  CHECK_FALSE(tensors[1].is_slice());
  CHECK(tensors[1].slice() == TensorSlice{{{0, 16}}});
  CHECK(tensors[2].slice() == TensorSlice{{{0, 4}, {4, 8}}});

  auto decoded = decode_manifest(m->encoded());
  REQUIRE_MESSAGE(decoded.is_ok(), decoded.status().to_string());
  CHECK(decoded->body() == m->body());
  CHECK(decoded->id() == m->id());
  // The part is signed: another index is another manifest.
  auto other = build_manifest(part_options(2), image, part_tensors(), test_identity());
  REQUIRE(other.is_ok());
  CHECK(other->id() != m->id());

  // Without parts and slices, the encoding has the 11 keys and 5-field
  // tensors it always had: whole versions keep their ids.
  std::vector<TensorEntry> whole{TensorEntry{"b", DType::kF32, {56}, 0, 224}};
  auto plain = build_manifest(small_options(), image, whole, test_identity());
  REQUIRE(plain.is_ok());
  CHECK_FALSE(plain->part().has_value());
  const auto bytes = plain->encoded();
  CHECK(bytes[1] == 0x8b);  // fixmap of 11 keys
  auto as_part = build_manifest(part_options(0, 1), image, whole, test_identity());
  REQUIRE(as_part.is_ok());
  CHECK(as_part->encoded()[1] == 0x8c);  // 12 keys
}

TEST_CASE("part manifests: bad parts and slices are refused, naming the tensor") {
  CHECK(build_error(part_options(4, 4), part_tensors()).find("part 4 of 4") != std::string::npos);
  CHECK(build_error(part_options(0, 0), part_tensors()).find("part 0 of 0") != std::string::npos);
  CHECK_FALSE(build_error(part_options(0, kMaxParts + 1), part_tensors()).empty());
  CHECK(build_error(part_options(kMaxParts - 1, kMaxParts), part_tensors()).empty());

  auto tensors = part_tensors();
  tensors[0].slice_begin = {7, 0};  // rows 7..8 of 8
  CHECK(build_error(part_options(), tensors).find("tensor 'w': its slice along dimension 0, 7 + 2") !=
        std::string::npos);
  tensors = part_tensors();
  tensors[0].global_shape = {2, 16};  // all of it
  tensors[0].slice_begin = {0, 0};
  CHECK(build_error(part_options(), tensors).find("tensor 'w' is all of its global tensor") != std::string::npos);
  tensors = part_tensors();
  tensors[0].slice_begin = {2};
  CHECK(build_error(part_options(), tensors).find("tensor 'w' is a slice of rank 2") != std::string::npos);
  tensors = part_tensors();
  tensors[0].global_shape = {1ull << 62, 16};
  tensors[0].slice_begin = {0, 0};
  CHECK(build_error(part_options(), tensors).find("global shape whose size overflows") != std::string::npos);
  CHECK(build_error(small_options(), part_tensors()).find("only a part's manifest holds slices") !=
        std::string::npos);
}

TEST_CASE("part manifests: the decoder refuses what the builder would not make") {
  auto m = build_manifest(part_options(), part_image(), part_tensors(), test_identity());
  REQUIRE(m.is_ok());
  auto rejects = [](const ManifestBody& body, const std::string& words) {
    auto r = decode_manifest(envelope_of(body));
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == StatusCode::kCorrupt);
    CHECK_MESSAGE(r.status().message().find(words) != std::string::npos, r.status().message());
  };
  ManifestBody body = m->body();
  body.part = PartOf{5, 4};
  rejects(body, "part 5 of 4");
  body = m->body();
  body.part.reset();  // slices in a whole version's manifest
  rejects(body, "only a part's manifest holds slices");
  body = m->body();
  body.tensors[2].slice_begin = {0, 13};
  rejects(body, "tensor 'p': its slice along dimension 1");

  // Structure: a tensor entry of 6 fields, and maps of 13 and 14 keys.
  auto bytes = envelope_of(m->body());
  const std::uint8_t entry_of_w[] = {0x97, 0xa1, 'w'};  // an array of 7, then the name "w"
  const auto at = std::search(bytes.begin(), bytes.end(), std::begin(entry_of_w), std::end(entry_of_w));
  REQUIRE(at != bytes.end());
  *at = 0x96;
  CHECK(decode_manifest(bytes).status().message().find("expected 5 fields, or 7 for a slice, found 6") !=
        std::string::npos);
  bytes = envelope_of(m->body());
  REQUIRE(bytes[1] == 0x8c);
  bytes[1] = 0x8d;  // 13 keys: a part's, and views that are not there
  // (the signature stands where the key "views" must)
  CHECK(decode_manifest(bytes).status().message().find("views: expected a string") != std::string::npos);
  bytes[1] = 0x8e;
  CHECK(decode_manifest(bytes).status().message().find("map of 14 entries exceeds the limit of 13") !=
        std::string::npos);
  // Every truncation of a part's manifest is refused.
  const auto whole = envelope_of(m->body());
  for (std::size_t n = 0; n < whole.size(); ++n) {
    CHECK_FALSE(decode_manifest(std::span(whole).first(n)).is_ok());
  }
}
