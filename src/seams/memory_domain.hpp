// Where a version's bytes live, and the work that touches them in bulk:
// verifying a shard and copying ranges. The peer's driver runs these on its
// work pool, never on its I/O thread; the peer core only says which.
//
// Host memory is built here; GPU memory (src/cuda/device_memory_domain.hpp:
// hashing on the device, device-side copies, payloads through a staging
// ring) implements the same interface, and the core and the swarm do not
// change for it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/hash.hpp"
#include "core/regions.hpp"
#include "seams/dma_buf.hpp"
#include "seams/payload_stage.hpp"
#include "seams/shared_range.hpp"
#include "tensorhub/manifest.hpp"

namespace tensorhub::peer {

// Bytes [offset, offset + length) of an image.
struct ByteRange {
  std::uint64_t offset = 0;
  std::uint32_t length = 0;
  friend bool operator==(const ByteRange&, const ByteRange&) = default;
};

// Regions another process shared, mapped for reading while this lives.
class SharedMapping {
 public:
  virtual ~SharedMapping() = default;
  virtual const core::ConstRegions& regions() const = 0;
};

class MemoryDomain {
 public:
  virtual ~MemoryDomain() = default;
  virtual std::string_view name() const = 0;
  // Whether shard `index` of `image` matches the manifest's digest (false
  // also when `image` could not be read: a mapped file truncated under it).
  // REQUIRES: `image` holds the manifest's whole image.
  virtual bool verify_shard(const Manifest& manifest, ShardIndex index, const core::ConstRegions& image) const = 0;
  // The `algorithm` digest of bytes [offset, offset + length) of `image`
  // into `out`: false when they could not be read.
  // REQUIRES: the range lies inside `image`.
  virtual bool digest(ShardHashAlgorithm algorithm, const core::ConstRegions& image, std::uint64_t offset,
                      std::uint64_t length, ShardDigest& out) const = 0;
  // Copies [offset, offset + length) of `from` to the same range of `to`.
  // Errors (`to` then holds part of the range): kUnavailable (`from` could
  // not be read: a mapped file truncated under it), kIoError (`to` refused
  // the bytes: a full or failing file system under a file, a device error).
  virtual Status copy(const core::ConstRegions& from, const core::MutableRegions& to, std::uint64_t offset,
                      std::uint64_t length) const = 0;
  // BLAKE2b-256 of `prefix`, then the bytes of `ranges` of `image` in order:
  // a proof of possession (possession_proofs.hpp); all zeros when `image`
  // could not be read. Small (tens of KiB): the core asks for it inline.
  // REQUIRES: every range lies inside `image`.
  virtual core::Blake2bDigest digest_ranges(std::span<const std::uint8_t> prefix, std::span<const ByteRange> ranges,
                                            const core::ConstRegions& image) const = 0;
  // Copies bytes [offset, offset + out.size()) of `image` to host memory
  // `out`: false when they could not be read.
  // REQUIRES: the range lies inside `image`.
  virtual bool read(const core::ConstRegions& image, std::uint64_t offset, std::span<std::byte> out) const = 0;
  // Copies host memory `bytes` to [offset, offset + bytes.size()) of `image`.
  // Errors: kIoError (`image` refused the bytes, naming why: no space left
  // on a file's file system, the file removed, a device error). A fetch
  // whose destination refuses bytes fails with that error.
  // REQUIRES: the range lies inside `image`.
  virtual Status write(const core::MutableRegions& image, std::uint64_t offset,
                       std::span<const std::byte> bytes) const = 0;

  // Whether the host reads and writes this memory directly: the transport
  // then receives into it and sends from it. Otherwise payloads go through
  // payload_stage() (or, when it has none or no buffer is free, a host
  // buffer and write()), and pieces are served from copies made by read().
  virtual bool host_accessible() const { return true; }
  // Whether the transport receives payloads straight into this memory.
  // Otherwise each goes through payload_stage(), or a host buffer and
  // write(), as above: memory the host cannot touch, and memory the host
  // writes faster by write() than by stores (a file, file_memory.hpp).
  virtual bool receives_in_place() const { return host_accessible(); }
  virtual PayloadStage* payload_stage() const { return nullptr; }
  // Host memory of `bytes` bytes to mirror a version of this domain in
  // (page-locked where the domain copies faster into it), freed when the
  // last owner lets go; null when none can be had. This one: anonymous
  // memory.
  virtual std::shared_ptr<std::span<std::byte>> allocate_mirror(std::size_t bytes) const;

  // Shares `image` with the other processes of this host (a host mate's
  // peer copies a version from it): one range per region, in order.
  // Errors: kUnavailable (this memory is not shareable; host memory is
  // not, here).
  virtual Status share(const core::ConstRegions& image, std::vector<SharedRange>& out) const;
  // Maps ranges that another process of this host shared, as memory this
  // domain reads and copies from. Errors: kUnavailable (they do not open
  // here: another host, their process is gone, or this domain maps none).
  virtual Result<std::unique_ptr<SharedMapping>> open_shared(std::span<const SharedRange> ranges) const;

  // How a NIC registers this memory for RDMA: by its address (host memory;
  // GPU memory where nvidia_peermem lets the NIC take device addresses),
  // through a dma-buf per region (export_dma_buf), or not at all (its
  // payloads move over TCP).
  enum class NicAccess { kAddress, kDmaBuf, kNone };
  virtual NicAccess nic_access() const { return NicAccess::kAddress; }
  // A dma-buf for `region` of this domain, which a NIC registers where the
  // host cannot address the memory (host memory is registered by its
  // address and needs none). Errors: kUnavailable (this memory exports
  // none: host memory, or a driver or kernel without dma-buf export);
  // kInvalidArgument (`region` is not this domain's memory).
  virtual Status export_dma_buf(std::span<const std::byte> region, DmaBuf& out) const;
  // The PCI device this memory belongs to, as sysfs names it
  // ("0000:17:00.0"): NICs nearest it move its bytes. Empty: host memory,
  // or unknown.
  virtual std::string pci_bus_id() const { return {}; }
};

// Host memory: XXH3-128 or BLAKE2b streamed over the shard's pieces, memcpy.
const MemoryDomain& host_memory();

// Builds and signs the manifest of `regions`, memory of `domain`: as
// build_manifest(), every shard's digest computed by the domain (on the GPU
// for GPU memory). Errors: as build_manifest().
Result<Manifest> build_manifest_in(const MemoryDomain& domain, const ManifestBuildOptions& options,
                                   std::span<const ConstRegion> regions, std::vector<TensorEntry> tensors,
                                   const Identity& publisher);

// Whether shard `index` of `image` matches its manifest digest, by
// domain.digest(): the verify_shard of domains that have nothing faster.
bool verify_shard_by_digest(const MemoryDomain& domain, const Manifest& manifest, ShardIndex index,
                            const core::ConstRegions& image);

// Copies shard `index` from `from` into `to` and verifies it there (the
// source is memory its owner may have changed since it was verified).
// Errors: as MemoryDomain::copy; kVerifyFailed (the copy does not match the
// manifest).
Status copy_verified_shard(const MemoryDomain& domain, const Manifest& manifest, ShardIndex index,
                         const core::ConstRegions& from, const core::MutableRegions& to);

}  // namespace tensorhub::peer
