#include <algorithm>
#include <atomic>

#include "core/bus_error_guard.hpp"
#include "core/parallel_for.hpp"
#include "core/regions.hpp"
#include "manifest/manifest_build.hpp"
#include "manifest/manifest_codec.hpp"
#include "manifest/part_view.hpp"
#include "manifest/selection.hpp"
#include "tensorhub/manifest.hpp"

namespace tensorhub {

std::uint64_t auto_shard_size(std::uint64_t image_size) {
  constexpr std::uint64_t kTargetShards = 2048;
  constexpr std::uint64_t kSmallest = 128ull << 10, kLargest = 256ull << 20;
  std::uint64_t size = kSmallest;
  while (size < kLargest && (size << 1) * kTargetShards <= image_size) size <<= 1;
  return size;
}

Result<Manifest> build_manifest(const ManifestBuildOptions& options, std::span<const std::byte> image,
                                std::vector<TensorEntry> tensors, const Identity& publisher) {
  if (image.empty()) return build_manifest(options, std::span<const ConstRegion>(), std::move(tensors), publisher);
  const ConstRegion one[] = {image};
  return build_manifest(options, std::span<const ConstRegion>(one), std::move(tensors), publisher);
}

namespace {

// manifest_shape() without its refusal of declared views.
Result<ManifestBody> shape_of(const ManifestBuildOptions& options, std::uint64_t image_size,
                              std::vector<TensorEntry> tensors, const PublicKey& publisher) {
  ManifestBody body;
  body.model = options.model;
  body.version = options.version;
  body.part = options.part;
  body.parent = options.parent;
  body.created_unix_ms = options.created_unix_ms;
  body.publisher = publisher;
  body.shard_hash = options.shard_hash;
  body.shard_size = options.shard_size == kAutoShardSize ? auto_shard_size(image_size) : options.shard_size;
  body.total_size = image_size;
  std::sort(tensors.begin(), tensors.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return std::pair(a.byte_offset, a.byte_length) < std::pair(b.byte_offset, b.byte_length);
  });
  body.tensors = std::move(tensors);
  const bool shard_size_ok = body.shard_size >= kMinShardSize && body.shard_size <= kMaxShardSize;
  if (shard_size_ok && image_size > 0 && image_size <= kMaxImageSize) {
    const std::uint64_t count = (image_size + body.shard_size - 1) / body.shard_size;
    if (count <= kMaxShards) {
      body.shards.resize(count);
      for (std::uint64_t i = 0; i < count; ++i) {
        ShardEntry& s = body.shards[i];
        s.byte_offset = i * body.shard_size;
        s.byte_length = std::min<std::uint64_t>(body.shard_size, image_size - s.byte_offset);
        s.digest.size = static_cast<std::uint8_t>(shard_hash_size(options.shard_hash));
      }
    }
  }
  TENSORHUB_RETURN_IF_ERROR(manifest_detail::validate_body(body));
  return body;
}

}  // namespace

Result<ManifestBody> manifest_shape(const ManifestBuildOptions& options, std::uint64_t image_size,
                                    std::vector<TensorEntry> tensors, const PublicKey& publisher) {
  if (!options.views.empty()) {
    return Status::invalid_argument("declared views are hashed by build_manifest, not in a manifest's shape");
  }
  return shape_of(options, image_size, std::move(tensors), publisher);
}

Result<Manifest> build_manifest(const ManifestBuildOptions& options, std::span<const ConstRegion> regions,
                                std::vector<TensorEntry> tensors, const Identity& publisher) {
  // The image may be a mapped file that another process truncates while it
  // is hashed: a shard that cannot be read fails the build, not the process.
  const ShardDigester on_cpu = [](ShardHashAlgorithm algorithm, const core::ConstRegions& image, std::uint64_t offset,
                                  std::uint64_t length, ShardDigest& out) {
    std::vector<ConstRegion> pieces;
    image.pieces(offset, length, pieces);
    return core::read_guarded([&] { out = compute_shard_digest_of_pieces(algorithm, pieces); });
  };
  return build_manifest_digesting(options, regions, std::move(tensors), publisher, on_cpu,
                                  "host (a mapped file truncated under it?)");
}


Result<Manifest> build_manifest_digesting(const ManifestBuildOptions& options, std::span<const ConstRegion> regions,
                                          std::vector<TensorEntry> tensors, const Identity& publisher,
                                          const ShardDigester& digester, std::string_view memory) {
  for (const ConstRegion& r : regions) {
    if (r.empty()) return Status::invalid_argument("an image region is empty");
  }
  const core::ConstRegions image(regions);
  // Cheap checks first, so a bad argument fails before hashing gigabytes.
  auto shape = shape_of(options, image.size(), std::move(tensors), publisher.public_key());
  if (!shape) return shape.status();
  ManifestBody body = std::move(*shape);
  auto views = manifest::declared_views(
      body.tensors, body.total_size, body.shard_size, options.views,
      "the image of " + options.model + " v" + std::to_string(options.version) +
          (options.part ? " part " + std::to_string(options.part->index) : std::string()));
  if (!views) return views.status();
  std::atomic<bool> unreadable{false};
  core::parallel_for(body.shards.size(), options.threads, [&](std::size_t i) {
    ShardEntry& s = body.shards[i];
    if (!digester(body.shard_hash, image, s.byte_offset, s.byte_length, s.digest)) unreadable = true;
  });
  // Each view is hashed as an image of its own, gathered from this one's
  // memory (no copy), in shards of the manifest's shard size.
  for (const manifest::PartView& view : *views) {
    std::vector<ConstRegion> gathered;
    for (const manifest::LandingRun& run : view.gather) image.pieces(run.part_offset, run.length, gathered);
    const core::ConstRegions view_image{std::span<const ConstRegion>(gathered)};
    ViewEntry entry{view.key, view.size, {}};
    entry.digests.resize((view.size + body.shard_size - 1) / body.shard_size);
    core::parallel_for(entry.digests.size(), options.threads, [&](std::size_t i) {
      const std::uint64_t offset = i * body.shard_size;
      const std::uint64_t length = std::min(body.shard_size, view.size - offset);
      if (!digester(body.shard_hash, view_image, offset, length, entry.digests[i])) unreadable = true;
    });
    body.views.push_back(std::move(entry));
  }
  if (unreadable) {
    return Status::io_error("the image could not be read while it was hashed, in " + std::string(memory) + " memory");
  }
  return sign_manifest(std::move(body), publisher);
}

Result<Manifest> sign_manifest(ManifestBody body, const Identity& publisher) {
  if (body.publisher != publisher.public_key()) {
    return Status::invalid_argument("the body names publisher " + body.publisher.short_hex() + ", not the signer " +
                                    publisher.public_key().short_hex());
  }
  TENSORHUB_RETURN_IF_ERROR(manifest_detail::validate_body(body));
  const std::vector<std::uint8_t> body_bytes = manifest_detail::encode_body(body);
  const ManifestId id = manifest_detail::compute_manifest_id(body_bytes);
  const Signature signature = publisher.sign(manifest_detail::signing_message(id));
  return ManifestAccess::assemble(std::move(body), body_bytes, signature);
}

}  // namespace tensorhub
