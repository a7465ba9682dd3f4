// Destination memory a peer daemon sets aside at start (`--reserve`), so a
// fetch writes into pages that are already mapped and backed instead of
// faulting in fresh ones as bytes arrive. A rollout worker keeps its weight
// buffers for its whole life; this gives the daemon the same property.
// First touch of fresh memory can be an order of magnitude slower than
// writing touched memory on a VM.
//
// Daemon thread only.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "core/anonymous_memory.hpp"
#include "tensorhub/status.hpp"

namespace tensorhub::cli {

class ReservedBuffers {
 public:
  // Maps `count` buffers of `size` bytes and touches every page of them.
  Status reserve(std::size_t count, std::size_t size);

  // A new buffer of `size` bytes, in use, its pages not touched yet (the
  // fetch that writes it first faults them in; after that they stay warm).
  // Errors: kIoError (no memory).
  Result<std::size_t> add(std::size_t size);

  // A free buffer of at least `size` bytes, now in use (its first `size`
  // bytes); nullopt when none is free or big enough.
  std::optional<std::size_t> take(std::size_t size);
  std::span<std::byte> bytes(std::size_t buffer, std::size_t size) { return buffers_[buffer].memory.bytes().first(size); }
  // REQUIRES: nothing uses the buffer's memory any more.
  void give_back(std::size_t buffer) { buffers_[buffer].in_use = false; }

 private:
  struct Buffer {
    core::AnonymousMemory memory;
    bool in_use = false;
  };
  std::vector<Buffer> buffers_;
};

}  // namespace tensorhub::cli
