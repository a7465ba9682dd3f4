// A region of a memory domain as another process of this host maps it: for
// GPU memory, the CUDA IPC handle of the allocation that holds it and the
// region's offset in that allocation. Plain C++17: CUDA sources include it.
#pragma once

#include <array>
#include <cstdint>

namespace tensorhub::peer {

struct SharedRange {
  std::array<std::uint8_t, 64> handle{};
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};

}  // namespace tensorhub::peer
