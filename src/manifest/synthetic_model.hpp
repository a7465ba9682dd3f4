// Synthetic models: seeded safetensors images of a given size, and successor
// versions that change a given fraction of tensors, the way an optimizer step
// changes some layers more than others. For demos, tests and benchmarks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tensorhub/status.hpp"

namespace tensorhub {

struct SyntheticModelSpec {
  std::uint64_t data_bytes = 64ull << 20;   // the tensors' bytes; the file adds a header
  std::uint64_t tensor_bytes = 4ull << 20;  // bytes per tensor (the last may be smaller); even
  std::uint64_t seed = 1;
  unsigned threads = 0;                     // 0: one per core
};

// A complete safetensors file in memory: BF16 tensors "model.layers.<i>.weight".
Result<std::vector<std::byte>> make_synthetic_safetensors(const SyntheticModelSpec& spec);

// Regenerates about `fraction` of the tensors of a synthetic (or any valid)
// safetensors image in place, chosen and filled from `seed`. At least one
// tensor changes when fraction > 0. Returns how many tensors changed.
Result<std::size_t> mutate_safetensors(std::vector<std::byte>& file, double fraction, std::uint64_t seed,
                                       unsigned threads = 0);

}  // namespace tensorhub
