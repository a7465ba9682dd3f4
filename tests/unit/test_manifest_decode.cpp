// Each way a manifest encoding can be wrong, rejected with its reason.
#include <doctest/doctest.h>

#include <functional>

#include "core/msgpack_writer.hpp"
#include "manifest/manifest_codec.hpp"
#include "support/model_fixture.hpp"

using namespace tensorhub;
using namespace tensorhub::testing;
using core::MsgpackWriter;

namespace {

// The manifest body as an editable list of fields, encoded the way
// encode_body encodes them, so a test can change exactly one thing.
struct Field {
  std::string key;
  std::function<void(MsgpackWriter&)> value;
};

void write_tensor(MsgpackWriter& w, const TensorEntry& t, std::string_view dtype) {
  w.write_array_header(5);
  w.write_str(t.name);
  w.write_str(dtype);
  w.write_array_header(static_cast<std::uint32_t>(t.shape.size()));
  for (auto d : t.shape) w.write_uint(d);
  w.write_uint(t.byte_offset);
  w.write_uint(t.byte_length);
}

void write_tensors(MsgpackWriter& w, const std::vector<TensorEntry>& tensors) {
  w.write_array_header(static_cast<std::uint32_t>(tensors.size()));
  for (const auto& t : tensors) write_tensor(w, t, dtype_name(t.dtype));
}

void write_shards(MsgpackWriter& w, const std::vector<ShardEntry>& shards) {
  w.write_array_header(static_cast<std::uint32_t>(shards.size()));
  for (const auto& s : shards) {
    w.write_array_header(3);
    w.write_uint(s.byte_offset);
    w.write_uint(s.byte_length);
    w.write_bin(s.digest.view());
  }
}

std::vector<Field> fields_of(const ManifestBody& b) {
  return {
      {"format", [](MsgpackWriter& w) { w.write_uint(1); }},
      {"model", [b](MsgpackWriter& w) { w.write_str(b.model); }},
      {"version", [b](MsgpackWriter& w) { w.write_uint(b.version); }},
      {"parent", [b](MsgpackWriter& w) { w.write_bin(b.parent.bytes); }},
      {"created_ms", [b](MsgpackWriter& w) { w.write_uint(b.created_unix_ms); }},
      {"publisher", [b](MsgpackWriter& w) { w.write_bin(b.publisher.bytes); }},
      {"shard_hash", [b](MsgpackWriter& w) { w.write_str(shard_hash_name(b.shard_hash)); }},
      {"shard_size", [b](MsgpackWriter& w) { w.write_uint(b.shard_size); }},
      {"total_size", [b](MsgpackWriter& w) { w.write_uint(b.total_size); }},
      {"tensors", [b](MsgpackWriter& w) { write_tensors(w, b.tensors); }},
      {"shards", [b](MsgpackWriter& w) { write_shards(w, b.shards); }},
  };
}

std::vector<std::uint8_t> envelope(const std::vector<Field>& fields) {
  std::vector<std::uint8_t> out;
  MsgpackWriter w(out);
  w.write_array_header(2);
  w.write_map_header(static_cast<std::uint32_t>(fields.size()));
  for (const auto& f : fields) {
    w.write_str(f.key);
    f.value(w);
  }
  w.write_bin(std::vector<std::uint8_t>(64, 0));
  return out;
}

void set(std::vector<Field>& fields, const std::string& key, std::function<void(MsgpackWriter&)> value) {
  for (auto& f : fields) {
    if (f.key == key) f.value = std::move(value);
  }
}

struct Fixture {
  Fixture() {
    image = small_model(1, 256u << 10);
    manifest.emplace(build_small(image, test_identity()));
    body = manifest->body();
  }
  std::vector<std::byte> image;
  std::optional<Manifest> manifest;
  ManifestBody body;
};

// Decodes and returns the error message ("" when it decoded).
std::string rejection(const std::vector<std::uint8_t>& bytes) {
  auto r = decode_manifest(bytes);
  if (r.is_ok()) return "";
  CHECK(r.status().code() == StatusCode::kCorrupt);
  CHECK(r.status().message().find('\n') == std::string::npos);
  return r.status().message();
}

#define CHECK_REJECTS(bytes, words)                                          \
  do {                                                                       \
    const std::string message_ = rejection(bytes);                           \
    CHECK_MESSAGE(message_.find(words) != std::string::npos, "got: '" << message_ << "'"); \
    CHECK_FALSE(message_.empty());                                           \
  } while (0)

}  // namespace

TEST_CASE("decode: the test encoder mirrors the real one") {
  Fixture f;
  const auto bytes = envelope(fields_of(f.body));
  auto d = decode_manifest(bytes);
  REQUIRE_MESSAGE(d.is_ok(), d.status().to_string());
  CHECK(d->id() == f.manifest->id());
}

TEST_CASE("decode: truncation at every length, and trailing bytes") {
  Fixture f;
  const auto full = std::vector<std::uint8_t>(f.manifest->encoded().begin(), f.manifest->encoded().end());
  for (std::size_t n = 0; n < full.size(); ++n) {
    std::vector<std::uint8_t> cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    CHECK_FALSE(rejection(cut).empty());
  }
  auto longer = full;
  longer.push_back(0);
  CHECK_REJECTS(longer, "1 trailing bytes");
}

TEST_CASE("decode: wrong types, keys and formats") {
  Fixture f;
  auto fields = fields_of(f.body);
  set(fields, "version", [](MsgpackWriter& w) { w.write_str("3"); });
  CHECK_REJECTS(envelope(fields), "version: expected an unsigned integer, found string");

  fields = fields_of(f.body);
  set(fields, "format", [](MsgpackWriter& w) { w.write_uint(2); });
  CHECK_REJECTS(envelope(fields), "unsupported manifest format 2");

  fields = fields_of(f.body);
  std::swap(fields[1], fields[2]);
  CHECK_REJECTS(envelope(fields), "expected key \"model\"");

  // A 12th key is a part's "part", after "version", or else "views", last;
  // 13 are both; a 14th is never.
  fields = fields_of(f.body);
  fields.push_back({"extra", [](MsgpackWriter& w) { w.write_uint(0); }});
  CHECK_REJECTS(envelope(fields), "expected key \"views\"");
  fields.push_back({"more", [](MsgpackWriter& w) { w.write_uint(0); }});
  CHECK_REJECTS(envelope(fields), "expected key \"part\"");
  fields.push_back({"most", [](MsgpackWriter& w) { w.write_uint(0); }});
  CHECK_REJECTS(envelope(fields), "map of 14 entries exceeds the limit of 13");
  fields = fields_of(f.body);
  fields.erase(fields.begin() + 3);
  CHECK_REJECTS(envelope(fields), "expected 11 keys, one more for a part's manifest and one for views, found 10");

  fields = fields_of(f.body);
  set(fields, "parent", [](MsgpackWriter& w) { w.write_bin(std::vector<std::uint8_t>(31, 0)); });
  CHECK_REJECTS(envelope(fields), "parent: expected 32 bytes");

  fields = fields_of(f.body);
  set(fields, "shard_hash", [](MsgpackWriter& w) { w.write_str("md5"); });
  CHECK_REJECTS(envelope(fields), "unknown shard hash 'md5'");

  fields = fields_of(f.body);
  set(fields, "model", [](MsgpackWriter& w) { w.write_str("bad name!"); });
  CHECK_REJECTS(envelope(fields), "may hold only");

  // Version 1 as an 8-byte integer: valid msgpack, but not canonical.
  auto canonical = envelope(fields_of(f.body));
  // Find the "version" key, then replace its value 0x01 by cf 00 .. 01.
  const std::string key = "version";
  auto it = std::search(canonical.begin(), canonical.end(), key.begin(), key.end());
  REQUIRE(it != canonical.end());
  auto value = it + static_cast<std::ptrdiff_t>(key.size());
  REQUIRE(*value == 0x01);
  *value = 0xcf;
  canonical.insert(value + 1, {0, 0, 0, 0, 0, 0, 0, 1});
  CHECK_REJECTS(canonical, "version: integer not in its shortest encoding");

  auto bad_sig = envelope(fields_of(f.body));
  bad_sig.resize(bad_sig.size() - 1);
  bad_sig[bad_sig.size() - 64] = 63;  // bin8 length byte
  CHECK_REJECTS(bad_sig, "signature: expected 64 bytes");
}

TEST_CASE("decode: absurd counts and sizes are refused before allocation") {
  Fixture f;
  auto fields = fields_of(f.body);
  set(fields, "tensors", [](MsgpackWriter& w) { w.write_array_header(0xffffffffu); });
  CHECK_REJECTS(envelope(fields), "exceeds the limit");

  fields = fields_of(f.body);
  set(fields, "tensors", [](MsgpackWriter& w) { w.write_array_header(1000000); });
  CHECK_REJECTS(envelope(fields), "bytes remain");

  fields = fields_of(f.body);
  set(fields, "shards", [](MsgpackWriter& w) { w.write_array_header(static_cast<std::uint32_t>(kMaxShards)); });
  CHECK_REJECTS(envelope(fields), "bytes remain");

  fields = fields_of(f.body);
  set(fields, "shard_size", [](MsgpackWriter& w) { w.write_uint(4ull << 30); });
  CHECK_REJECTS(envelope(fields), "shard_size: 4294967296 exceeds the limit");

  fields = fields_of(f.body);
  set(fields, "total_size", [](MsgpackWriter& w) { w.write_uint(~0ull); });
  CHECK_REJECTS(envelope(fields), "total_size");

  fields = fields_of(f.body);
  set(fields, "tensors", [](MsgpackWriter& w) {
    w.write_array_header(1);
    w.write_array_header(5);
    w.write_str(std::string(5000, 'n'));
  });
  CHECK_REJECTS(envelope(fields), "tensor name: string of 5000 bytes exceeds the limit");

  fields = fields_of(f.body);
  set(fields, "tensors", [](MsgpackWriter& w) {
    w.write_array_header(1);
    w.write_array_header(5);
    w.write_str("t");
    w.write_str("U8");
    w.write_array_header(40);
  });
  CHECK_REJECTS(envelope(fields), "tensor shape: array of 40 elements exceeds the limit of 32");
}

TEST_CASE("decode: shards must tile the image exactly") {
  Fixture f;
  auto body = f.body;
  body.shards.pop_back();
  CHECK_REJECTS(envelope(fields_of(body)), "needs " + std::to_string(f.body.shards.size()));

  body = f.body;
  body.shards[1].byte_offset += 1;
  CHECK_REJECTS(envelope(fields_of(body)), "shard 1 covers");

  body = f.body;
  body.shards.back().byte_length += 1;
  CHECK_REJECTS(envelope(fields_of(body)), "to tile the image");

  body = f.body;
  body.shards[0].digest.size = 15;
  CHECK_REJECTS(envelope(fields_of(body)), "shard digest: expected 16 bytes");

  body = f.body;
  body.total_size = 0;
  body.shards.clear();
  CHECK_REJECTS(envelope(fields_of(body)), "the image is empty");

  body = f.body;
  body.shard_size = 100000;  // not a power of two; give it a shard table that tiles
  body.shards.clear();
  for (std::uint64_t off = 0; off < body.total_size; off += body.shard_size) {
    body.shards.push_back({off, std::min<std::uint64_t>(body.shard_size, body.total_size - off), f.body.shards[0].digest});
  }
  CHECK_REJECTS(envelope(fields_of(body)), "not a power of two");
}

TEST_CASE("decode: tensors must be known, consistent, in bounds, ordered and disjoint") {
  Fixture f;
  auto fields = fields_of(f.body);
  set(fields, "tensors", [b = f.body](MsgpackWriter& w) {
    w.write_array_header(static_cast<std::uint32_t>(b.tensors.size()));
    for (std::size_t i = 0; i < b.tensors.size(); ++i) write_tensor(w, b.tensors[i], i == 2 ? "F4" : dtype_name(b.tensors[i].dtype));
  });
  CHECK_REJECTS(envelope(fields), "unknown dtype 'F4'");

  auto body = f.body;
  body.tensors.back().byte_offset = body.total_size;  // past the end
  CHECK_REJECTS(envelope(fields_of(body)), "outside the image");

  body = f.body;
  body.tensors[1].byte_offset -= 2;
  CHECK_REJECTS(envelope(fields_of(body)), "overlap");

  body = f.body;
  body.tensors[0].shape[0] += 1;
  CHECK_REJECTS(envelope(fields_of(body)), "with this shape needs");

  body = f.body;
  std::swap(body.tensors[0], body.tensors[1]);
  CHECK_REJECTS(envelope(fields_of(body)), "out of order");

  body = f.body;
  body.tensors[1].name = body.tensors[0].name;
  CHECK_REJECTS(envelope(fields_of(body)), "appears twice");
}
