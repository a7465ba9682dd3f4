// Where a version's bytes live, and the work that touches them in bulk:
// verifying a shard and copying ranges. The peer's driver runs these on its
// work pool, never on its I/O thread; the peer core only says which.
//
// Host memory is the one domain built. A GPU domain (hashing on the device,
// copies with cudaMemcpyAsync, registration for RDMA) implements the same
// interface; the core and the swarm do not change for it.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/regions.hpp"
#include "tensorhub/manifest.hpp"

namespace tensorhub::peer {

class MemoryDomain {
 public:
  virtual ~MemoryDomain() = default;
  virtual std::string_view name() const = 0;
  // Whether shard `index` of `image` matches the manifest's digest.
  // REQUIRES: `image` holds the manifest's whole image.
  virtual bool verify_shard(const Manifest& manifest, ShardIndex index, const core::ConstRegions& image) const = 0;
  // Copies [offset, offset + length) of `from` to the same range of `to`.
  virtual void copy(const core::ConstRegions& from, const core::MutableRegions& to, std::uint64_t offset,
                    std::uint64_t length) const = 0;
};

// Host memory: XXH3-128 or BLAKE2b streamed over the shard's pieces, memcpy.
const MemoryDomain& host_memory();

}  // namespace tensorhub::peer
