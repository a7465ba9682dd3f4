#include "seams/memory_domain.hpp"

#include <sodium.h>

#include <cstring>
#include <vector>

#include "core/anonymous_memory.hpp"
#include "core/bus_error_guard.hpp"
#include "manifest/manifest_build.hpp"

namespace tensorhub::peer {
namespace {

class HostMemory final : public MemoryDomain {
 public:
  std::string_view name() const override { return "host"; }

  // Every read below may touch a mapped file truncated under it: a fault
  // fails the read (core::read_guarded), never the process.

  bool verify_shard(const Manifest& manifest, ShardIndex index, const core::ConstRegions& image) const override {
    return verify_shard_by_digest(*this, manifest, index, image);
  }

  bool digest(ShardHashAlgorithm algorithm, const core::ConstRegions& image, std::uint64_t offset,
              std::uint64_t length, ShardDigest& out) const override {
    std::vector<ConstRegion> pieces;
    image.pieces(offset, length, pieces);
    return core::read_guarded([&] { out = compute_shard_digest_of_pieces(algorithm, pieces); });
  }

  Status copy(const core::ConstRegions& from, const core::MutableRegions& to, std::uint64_t offset,
              std::uint64_t length) const override {
    if (core::read_guarded([&] { core::copy_range(from, to, offset, length); })) return Status::ok();
    return Status::unavailable("the bytes to copy could not be read (a mapped file truncated under them)");
  }

  core::Blake2bDigest digest_ranges(std::span<const std::uint8_t> prefix, std::span<const ByteRange> ranges,
                                    const core::ConstRegions& image) const override {
    crypto_generichash_state state;
    crypto_generichash_init(&state, nullptr, 0, 32);
    crypto_generichash_update(&state, prefix.data(), prefix.size());
    const bool read = core::read_guarded([&] {
      for (const ByteRange& r : ranges) {
        image.for_each(r.offset, r.length, [&](std::span<const std::byte> piece) {
          crypto_generichash_update(&state, reinterpret_cast<const unsigned char*>(piece.data()), piece.size());
        });
      }
    });
    core::Blake2bDigest out{};
    // Bytes that could not be read prove nothing: all zeros matches no digest.
    if (read) crypto_generichash_final(&state, out.data(), out.size());
    return out;
  }

  bool read(const core::ConstRegions& image, std::uint64_t offset, std::span<std::byte> out) const override {
    return core::read_guarded([&] {
      std::size_t at = 0;
      image.for_each(offset, out.size(), [&](std::span<const std::byte> piece) {
        std::memcpy(out.data() + at, piece.data(), piece.size());
        at += piece.size();
      });
    });
  }

  Status write(const core::MutableRegions& image, std::uint64_t offset,
               std::span<const std::byte> bytes) const override {
    const bool written = core::read_guarded([&] {
      std::size_t at = 0;
      image.for_each(offset, bytes.size(), [&](std::span<std::byte> piece) {
        std::memcpy(piece.data(), bytes.data() + at, piece.size());
        at += piece.size();
      });
    });
    if (written) return Status::ok();
    return Status::io_error("the destination memory could not be written (a mapped file truncated under it)");
  }
};

}  // namespace

const MemoryDomain& host_memory() {
  static const HostMemory host;
  return host;
}

Status MemoryDomain::share(const core::ConstRegions&, std::vector<SharedRange>&) const {
  return Status::unavailable(std::string(name()) + " memory is not shared with other processes");
}

Result<std::unique_ptr<SharedMapping>> MemoryDomain::open_shared(std::span<const SharedRange>) const {
  return Status::unavailable(std::string(name()) + " memory maps no other process's memory");
}

Status MemoryDomain::export_dma_buf(std::span<const std::byte>, DmaBuf&) const {
  return Status::unavailable(std::string(name()) + " memory exports no dma-buf (a NIC registers it by address)");
}

std::shared_ptr<std::span<std::byte>> MemoryDomain::allocate_mirror(std::size_t bytes) const {
  struct Mirror {
    core::AnonymousMemory memory;
    std::span<std::byte> bytes;
  };
  auto memory = core::AnonymousMemory::allocate(bytes);
  if (!memory) return nullptr;
  auto mirror = std::make_shared<Mirror>(Mirror{std::move(*memory), {}});
  mirror->bytes = mirror->memory.bytes();
  return std::shared_ptr<std::span<std::byte>>(mirror, &mirror->bytes);
}

bool verify_shard_by_digest(const MemoryDomain& domain, const Manifest& manifest, ShardIndex index,
                            const core::ConstRegions& image) {
  if (index.value >= manifest.shard_count()) return false;
  const ShardEntry& e = manifest.shard(index);
  if (e.byte_offset + e.byte_length > image.size()) return false;
  ShardDigest digest{};
  return domain.digest(manifest.body().shard_hash, image, e.byte_offset, e.byte_length, digest) && digest == e.digest;
}

Result<Manifest> build_manifest_in(const MemoryDomain& domain, const ManifestBuildOptions& options,
                                   std::span<const ConstRegion> regions, std::vector<TensorEntry> tensors,
                                   const Identity& publisher) {
  const ShardDigester in_domain = [&domain](ShardHashAlgorithm algorithm, const core::ConstRegions& image,
                                            std::uint64_t offset, std::uint64_t length, ShardDigest& out) {
    return domain.digest(algorithm, image, offset, length, out);
  };
  return build_manifest_digesting(options, regions, std::move(tensors), publisher, in_domain, domain.name());
}

Status copy_verified_shard(const MemoryDomain& domain, const Manifest& manifest, ShardIndex index,
                           const core::ConstRegions& from, const core::MutableRegions& to) {
  const ShardEntry& e = manifest.shard(index);
  TENSORHUB_RETURN_IF_ERROR(domain.copy(from, to, e.byte_offset, e.byte_length));
  if (!domain.verify_shard(manifest, index, to.as_const())) {
    return Status::verify_failed("the copy of shard " + std::to_string(index.value) + " does not match its manifest");
  }
  return Status::ok();
}

}  // namespace tensorhub::peer
