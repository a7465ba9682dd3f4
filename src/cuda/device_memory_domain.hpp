// GPU memory as a memory domain (peer/memory_domain.hpp): a version whose
// regions are device memory is verified on the device (the XXH3 kernels;
// only the 16-byte digest comes back), copied device-side, and proved over
// small ranges read back to the host. Built over DeviceApi, so the
// deterministic tests run it on the fake device.
//
// Secure mode's BLAKE2b-256 shards have no device kernel: such a shard is
// read back to the host and hashed there (correct, and as slow as that
// sounds; docs/gpu.md says so).
#pragma once

#include <string>

#include "cuda/device_api.hpp"
#include "peer/memory_domain.hpp"

namespace tensorhub::cuda {

class DeviceMemoryDomain final : public peer::MemoryDomain {
 public:
  // REQUIRES: `device` outlives the domain and every version in it.
  explicit DeviceMemoryDomain(DeviceApi& device) : device_(device), name_(device.name()) {}

  std::string_view name() const override { return name_; }
  bool verify_shard(const Manifest& manifest, ShardIndex index, const core::ConstRegions& image) const override;
  // `from` may be host memory or device memory; `to` is this domain's.
  bool copy(const core::ConstRegions& from, const core::MutableRegions& to, std::uint64_t offset,
            std::uint64_t length) const override;
  core::Blake2bDigest digest_ranges(std::span<const std::uint8_t> prefix, std::span<const peer::ByteRange> ranges,
                                    const core::ConstRegions& image) const override;

 private:
  // The bytes of [offset, offset + length) of `image`, read back to the host.
  bool read_back(const core::ConstRegions& image, std::uint64_t offset, std::uint64_t length,
                 std::vector<std::byte>& out) const;

  DeviceApi& device_;
  std::string name_;
};

}  // namespace tensorhub::cuda
