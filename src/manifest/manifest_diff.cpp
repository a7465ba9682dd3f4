#include "tensorhub/manifest.hpp"

namespace tensorhub {

ManifestDiff diff_manifests(const Manifest& from, const Manifest& to) {
  ManifestDiff diff;
  diff.comparable = from.shard_size() == to.shard_size() && from.body().shard_hash == to.body().shard_hash;
  for (std::size_t i = 0; i < to.shard_count(); ++i) {
    const ShardIndex index{static_cast<std::uint32_t>(i)};
    const ShardEntry& s = to.shard(index);
    const bool unchanged = diff.comparable && i < from.shard_count() && from.shard(index) == s;
    if (!unchanged) {
      diff.changed.push_back(index);
      diff.changed_bytes += s.byte_length;
    }
  }
  return diff;
}

}  // namespace tensorhub
