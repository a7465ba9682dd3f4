// Seals: the signed record that joins a version's parts, and the check
// that the parts it names describe one model, each tensor exactly once.
#include <doctest/doctest.h>

#include <algorithm>

#include "core/random_fill.hpp"
#include "manifest/manifest_codec.hpp"
#include "manifest/sealed_version.hpp"
#include "support/model_fixture.hpp"
#include "support/mutator.hpp"
#include "tensorhub/seal.hpp"

using namespace tensorhub;
using namespace tensorhub::testing;

namespace {

// Part `index` of 4, FSDP-style: rows [2i, 2i+2) of an [8, 16] F32 weight;
// part 0 also holds a whole bias. `rows_from` moves the part's rows.
Manifest part_manifest(std::uint32_t index, std::uint64_t rows_from, std::uint64_t version = 1,
                       DType dtype = DType::kF32) {
  std::vector<TensorEntry> tensors{
      TensorEntry{"w", dtype, {2, 16}, 0, 2 * 16 * dtype_size(dtype), {8, 16}, {rows_from, 0}}};
  std::uint64_t size = tensors[0].byte_length;
  if (index == 0) {
    tensors.push_back(TensorEntry{"b", DType::kF32, {16}, size, 64});
    size += 64;
  }
  std::vector<std::byte> image(size);
  core::fill_pseudo_random(image, 100 + index);
  ManifestBuildOptions o = small_options(version);
  o.part = PartOf{index, 4};
  auto m = build_manifest(o, image, tensors, test_identity());
  REQUIRE_MESSAGE(m.is_ok(), m.status().to_string());
  return std::move(*m);
}

std::vector<Manifest> fsdp_parts() {
  std::vector<Manifest> parts;
  for (std::uint32_t i = 0; i < 4; ++i) parts.push_back(part_manifest(i, 2 * i));
  return parts;
}

SealBody seal_body_of(const std::vector<Manifest>& parts, std::uint64_t version = 1) {
  SealBody b;
  b.model = "policy";
  b.version = version;
  for (const Manifest& m : parts) b.parts.push_back(m.id());
  return b;
}

std::vector<const Manifest*> pointers(const std::vector<Manifest>& parts) {
  std::vector<const Manifest*> out;
  for (const Manifest& m : parts) out.push_back(&m);
  return out;
}

std::string sealed_error(const std::vector<Manifest>& parts) {
  auto seal = make_seal(seal_body_of(parts), test_identity());
  REQUIRE(seal.is_ok());
  Status s = check_sealed_parts(*seal, pointers(parts));
  if (s.is_ok()) return "";
  CHECK(s.code() == StatusCode::kVerifyFailed);
  return s.message();
}

}  // namespace

TEST_CASE("seal: signed, decoded, verified, and its parts checked together") {
  const auto parts = fsdp_parts();
  auto seal = make_seal(seal_body_of(parts), test_identity());
  REQUIRE_MESSAGE(seal.is_ok(), seal.status().to_string());
  auto decoded = decode_seal(seal->encoded());
  REQUIRE_MESSAGE(decoded.is_ok(), decoded.status().to_string());
  CHECK(decoded->body() == seal->body());
  CHECK(decoded->id() == seal->id());
  const PublicKey trusted[] = {test_identity().public_key()};
  CHECK(verify_seal_signature(*decoded, trusted).is_ok());
  const PublicKey stranger[] = {test_identity(2).public_key()};
  CHECK(verify_seal_signature(*decoded, stranger).code() == StatusCode::kVerifyFailed);
  CHECK(check_sealed_parts(*decoded, pointers(parts)).is_ok());
  // A seal is not a manifest: its id differs from every part's, and the
  // bytes of one do not decode as the other.
  for (const Manifest& m : parts) CHECK(m.id() != seal->id());
  CHECK_FALSE(decode_manifest(seal->encoded()).is_ok());
  CHECK_FALSE(decode_seal(parts[0].encoded()).is_ok());
}

TEST_CASE("seal: the parts must be the ones named, in order, of one version, covering each tensor once") {
  auto parts = fsdp_parts();
  auto seal = make_seal(seal_body_of(parts), test_identity());
  REQUIRE(seal.is_ok());
  auto swapped = pointers(parts);
  std::swap(swapped[0], swapped[1]);
  CHECK(check_sealed_parts(*seal, swapped).message().find("part 0 is not manifest") != std::string::npos);
  auto three = pointers(parts);
  three.pop_back();
  CHECK(check_sealed_parts(*seal, three).message() == "the seal names 4 parts, but 3 were given");

  // Part 1 moved up a row: row 1 is held twice (row 3 by nobody); the
  // overlap is named first.
  parts = fsdp_parts();
  parts[1] = part_manifest(1, 1);
  CHECK(sealed_error(parts) == "tensor 'w': parts 0 and 1 both cover [1:2, 0:16]");
  // Part 3 moved onto part 2's rows: two overlap, and two rows are nobody's.
  parts = fsdp_parts();
  parts[3] = part_manifest(3, 4);
  CHECK(sealed_error(parts).find("parts 2 and 3 both cover [4:6, 0:16]") != std::string::npos);
  // A part of another version, or with another dtype for the same tensor.
  parts = fsdp_parts();
  parts[2] = part_manifest(2, 4, /*version=*/2);
  CHECK(sealed_error(parts).find("part 2 is of 'policy' v2") != std::string::npos);
  parts = fsdp_parts();
  parts[2] = part_manifest(2, 4, 1, DType::kBF16);
  CHECK(sealed_error(parts) == "tensor 'w' differs in dtype or shape between part 0 and part 2");
}

TEST_CASE("seal: the builder refuses what no reader would accept") {
  const auto parts = fsdp_parts();
  SealBody b = seal_body_of(parts);
  b.parts.clear();
  CHECK(make_seal(b, test_identity()).status().message().find("names 0 parts") != std::string::npos);
  b = seal_body_of(parts);
  b.parts[3] = b.parts[1];
  CHECK(make_seal(b, test_identity()).status().message().find("as two parts") != std::string::npos);
  b = seal_body_of(parts, 0);
  b.parent.bytes[0] = 1;
  CHECK(make_seal(b, test_identity()).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("seal: two publishers' seals of the same parts are one version with one id") {
  const auto parts = fsdp_parts();
  auto first = make_seal(seal_body_of(parts), test_identity());
  auto second = make_seal(seal_body_of(parts), test_identity(2));
  REQUIRE(first.is_ok());
  REQUIRE(second.is_ok());
  CHECK(first->id() == second->id());
  CHECK(first->publisher() != second->publisher());
  CHECK_FALSE(std::equal(first->encoded().begin(), first->encoded().end(), second->encoded().begin(),
                         second->encoded().end()));
  const PublicKey both[] = {test_identity().public_key(), test_identity(2).public_key()};
  CHECK(verify_seal_signature(*first, both).is_ok());
  CHECK(verify_seal_signature(*second, both).is_ok());
  // Another parent, or other parts, is another id.
  SealBody other = seal_body_of(parts);
  other.parts[1].bytes[0] ^= 1;
  CHECK(make_seal(other, test_identity())->id() != first->id());
  // One publisher's signature over the other's bytes does not verify.
  std::vector<std::uint8_t> swapped(first->encoded().begin(), first->encoded().end());
  std::copy(second->signature().bytes.begin(), second->signature().bytes.end(), swapped.end() - Signature::kSize);
  auto decoded = decode_seal(swapped);
  REQUIRE(decoded.is_ok());
  CHECK(verify_seal_signature(*decoded, both).code() == StatusCode::kVerifyFailed);
}

TEST_CASE("seal: every truncation and 4,000 mutants are refused with a reason, or canonical and unsigned") {
  auto seal = make_seal(seal_body_of(fsdp_parts()), test_identity());
  REQUIRE(seal.is_ok());
  const std::vector<std::uint8_t> valid(seal->encoded().begin(), seal->encoded().end());
  for (std::size_t n = 0; n < valid.size(); ++n) CHECK_FALSE(decode_seal(std::span(valid).first(n)).is_ok());
  std::vector<std::uint8_t> longer = valid;
  longer.push_back(0);
  CHECK(decode_seal(longer).status().code() == StatusCode::kCorrupt);

  const std::uint64_t seed = mutation_seed(0x5eed0004);
  INFO("seed " << seed << " (replay with TENSORHUB_MUTATION_SEED)");
  core::SplitMix64 rng(seed);
  const PublicKey trusted[] = {test_identity().public_key()};
  int accepted = 0;
  for (int i = 0; i < 4000; ++i) {
    const auto mutant = mutate(valid, rng);
    auto decoded = decode_seal(mutant);
    if (!decoded.is_ok()) {
      CHECK(decoded.status().code() == StatusCode::kCorrupt);
      CHECK(decoded.status().message().find('\n') == std::string::npos);
      continue;
    }
    ++accepted;
    CHECK(std::equal(decoded->encoded().begin(), decoded->encoded().end(), mutant.begin(), mutant.end()));
    if (mutant != valid) CHECK_FALSE(verify_seal_signature(*decoded, trusted).is_ok());
  }
  MESSAGE("4000 seal mutants, " << accepted << " well-formed (none signed)");
}

TEST_CASE("seal: a signature made for a manifest id never passes for a seal, nor the other way") {
  const Identity key = test_identity();
  const PublicKey trusted[] = {key.public_key()};
  const auto parts = fsdp_parts();
  auto seal = make_seal(seal_body_of(parts), key);
  REQUIRE(seal.is_ok());
  // The seal's bytes with the key's manifest-domain signature over the seal's id.
  std::vector<std::uint8_t> forged(seal->encoded().begin(), seal->encoded().end());
  const Signature as_manifest = key.sign(manifest_detail::signing_message(seal->id()));
  std::copy(as_manifest.bytes.begin(), as_manifest.bytes.end(), forged.end() - Signature::kSize);
  auto decoded = decode_seal(forged);
  REQUIRE(decoded.is_ok());
  CHECK(verify_seal_signature(*decoded, trusted).code() == StatusCode::kVerifyFailed);
  // And a part's manifest signed under the seal's domain is no manifest signature.
  std::vector<std::uint8_t> part(parts[0].encoded().begin(), parts[0].encoded().end());
  const Signature as_seal = key.sign(manifest_detail::signing_message(std::string_view("tensorhub seal v1\0", 18),
                                                                      parts[0].id()));
  std::copy(as_seal.bytes.begin(), as_seal.bytes.end(), part.end() - Signature::kSize);
  auto manifest = decode_manifest(part);
  REQUIRE(manifest.is_ok());
  CHECK(verify_manifest_signature(*manifest, trusted).code() == StatusCode::kVerifyFailed);
}

TEST_CASE("seal: parts that are not parts of this version, or leave elements out, are refused") {
  auto parts = fsdp_parts();
  auto seal = make_seal(seal_body_of(parts), test_identity());
  REQUIRE(seal.is_ok());
  auto given = pointers(parts);
  given[2] = nullptr;
  CHECK(check_sealed_parts(*seal, given).message().find("part 2 is not manifest") != std::string::npos);

  // A whole version's manifest named as a part.
  std::vector<std::byte> image(64);
  auto whole = build_manifest(small_options(), image, {TensorEntry{"b", DType::kF32, {16}, 0, 64}}, test_identity());
  REQUIRE(whole.is_ok());
  parts = fsdp_parts();
  parts[0] = std::move(*whole);
  CHECK(sealed_error(parts).find("part 0's manifest says it is a whole version") != std::string::npos);

  // Part 3 missing its rows: 32 elements of "w" are nobody's.
  parts = fsdp_parts();
  {
    std::vector<std::byte> bias(64);
    ManifestBuildOptions o = small_options();
    o.part = PartOf{3, 4};
    auto no_rows = build_manifest(o, bias, {TensorEntry{"c", DType::kF32, {16}, 0, 64}}, test_identity());
    REQUIRE(no_rows.is_ok());
    parts[3] = std::move(*no_rows);
  }
  CHECK(sealed_error(parts) == "tensor 'w': 32 of 128 elements are in no part");

  // A tensor of no elements in two parts is held twice.
  parts = fsdp_parts();
  for (std::uint32_t i : {1u, 2u}) {
    std::vector<std::byte> rows(128);
    ManifestBuildOptions o = small_options();
    o.part = PartOf{i, 4};
    auto m = build_manifest(o, rows,
                            {TensorEntry{"w", DType::kF32, {2, 16}, 0, 128, {8, 16}, {2 * i, 0}},
                             TensorEntry{"empty", DType::kF32, {0, 5}, 128, 0}},
                            test_identity());
    REQUIRE_MESSAGE(m.is_ok(), m.status().to_string());
    parts[i] = std::move(*m);
  }
  CHECK(sealed_error(parts) == "tensor 'empty': parts 1 and 2 both hold it");
}

TEST_CASE("sealed version: the whole model's table, and where each part's bytes land in it") {
  const auto parts = fsdp_parts();
  auto seal = make_seal(seal_body_of(parts), test_identity());
  REQUIRE(seal.is_ok());
  std::vector<std::shared_ptr<const Manifest>> shared;
  for (const Manifest& m : parts) shared.push_back(std::make_shared<const Manifest>(m));
  auto joined = manifest::SealedVersion::join(*seal, shared);
  REQUIRE_MESSAGE(joined.is_ok(), joined.status().to_string());
  const auto& v = **joined;
  CHECK(v.id() == seal->id());
  // "w" [8, 16] F32 (512 bytes) whole, then "b" (64 bytes): part 0 names both first.
  REQUIRE(v.tensors().size() == 2);
  CHECK(v.tensors()[0] == TensorEntry{"w", DType::kF32, {8, 16}, 0, 512});
  CHECK(v.tensors()[1] == TensorEntry{"b", DType::kF32, {16}, 512, 64});
  CHECK(v.total_size() == 576);
  // Part 0: its rows at the start, then its bias after the whole weight.
  CHECK(v.landing_runs(0) == std::vector<manifest::LandingRun>{{0, 0, 128}, {128, 512, 64}});
  CHECK(v.landing_runs(3) == std::vector<manifest::LandingRun>{{0, 384, 128}});
  CHECK(manifest::SealedVersion::gap_bytes(v.landing_runs(0)) == 0);

  // A column block of a [4, 6] U8 tensor is one run a row; a gap before it
  // lands in the gap memory.
  std::vector<Manifest> columns;
  for (std::uint32_t i = 0; i < 2; ++i) {
    std::vector<TensorEntry> tensors{TensorEntry{"m", DType::kU8, {4, 3}, 10, 12, {4, 6}, {0, 3 * i}}};
    std::vector<std::byte> image(22);
    ManifestBuildOptions o = small_options(1);
    o.part = PartOf{i, 2};
    auto m = build_manifest(o, image, tensors, test_identity());
    REQUIRE_MESSAGE(m.is_ok(), m.status().to_string());
    columns.push_back(std::move(*m));
  }
  SealBody body = seal_body_of(columns);
  auto column_seal = make_seal(body, test_identity());
  REQUIRE(column_seal.is_ok());
  auto column_version = manifest::SealedVersion::join(
      *column_seal, {std::make_shared<const Manifest>(columns[0]), std::make_shared<const Manifest>(columns[1])});
  REQUIRE_MESSAGE(column_version.is_ok(), column_version.status().to_string());
  const auto runs = (*column_version)->landing_runs(1);
  CHECK(runs == std::vector<manifest::LandingRun>{{0, manifest::kNoWholeOffset, 10}, {10, 3, 3}, {13, 9, 3},
                                                  {16, 15, 3}, {19, 21, 3}});
  std::vector<std::byte> whole(24), gaps(10);
  const auto regions = manifest::landing_regions(runs, core::MutableRegions(std::span(whole)), gaps);
  CHECK(regions.size() == 22);
  CHECK(regions.count() == 5);
  CHECK(regions.regions()[2].data() == whole.data() + 9);
}
