// Fast deterministic pseudo-random bytes, for synthetic weights in tests,
// benchmarks and demos. Not for keys: those come from libsodium. (The
// generator itself is core/rng.hpp.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/rng.hpp"

namespace tensorhub::core {


// Fills `out` with bytes that depend only on `seed` and each byte's position,
// so any part can be regenerated on its own, in parallel.
void fill_pseudo_random(std::span<std::byte> out, std::uint64_t seed, std::uint64_t position = 0);

}  // namespace tensorhub::core
