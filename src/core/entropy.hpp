// Unpredictable 64-bit values from the operating system (through libsodium),
// for what must differ between processes started alike: boot ids and the
// seeds of a peer's random streams. Tests and the simulator seed their own.
#pragma once

#include <cstdint>

namespace tensorhub::core {

std::uint64_t entropy64();

}  // namespace tensorhub::core
