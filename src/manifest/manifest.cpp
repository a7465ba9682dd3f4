#include <algorithm>

#include "core/hash.hpp"
#include "core/model_name.hpp"
#include "manifest/manifest_codec.hpp"
#include "tensorhub/manifest.hpp"

namespace tensorhub {

std::string_view shard_hash_name(ShardHashAlgorithm algorithm) {
  return algorithm == ShardHashAlgorithm::kBlake2b_256 ? "blake2b-256" : "xxh3-128";
}

std::size_t shard_hash_size(ShardHashAlgorithm algorithm) {
  return algorithm == ShardHashAlgorithm::kBlake2b_256 ? 32 : 16;
}

namespace {

template <std::size_t N>
ShardDigest shard_digest_of(const std::array<std::uint8_t, N>& d) {
  ShardDigest digest;
  std::copy(d.begin(), d.end(), digest.bytes.begin());
  digest.size = static_cast<std::uint8_t>(N);
  return digest;
}

}  // namespace

ShardDigest compute_shard_digest(ShardHashAlgorithm algorithm, std::span<const std::byte> bytes) {
  return algorithm == ShardHashAlgorithm::kBlake2b_256 ? shard_digest_of(core::blake2b_256(bytes))
                                                       : shard_digest_of(core::xxh3_128(bytes));
}

ShardDigest compute_shard_digest_of_pieces(ShardHashAlgorithm algorithm, std::span<const ConstRegion> pieces) {
  if (pieces.size() == 1) return compute_shard_digest(algorithm, pieces[0]);
  return algorithm == ShardHashAlgorithm::kBlake2b_256 ? shard_digest_of(core::blake2b_256_of_pieces(pieces))
                                                       : shard_digest_of(core::xxh3_128_of_pieces(pieces));
}

Status validate_model_name(std::string_view name) {
  return core::validate_model_name(name, kMaxModelNameBytes);
}

const ViewEntry* Manifest::find_view(const ManifestId& key) const {
  auto it = std::lower_bound(body_.views.begin(), body_.views.end(), key,
                             [](const ViewEntry& v, const ManifestId& k) { return v.key < k; });
  return it != body_.views.end() && it->key == key ? &*it : nullptr;
}

std::vector<TensorIndex> Manifest::tensors_in_shard(ShardIndex index) const {
  std::vector<TensorIndex> out;
  const ShardEntry& s = shard(index);
  const std::uint64_t end = s.byte_offset + s.byte_length;
  const auto& tensors = body_.tensors;
  // Tensors are sorted by offset and do not overlap, so their ends are sorted too.
  auto first = std::partition_point(tensors.begin(), tensors.end(), [&](const TensorEntry& t) {
    return t.byte_offset + t.byte_length <= s.byte_offset;
  });
  for (auto it = first; it != tensors.end() && it->byte_offset < end; ++it) {
    if (it->byte_length == 0) continue;
    out.push_back(TensorIndex{static_cast<std::uint32_t>(it - tensors.begin())});
  }
  return out;
}

std::string Manifest::describe_tensors_in_shard(ShardIndex index, std::size_t max_names) const {
  auto tensors = tensors_in_shard(index);
  if (tensors.empty()) return "no tensor (header or padding bytes)";
  std::string out;
  for (std::size_t i = 0; i < tensors.size() && i < max_names; ++i) {
    if (i > 0) out += ", ";
    out += body_.tensors[tensors[i].value].name;
  }
  if (tensors.size() > max_names) out += " and " + std::to_string(tensors.size() - max_names) + " more";
  return out;
}

}  // namespace tensorhub
