#include <algorithm>
#include <atomic>

#include "core/parallel_for.hpp"
#include "manifest/chain_link.hpp"
#include "manifest/manifest_codec.hpp"
#include "tensorhub/manifest.hpp"

namespace tensorhub {

Status verify_manifest_signature(const Manifest& manifest, std::span<const PublicKey> trusted) {
  if (std::find(trusted.begin(), trusted.end(), manifest.publisher()) == trusted.end()) {
    return Status::verify_failed("signature: publisher " + manifest.publisher().hex() + " is not a trusted key");
  }
  if (!verify_signature(manifest.publisher(), manifest_detail::signing_message(manifest.id()),
                        manifest.signature())) {
    return Status::verify_failed("signature: invalid signature by publisher " + manifest.publisher().short_hex() +
                                 " over manifest " + manifest.id().short_hex());
  }
  return Status::ok();
}

Status verify_manifest_chain(const Manifest& parent, const Manifest& child) {
  return manifest::verify_chain_link({parent.model(), parent.version(), parent.id(), parent.parent()},
                                     {child.model(), child.version(), child.id(), child.parent()});
}

Status manifest::verify_chain_link(const ChainLink& parent, const ChainLink& child) {
  if (child.model != parent.model) {
    return Status::verify_failed("chain: model '" + child.model + "' does not extend model '" + parent.model + "'");
  }
  if (child.parent != parent.id) {
    return Status::verify_failed("chain: version " + std::to_string(child.version) + " names parent " +
                                 child.parent.short_hex() + ", not " + parent.id.short_hex() + " (version " +
                                 std::to_string(parent.version) + ")");
  }
  if (child.version <= parent.version) {
    return Status::verify_failed("chain: version " + std::to_string(child.version) +
                                 " does not exceed its parent's version " + std::to_string(parent.version));
  }
  return Status::ok();
}

bool verify_shard(const Manifest& manifest, ShardIndex index, std::span<const std::byte> bytes) {
  if (index.value >= manifest.shard_count()) return false;
  const ShardEntry& s = manifest.shard(index);
  if (bytes.size() != s.byte_length) return false;
  return compute_shard_digest(manifest.body().shard_hash, bytes) == s.digest;
}

Status verify_image(const Manifest& manifest, std::span<const std::byte> image, unsigned threads) {
  if (image.size() != manifest.total_size()) {
    return Status::verify_failed("image is " + std::to_string(image.size()) + " bytes, the manifest describes " +
                                 std::to_string(manifest.total_size()));
  }
  std::atomic<std::size_t> first_bad{manifest.shard_count()};
  core::parallel_for(manifest.shard_count(), threads, [&](std::size_t i) {
    const ShardEntry& s = manifest.shard(ShardIndex{static_cast<std::uint32_t>(i)});
    if (!verify_shard(manifest, ShardIndex{static_cast<std::uint32_t>(i)}, image.subspan(s.byte_offset, s.byte_length))) {
      std::size_t seen = first_bad.load();
      while (i < seen && !first_bad.compare_exchange_weak(seen, i)) {
      }
    }
  });
  const std::size_t bad = first_bad.load();
  if (bad == manifest.shard_count()) return Status::ok();
  const ShardIndex index{static_cast<std::uint32_t>(bad)};
  const ShardEntry& s = manifest.shard(index);
  return Status::verify_failed("shard " + std::to_string(bad) + " (bytes " + std::to_string(s.byte_offset) + ".." +
                               std::to_string(s.byte_offset + s.byte_length) + ") does not match its hash; it holds " +
                               manifest.describe_tensors_in_shard(index));
}

}  // namespace tensorhub
