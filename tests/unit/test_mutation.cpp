// Seeded mutation tests of the two decoders. Thousands of mutants per run;
// each must be rejected with a one-line reason, or accepted only when it is
// genuinely valid. ASan and UBSan builds turn any memory error into a failure.
#include <doctest/doctest.h>

#include "manifest/manifest_codec.hpp"
#include "support/model_fixture.hpp"
#include "support/mutator.hpp"

using namespace tensorhub;
using namespace tensorhub::testing;

namespace {

// Mutants of `original`'s encoding: each is refused with a one-line reason,
// or accepted only when canonical, valid and (changed) unsigned.
void mutate_manifest(const Manifest& original, const PublicKey& trusted_key, std::uint64_t seed) {
  const std::vector<std::uint8_t> valid(original.encoded().begin(), original.encoded().end());
  const PublicKey trusted[] = {trusted_key};
  core::SplitMix64 rng(seed);
  constexpr int kMutants = 6000;
  int accepted = 0;
  for (int i = 0; i < kMutants; ++i) {
    const auto mutant = mutate(valid, rng);
    auto decoded = decode_manifest(mutant);
    if (!decoded.is_ok()) {
      const std::string& message = decoded.status().message();
      CHECK(!message.empty());
      CHECK_MESSAGE(message.find('\n') == std::string::npos, message);
      CHECK(decoded.status().code() == StatusCode::kCorrupt);
      continue;
    }
    ++accepted;
    // Accepted means canonical: it re-encodes to exactly the mutant's bytes.
    CHECK(std::equal(decoded->encoded().begin(), decoded->encoded().end(), mutant.begin(), mutant.end()));
    CHECK(manifest_detail::validate_body(decoded->body()).is_ok());
    // And a changed manifest never carries a valid signature.
    if (mutant != valid) CHECK_FALSE(verify_manifest_signature(*decoded, trusted).is_ok());
  }
  MESSAGE(kMutants << " manifest mutants, " << accepted << " well-formed (none signed)");
}

}  // namespace

TEST_CASE("mutation: manifest decoder") {
  const std::uint64_t seed = mutation_seed(0x5eed0001);
  INFO("seed " << seed << " (replay with TENSORHUB_MUTATION_SEED)");
  const auto image = small_model(1, 512u << 10);
  const Identity key = test_identity();
  mutate_manifest(build_small(image, key), key.public_key(), seed);
}

TEST_CASE("mutation: a part's manifest, with slices of tensors") {
  const std::uint64_t seed = mutation_seed(0x5eed0003);
  INFO("seed " << seed << " (replay with TENSORHUB_MUTATION_SEED)");
  std::vector<std::byte> image(224, std::byte{7});
  std::vector<TensorEntry> tensors{TensorEntry{"w", DType::kF32, {2, 16}, 0, 128, {8, 16}, {2, 0}},
                                   TensorEntry{"b", DType::kF32, {16}, 128, 64},
                                   TensorEntry{"p", DType::kBF16, {4, 4}, 192, 32, {4, 16}, {0, 4}}};
  ManifestBuildOptions options = small_options();
  options.part = PartOf{1, 4};
  const Identity key = test_identity();
  auto part = build_manifest(options, image, tensors, key);
  REQUIRE(part.is_ok());
  mutate_manifest(*part, key.public_key(), seed);
}

TEST_CASE("mutation: a part's manifest with declared views") {
  const std::uint64_t seed = mutation_seed(0x5eed0004);
  INFO("seed " << seed << " (replay with TENSORHUB_MUTATION_SEED)");
  std::vector<std::byte> image(192, std::byte{5});
  std::vector<TensorEntry> tensors{TensorEntry{"w", DType::kF32, {2, 16}, 0, 128, {8, 16}, {2, 0}},
                                   TensorEntry{"b", DType::kF32, {16}, 128, 64}};
  ManifestBuildOptions options = small_options();
  options.part = PartOf{1, 4};
  options.views = {{{"w", TensorSlice{{{0, 8}, {0, 8}}}}, {"b", {}}}, {{"w", TensorSlice{{{0, 8}, {8, 16}}}}}};
  const Identity key = test_identity();
  auto part = build_manifest(options, image, tensors, key);
  REQUIRE_MESSAGE(part.is_ok(), part.status().to_string());
  REQUIRE(part->views().size() == 2);
  mutate_manifest(*part, key.public_key(), seed);
}

TEST_CASE("mutation: safetensors parser") {
  const std::uint64_t seed = mutation_seed(0x5eed0002);
  INFO("seed " << seed << " (replay with TENSORHUB_MUTATION_SEED)");
  // Mutate a small file whose header is most of the bytes, so mutations hit JSON.
  const auto model = small_model(2, 4096);
  auto layout = parse_safetensors(model);
  REQUIRE(layout.is_ok());
  core::SplitMix64 rng(seed);
  constexpr int kMutants = 6000;
  int accepted = 0;
  for (int i = 0; i < kMutants; ++i) {
    // Focus mutations on the header; keep the data region as is.
    std::vector<std::byte> header(model.begin(), model.begin() + static_cast<std::ptrdiff_t>(layout->data_offset));
    auto mutant = mutate(header, rng);
    mutant.insert(mutant.end(), model.begin() + static_cast<std::ptrdiff_t>(layout->data_offset), model.end());
    auto parsed = parse_safetensors(mutant);
    if (!parsed.is_ok()) {
      CHECK(!parsed.status().message().empty());
      CHECK(parsed.status().message().find('\n') == std::string::npos);
      continue;
    }
    ++accepted;
    // Accepted means valid: the tensors tile the data buffer inside the file,
    // and writing them back gives a file that parses to the same table.
    std::uint64_t covered = parsed->data_offset;
    std::vector<TensorView> views;
    for (const TensorEntry& t : parsed->tensors) {
      CHECK(t.byte_offset == covered);
      covered += t.byte_length;
      views.push_back(TensorView{t.name, t.dtype, t.shape, std::span(mutant).subspan(t.byte_offset, t.byte_length)});
    }
    CHECK(covered == mutant.size());
    auto again = serialize_safetensors(views, parsed->metadata);
    REQUIRE(again.is_ok());
    auto reparsed = parse_safetensors(*again);
    REQUIRE(reparsed.is_ok());
    CHECK(reparsed->tensors.size() == parsed->tensors.size());
  }
  MESSAGE(kMutants << " safetensors mutants, " << accepted << " still valid");
}
