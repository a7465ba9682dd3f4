// GPU memory as a memory domain (seams/memory_domain.hpp): a version whose
// regions are device memory is verified on the device (the XXH3 kernels;
// only the 16-byte digest comes back), copied device-side, and proved over
// small ranges read back to the host. Payloads received for it land through
// a staging ring (the transport never writes device memory itself), and
// pieces served from it come from a pinned host mirror read back once.
// A NIC registers its regions through dma-bufs (export_dma_buf), and a
// shard is verified only after what NICs wrote into it is flushed.
// Built over DeviceApi, so the deterministic tests run it
// on the fake device.
//
// Secure mode's BLAKE2b-256 shards have no device kernel: such a shard is
// read back to the host and hashed there (correct, and as slow as that
// sounds; docs/gpu.md says so).
#pragma once

#include <string>

#include "cuda/device_api.hpp"
#include "seams/memory_domain.hpp"

namespace tensorhub::cuda {

class DeviceMemoryDomain final : public peer::MemoryDomain {
 public:
  // REQUIRES: `device` and `stage` (a StagingRing on that device, or null:
  // payloads then land through host buffers and synchronous copies) outlive
  // the domain and every version in it.
  explicit DeviceMemoryDomain(DeviceApi& device, peer::PayloadStage* stage = nullptr)
      : device_(device), stage_(stage), name_(device.name()) {}

  std::string_view name() const override { return name_; }
  bool verify_shard(const Manifest& manifest, ShardIndex index, const core::ConstRegions& image) const override;
  bool digest(ShardHashAlgorithm algorithm, const core::ConstRegions& image, std::uint64_t offset,
              std::uint64_t length, ShardDigest& out) const override;
  // `from` may be host memory or device memory; `to` is this domain's.
  Status copy(const core::ConstRegions& from, const core::MutableRegions& to, std::uint64_t offset,
              std::uint64_t length) const override;
  core::Blake2bDigest digest_ranges(std::span<const std::uint8_t> prefix, std::span<const peer::ByteRange> ranges,
                                    const core::ConstRegions& image) const override;
  bool read(const core::ConstRegions& image, std::uint64_t offset, std::span<std::byte> out) const override;
  Status write(const core::MutableRegions& image, std::uint64_t offset,
               std::span<const std::byte> bytes) const override;
  bool host_accessible() const override { return false; }
  peer::PayloadStage* payload_stage() const override { return stage_; }
  // Pinned host memory (the read-back runs at full speed), else anonymous.
  std::shared_ptr<std::span<std::byte>> allocate_mirror(std::size_t bytes) const override;
  // By CUDA IPC (DeviceApi::share_ipc, open_ipc).
  Status share(const core::ConstRegions& image, std::vector<peer::SharedRange>& out) const override;
  Result<std::unique_ptr<peer::SharedMapping>> open_shared(std::span<const peer::SharedRange> ranges) const override;
  std::string pci_bus_id() const override { return device_.pci_bus_id(); }
  // As the device's probe says (DeviceApi::rdma_registration).
  NicAccess nic_access() const override;
  // By DeviceApi::export_dma_buf.
  Status export_dma_buf(std::span<const std::byte> region, peer::DmaBuf& out) const override;

 private:
  DeviceApi& device_;
  peer::PayloadStage* stage_;
  std::string name_;
};

}  // namespace tensorhub::cuda
