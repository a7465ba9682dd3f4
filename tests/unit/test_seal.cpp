// Seals: the signed record that joins a version's parts, and the check
// that the parts it names describe one model, each tensor exactly once.
#include <doctest/doctest.h>

#include <algorithm>

#include "core/random_fill.hpp"
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
  b.created_unix_ms = 1700000000000ull;
  b.publisher = test_identity().public_key();
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
  CHECK(make_seal(seal_body_of(parts), test_identity(2)).status().message().find("not the signer") !=
        std::string::npos);
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
