#include "peer/memory_domain.hpp"

#include <sodium.h>

#include <vector>

namespace tensorhub::peer {
namespace {

class HostMemory final : public MemoryDomain {
 public:
  std::string_view name() const override { return "host"; }

  bool verify_shard(const Manifest& manifest, ShardIndex index, const core::ConstRegions& image) const override {
    if (index.value >= manifest.shard_count()) return false;
    const ShardEntry& e = manifest.shard(index);
    if (e.byte_offset + e.byte_length > image.size()) return false;
    std::vector<ConstRegion> pieces;
    image.pieces(e.byte_offset, e.byte_length, pieces);
    return compute_shard_digest_of_pieces(manifest.body().shard_hash, pieces) == e.digest;
  }

  void copy(const core::ConstRegions& from, const core::MutableRegions& to, std::uint64_t offset,
            std::uint64_t length) const override {
    core::copy_range(from, to, offset, length);
  }

  core::Blake2bDigest digest_ranges(std::span<const std::uint8_t> prefix, std::span<const ByteRange> ranges,
                                    const core::ConstRegions& image) const override {
    crypto_generichash_state state;
    crypto_generichash_init(&state, nullptr, 0, 32);
    crypto_generichash_update(&state, prefix.data(), prefix.size());
    for (const ByteRange& r : ranges) {
      image.for_each(r.offset, r.length, [&](std::span<const std::byte> piece) {
        crypto_generichash_update(&state, reinterpret_cast<const unsigned char*>(piece.data()), piece.size());
      });
    }
    core::Blake2bDigest out{};
    crypto_generichash_final(&state, out.data(), out.size());
    return out;
  }
};

}  // namespace

const MemoryDomain& host_memory() {
  static const HostMemory host;
  return host;
}

}  // namespace tensorhub::peer
