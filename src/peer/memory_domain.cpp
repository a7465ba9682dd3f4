#include "peer/memory_domain.hpp"

#include <sodium.h>

#include <cstring>
#include <vector>

#include "core/bus_error_guard.hpp"

namespace tensorhub::peer {
namespace {

class HostMemory final : public MemoryDomain {
 public:
  std::string_view name() const override { return "host"; }

  // Every read below may touch a mapped file truncated under it: a fault
  // fails the read (core::read_guarded), never the process.

  bool verify_shard(const Manifest& manifest, ShardIndex index, const core::ConstRegions& image) const override {
    if (index.value >= manifest.shard_count()) return false;
    const ShardEntry& e = manifest.shard(index);
    if (e.byte_offset + e.byte_length > image.size()) return false;
    std::vector<ConstRegion> pieces;
    image.pieces(e.byte_offset, e.byte_length, pieces);
    ShardDigest digest{};
    const ShardHashAlgorithm algorithm = manifest.body().shard_hash;
    if (!core::read_guarded([&] { digest = compute_shard_digest_of_pieces(algorithm, pieces); })) return false;
    return digest == e.digest;
  }

  bool copy(const core::ConstRegions& from, const core::MutableRegions& to, std::uint64_t offset,
            std::uint64_t length) const override {
    return core::read_guarded([&] { core::copy_range(from, to, offset, length); });
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

  bool write(const core::MutableRegions& image, std::uint64_t offset, std::span<const std::byte> bytes) const override {
    return core::read_guarded([&] {
      std::size_t at = 0;
      image.for_each(offset, bytes.size(), [&](std::span<std::byte> piece) {
        std::memcpy(piece.data(), bytes.data() + at, piece.size());
        at += piece.size();
      });
    });
  }
};

}  // namespace

const MemoryDomain& host_memory() {
  static const HostMemory host;
  return host;
}

bool copy_verified_shard(const MemoryDomain& domain, const Manifest& manifest, ShardIndex index,
                         const core::ConstRegions& from, const core::MutableRegions& to) {
  const ShardEntry& e = manifest.shard(index);
  return domain.copy(from, to, e.byte_offset, e.byte_length) && domain.verify_shard(manifest, index, to.as_const());
}

}  // namespace tensorhub::peer
