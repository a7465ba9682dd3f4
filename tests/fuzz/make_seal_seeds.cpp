// Writes fuzzing seeds for parts: two part manifests of one version (rows of
// a weight split in two, with slices; part 1 with the views of two column
// selections) into MANIFEST_DIR, and the seal that joins them into SEAL_DIR.
// Usage: make_seal_seeds MANIFEST_DIR SEAL_DIR
#include <array>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "tensorhub/manifest.hpp"
#include "tensorhub/seal.hpp"

using namespace tensorhub;

namespace {

bool write(const std::string& path, std::span<const std::uint8_t> bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(out);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s MANIFEST_DIR SEAL_DIR\n", argv[0]);
    return 2;
  }
  std::array<std::uint8_t, 32> seed{};
  seed[0] = 7;
  const Identity key = Identity::from_seed(seed);
  SealBody seal;
  seal.model = "policy";
  seal.version = 1;
  for (std::uint32_t part = 0; part < 2; ++part) {
    std::vector<TensorEntry> tensors{TensorEntry{"w", DType::kBF16, {4, 8}, 0, 64, {8, 8}, {4 * part, 0}}};
    std::vector<std::byte> image(64, std::byte{static_cast<unsigned char>(part)});
    ManifestBuildOptions o;
    o.model = seal.model;
    o.version = seal.version;
    o.shard_size = 64u << 10;
    o.part = PartOf{part, 2};
    if (part == 1) {
      o.views = {{{"w", TensorSlice{{{0, 8}, {0, 4}}}}}, {{"w", TensorSlice{{{0, 8}, {4, 8}}}}}};
    }
    auto m = build_manifest(o, image, tensors, key);
    if (!m) {
      std::fprintf(stderr, "part %u: %s\n", part, m.status().to_string().c_str());
      return 1;
    }
    seal.parts.push_back(m->id());
    if (!write(std::string(argv[1]) + "/part" + std::to_string(part) + ".manifest", m->encoded())) return 1;
  }
  auto sealed = make_seal(seal, key);
  if (!sealed) {
    std::fprintf(stderr, "seal: %s\n", sealed.status().to_string().c_str());
    return 1;
  }
  return write(std::string(argv[2]) + "/v1.seal", sealed->encoded()) ? 0 : 1;
}
