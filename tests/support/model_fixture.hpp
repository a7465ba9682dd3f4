// A small synthetic model and its manifest, shared by the manifest tests.
#pragma once

#include <doctest/doctest.h>

#include <array>
#include <vector>

#include "manifest/synthetic_model.hpp"
#include "tensorhub/manifest.hpp"
#include "tensorhub/safetensors.hpp"
#include "tensorhub/swarm_key.hpp"

namespace tensorhub::testing {

inline Identity test_identity(std::uint8_t n = 1) {
  std::array<std::uint8_t, 32> seed{};
  seed[0] = n;
  return Identity::from_seed(seed);
}

// A swarm key of 32 bytes of `fill`: each test file its own swarm.
inline SwarmKey test_swarm_key(std::uint8_t fill) {
  std::array<std::uint8_t, 32> bytes{};
  bytes.fill(fill);
  return SwarmKey::from_bytes(bytes);
}

// 1 MiB + a header of BF16 tensors of 48 KiB (so tensors straddle 64 KiB shards).
inline std::vector<std::byte> small_model(std::uint64_t seed = 1, std::uint64_t data_bytes = 1u << 20) {
  SyntheticModelSpec spec;
  spec.data_bytes = data_bytes;
  spec.tensor_bytes = 48u << 10;
  spec.seed = seed;
  auto file = make_synthetic_safetensors(spec);
  REQUIRE(file.is_ok());
  return std::move(*file);
}

// The tensor table of a safetensors image (REQUIRES that it parses).
inline std::vector<TensorEntry> tensors_of(const std::vector<std::byte>& image) {
  auto layout = parse_safetensors(image);
  REQUIRE(layout.is_ok());
  return layout->tensors;
}

inline ManifestBuildOptions small_options(std::uint64_t version = 1, ManifestId parent = {}) {
  ManifestBuildOptions o;
  o.model = "policy";
  o.version = version;
  o.parent = parent;
  o.created_unix_ms = 1700000000000ull + version;
  o.shard_size = 64u << 10;
  return o;
}

inline Manifest build_small(const std::vector<std::byte>& image, const Identity& key,
                            const ManifestBuildOptions& options = small_options()) {
  auto layout = parse_safetensors(image);
  REQUIRE(layout.is_ok());
  auto m = build_manifest(options, image, layout->tensors, key);
  REQUIRE_MESSAGE(m.is_ok(), m.status().to_string());
  return std::move(*m);
}

}  // namespace tensorhub::testing
