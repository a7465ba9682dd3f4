#include <doctest/doctest.h>

#include "core/hash.hpp"
#include "core/random_fill.hpp"
#include "manifest/synthetic_model.hpp"
#include "support/model_fixture.hpp"
#include "support/temp_dir.hpp"
#include "tensorhub/manifest.hpp"

using namespace tensorhub;
using namespace tensorhub::testing;

TEST_CASE("manifest: build, encode, decode round trip") {
  const auto image = small_model();
  const Identity key = test_identity();
  const Manifest m = build_small(image, key);
  CHECK(m.model() == "policy");
  CHECK(m.version() == 1);
  CHECK(m.parent().is_zero());
  CHECK(m.publisher() == key.public_key());
  CHECK(m.total_size() == image.size());
  CHECK(m.shard_count() == (image.size() + (64u << 10) - 1) / (64u << 10));
  CHECK(m.tensors().size() == 22);  // ceil(1 MiB / 48 KiB)

  auto decoded = decode_manifest(m.encoded());
  REQUIRE(decoded.is_ok());
  CHECK(decoded->body() == m.body());
  CHECK(decoded->id() == m.id());
  CHECK(decoded->signature() == m.signature());
  CHECK(std::vector<std::uint8_t>(decoded->encoded().begin(), decoded->encoded().end()) ==
        std::vector<std::uint8_t>(m.encoded().begin(), m.encoded().end()));
}

TEST_CASE("manifest: the automatic shard size gives at least 2,048 shards, from 128 KiB to 256 MiB") {
  constexpr std::uint64_t KiB = 1ull << 10, MiB = 1ull << 20, GiB = 1ull << 30;
  CHECK(auto_shard_size(0) == 128 * KiB);
  CHECK(auto_shard_size(1) == 128 * KiB);
  CHECK(auto_shard_size(256 * MiB) == 128 * KiB);
  CHECK(auto_shard_size(512 * MiB - 1) == 128 * KiB);
  CHECK(auto_shard_size(512 * MiB) == 256 * KiB);
  CHECK(auto_shard_size(1 * GiB) == 512 * KiB);
  CHECK(auto_shard_size(2 * GiB) == MiB);
  CHECK(auto_shard_size(4 * GiB - 1) == MiB);
  CHECK(auto_shard_size(4 * GiB) == 2 * MiB);
  CHECK(auto_shard_size(4 * GiB + 4096) == 2 * MiB);  // a safetensors header does not double it
  CHECK(auto_shard_size(14'000'000'000) == 4 * MiB);
  CHECK(auto_shard_size(128 * GiB) == 64 * MiB);
  CHECK(auto_shard_size(512 * GiB) == 256 * MiB);
  CHECK(auto_shard_size(1ull << 40) == 256 * MiB);
  for (std::uint64_t size = 256 * MiB; size <= 512 * GiB; size = size * 3 / 2) {
    const std::uint64_t shard = auto_shard_size(size);
    CHECK((shard & (shard - 1)) == 0);
    CHECK(size / shard >= 2048);
    CHECK(size / (shard * 2) < 2048);  // the largest such power of two
  }

  // A build given no shard size uses it.
  const auto image = small_model(1, 3u << 20);
  ManifestBuildOptions options = small_options();
  options.shard_size = kAutoShardSize;
  const Manifest m = build_small(image, test_identity(), options);
  CHECK(m.shard_size() == 128 * KiB);
  CHECK(m.shard_count() == 25);  // 3 MiB of data and the header
}

TEST_CASE("manifest: the id is BLAKE2b-256 of the body bytes, without the signature") {
  const auto image = small_model();
  const Manifest m = build_small(image, test_identity());
  const auto enc = m.encoded();
  // [body, bin8(64) signature]: 1 byte array header, then body, then c4 40 + 64 bytes.
  REQUIRE(enc[0] == 0x92);
  REQUIRE(enc[enc.size() - 66] == 0xc4);
  const auto body = enc.subspan(1, enc.size() - 67);
  CHECK(core::blake2b_256(std::as_bytes(body)) == m.id().bytes);
}

TEST_CASE("manifest: building is deterministic, whatever the thread count") {
  const auto image = small_model();
  const Identity key = test_identity();
  auto o1 = small_options();
  o1.threads = 1;
  auto o2 = small_options();
  o2.threads = 2;
  const Manifest a = build_small(image, key, o1);
  const Manifest b = build_small(image, key, o2);
  CHECK(a.id() == b.id());
  CHECK(std::equal(a.encoded().begin(), a.encoded().end(), b.encoded().begin(), b.encoded().end()));
  // The tensor order given to the builder does not matter either.
  auto layout = parse_safetensors(image);
  auto reversed = layout->tensors;
  std::reverse(reversed.begin(), reversed.end());
  auto c = build_manifest(o1, image, reversed, key);
  REQUIRE(c.is_ok());
  CHECK(c->id() == a.id());
}

TEST_CASE("manifest: signatures are checked against trusted keys") {
  const auto image = small_model();
  const Identity key = test_identity(1);
  const Identity other = test_identity(2);
  const Manifest m = build_small(image, key);
  const PublicKey trusted[] = {other.public_key(), key.public_key()};
  CHECK(verify_manifest_signature(m, trusted).is_ok());
  const PublicKey untrusted[] = {other.public_key()};
  Status s = verify_manifest_signature(m, untrusted);
  CHECK(s.code() == StatusCode::kVerifyFailed);
  CHECK(s.message().find("not a trusted key") != std::string::npos);
  CHECK_FALSE(verify_manifest_signature(m, {}).is_ok());
}

TEST_CASE("manifest: a flipped bit anywhere in the encoding is never accepted as signed") {
  const auto image = small_model(1, 256u << 10);
  const Identity key = test_identity();
  const Manifest m = build_small(image, key);
  const PublicKey trusted[] = {key.public_key()};
  std::vector<std::uint8_t> bytes(m.encoded().begin(), m.encoded().end());
  std::size_t decoded_but_unsigned = 0;
  for (std::size_t bit = 0; bit < bytes.size() * 8; ++bit) {
    bytes[bit / 8] ^= static_cast<std::uint8_t>(1u << (bit % 8));
    auto d = decode_manifest(bytes);
    if (d.is_ok()) {
      ++decoded_but_unsigned;
      if (verify_manifest_signature(*d, trusted).is_ok()) FAIL_CHECK("bit " << bit << " flipped and still verified");
    }
    bytes[bit / 8] ^= static_cast<std::uint8_t>(1u << (bit % 8));
  }
  MESSAGE(bytes.size() * 8 << " single-bit mutants, " << decoded_but_unsigned
                           << " decoded (well-formed), none verified");
  CHECK(decoded_but_unsigned > 0);  // e.g. bits inside hashes and the timestamp
}

TEST_CASE("manifest: verify_image finds the first bad shard and names its tensors") {
  auto image = small_model();
  const Manifest m = build_small(image, test_identity());
  CHECK(verify_image(m, image).is_ok());
  core::SplitMix64 rng(3);
  for (std::size_t shard = 0; shard < m.shard_count(); ++shard) {
    const ShardEntry& s = m.shard(ShardIndex{static_cast<std::uint32_t>(shard)});
    const std::size_t pos = s.byte_offset + rng.below(s.byte_length);
    const auto flip = static_cast<std::byte>(1u << rng.below(8));
    image[pos] ^= flip;
    Status st = verify_image(m, image, 2);
    CHECK(st.code() == StatusCode::kVerifyFailed);
    CHECK(st.message().find("shard " + std::to_string(shard) + " ") == 0);
    const auto tensors = m.tensors_in_shard(ShardIndex{static_cast<std::uint32_t>(shard)});
    if (!tensors.empty()) CHECK(st.message().find(m.tensors()[tensors.front().value].name) != std::string::npos);
    CHECK_FALSE(verify_shard(m, ShardIndex{static_cast<std::uint32_t>(shard)},
                             std::span(image).subspan(s.byte_offset, s.byte_length)));
    image[pos] ^= flip;
  }
  CHECK(verify_image(m, image).is_ok());
  auto shorter = std::span(image).first(image.size() - 1);
  CHECK(verify_image(m, shorter).code() == StatusCode::kVerifyFailed);
  CHECK_FALSE(verify_shard(m, ShardIndex{static_cast<std::uint32_t>(m.shard_count())}, {}));
}

TEST_CASE("manifest: tensors_in_shard agrees with a brute-force overlap scan") {
  const auto image = small_model();
  const Manifest m = build_small(image, test_identity());
  for (std::size_t i = 0; i < m.shard_count(); ++i) {
    const ShardEntry& s = m.shard(ShardIndex{static_cast<std::uint32_t>(i)});
    std::vector<TensorIndex> expected;
    for (std::size_t t = 0; t < m.tensors().size(); ++t) {
      const TensorEntry& e = m.tensors()[t];
      if (e.byte_length > 0 && e.byte_offset < s.byte_offset + s.byte_length &&
          s.byte_offset < e.byte_offset + e.byte_length) {
        expected.push_back(TensorIndex{static_cast<std::uint32_t>(t)});
      }
    }
    CHECK(m.tensors_in_shard(ShardIndex{static_cast<std::uint32_t>(i)}) == expected);
  }
  CHECK(m.describe_tensors_in_shard(ShardIndex{0}, 1).find(m.tensors()[0].name + " and ") == 0);
  // An image with no tensor table: every shard is "header or padding".
  auto bare = build_manifest(small_options(), image, {}, test_identity());
  REQUIRE(bare.is_ok());
  CHECK(bare->describe_tensors_in_shard(ShardIndex{0}).find("no tensor") == 0);
}

TEST_CASE("manifest: chains link a child to its parent") {
  const Identity key = test_identity();
  auto v1_image = small_model();
  const Manifest v1 = build_small(v1_image, key);
  auto v2_image = v1_image;
  REQUIRE(mutate_safetensors(v2_image, 0.2, 9).is_ok());
  const Manifest v2 = build_small(v2_image, key, small_options(2, v1.id()));
  CHECK(verify_manifest_chain(v1, v2).is_ok());
  CHECK(v2.parent() == v1.id());

  const Manifest orphan = build_small(v2_image, key, small_options(2, ManifestId{}));
  CHECK(verify_manifest_chain(v1, orphan).message().find("names parent") != std::string::npos);
  const Manifest same_version = build_small(v2_image, key, small_options(1, v1.id()));
  CHECK(verify_manifest_chain(v1, same_version).message().find("does not exceed") != std::string::npos);
  auto other_model = small_options(2, v1.id());
  other_model.model = "critic";
  const Manifest critic = build_small(v2_image, key, other_model);
  CHECK(verify_manifest_chain(v1, critic).message().find("model") != std::string::npos);
  CHECK_FALSE(verify_manifest_chain(v2, v1).is_ok());
}

TEST_CASE("manifest: diff lists exactly the shards whose bytes changed") {
  const Identity key = test_identity();
  const auto v1_image = small_model();
  const Manifest v1 = build_small(v1_image, key);
  auto v2_image = v1_image;
  auto changed_tensors = mutate_safetensors(v2_image, 0.15, 4);
  REQUIRE(changed_tensors.is_ok());
  CHECK(*changed_tensors > 0);
  const Manifest v2 = build_small(v2_image, key, small_options(2, v1.id()));
  const ManifestDiff diff = diff_manifests(v1, v2);
  CHECK(diff.comparable);
  std::vector<ShardIndex> expected;
  std::uint64_t expected_bytes = 0;
  for (std::size_t i = 0; i < v2.shard_count(); ++i) {
    const ShardEntry& s = v2.shard(ShardIndex{static_cast<std::uint32_t>(i)});
    if (!std::equal(v1_image.begin() + static_cast<std::ptrdiff_t>(s.byte_offset),
                    v1_image.begin() + static_cast<std::ptrdiff_t>(s.byte_offset + s.byte_length),
                    v2_image.begin() + static_cast<std::ptrdiff_t>(s.byte_offset))) {
      expected.push_back(ShardIndex{static_cast<std::uint32_t>(i)});
      expected_bytes += s.byte_length;
    }
  }
  CHECK(diff.changed == expected);
  CHECK(diff.changed_bytes == expected_bytes);
  CHECK(diff.changed.size() < v2.shard_count());
  CHECK(diff_manifests(v1, v1).changed.empty());

  auto other_layout = small_options(2, v1.id());
  other_layout.shard_size = 128u << 10;
  const Manifest coarse = build_small(v2_image, key, other_layout);
  const ManifestDiff incomparable = diff_manifests(v1, coarse);
  CHECK_FALSE(incomparable.comparable);
  CHECK(incomparable.changed.size() == coarse.shard_count());
}

TEST_CASE("manifest: secure mode uses BLAKE2b-256 shard digests") {
  const auto image = small_model();
  auto options = small_options();
  options.shard_hash = ShardHashAlgorithm::kBlake2b_256;
  const Manifest m = build_small(image, test_identity(), options);
  CHECK(m.shard(ShardIndex{0}).digest.size == 32);
  CHECK(verify_image(m, image).is_ok());
  auto decoded = decode_manifest(m.encoded());
  REQUIRE(decoded.is_ok());
  CHECK(decoded->body().shard_hash == ShardHashAlgorithm::kBlake2b_256);
  auto tampered = image;
  tampered[image.size() / 2] ^= std::byte{1};
  CHECK_FALSE(verify_image(m, tampered).is_ok());
}

TEST_CASE("manifest: the builder rejects bad arguments before hashing") {
  const auto image = small_model(1, 256u << 10);
  const Identity key = test_identity();
  auto layout = parse_safetensors(image);
  auto try_build = [&](ManifestBuildOptions o, std::span<const std::byte> img, std::vector<TensorEntry> t) {
    auto r = build_manifest(o, img, std::move(t), key);
    return r.is_ok() ? std::string("ok") : r.status().message();
  };
  auto o = small_options();
  auto bad = o;
  bad.model = "";
  CHECK(try_build(bad, image, layout->tensors).find("empty") != std::string::npos);
  bad = o;
  bad.model = "has space";
  CHECK(try_build(bad, image, layout->tensors).find("may hold only") != std::string::npos);
  bad = o;
  bad.model = "/abs";
  CHECK(try_build(bad, image, layout->tensors).find("starts with") != std::string::npos);
  for (std::uint64_t size : {1000ull, 32ull << 10, (64ull << 10) + 1, 2ull << 30}) {  // 0 is kAutoShardSize
    bad = o;
    bad.shard_size = size;
    CHECK(try_build(bad, image, layout->tensors).find("power of two") != std::string::npos);
  }
  CHECK(try_build(o, {}, {}).find("empty") != std::string::npos);
  auto tensors = layout->tensors;
  tensors[1].byte_offset = tensors[0].byte_offset;
  CHECK(try_build(o, image, tensors).find("overlap") != std::string::npos);
  bad = o;
  bad.version = 0;
  bad.parent.bytes[0] = 1;
  CHECK(try_build(bad, image, layout->tensors).find("version 0") != std::string::npos);
  CHECK(try_build(o, image, layout->tensors) == "ok");
}

TEST_CASE("manifest: files round trip") {
  TempDir dir;
  const auto image = small_model();
  const Manifest m = build_small(image, test_identity());
  REQUIRE(write_manifest_file(m, dir.file("m.manifest")).is_ok());
  auto back = read_manifest_file(dir.file("m.manifest"));
  REQUIRE(back.is_ok());
  CHECK(back->id() == m.id());
  CHECK(read_manifest_file(dir.file("none")).status().code() == StatusCode::kNotFound);
}
