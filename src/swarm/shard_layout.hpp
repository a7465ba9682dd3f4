// The shape of a version's image, as far as fetching and serving go: its
// size, its shards and the blocks a request covers.
#pragma once

#include <algorithm>
#include <cstdint>

#include "tensorhub/ids.hpp"

namespace tensorhub::swarm {

struct ShardLayout {
  std::uint64_t total_size = 0;
  std::uint64_t shard_size = 0;
  std::uint32_t block_size = 0;

  std::uint32_t shard_count() const { return static_cast<std::uint32_t>((total_size + shard_size - 1) / shard_size); }
  std::uint64_t shard_offset(ShardIndex s) const { return std::uint64_t{s.value} * shard_size; }
  std::uint64_t shard_length(ShardIndex s) const { return std::min(shard_size, total_size - shard_offset(s)); }
  std::uint32_t block_count(ShardIndex s) const {
    return static_cast<std::uint32_t>((shard_length(s) + block_size - 1) / block_size);
  }
  std::uint32_t block_length(ShardIndex s, BlockIndex b) const {
    return static_cast<std::uint32_t>(std::min<std::uint64_t>(block_size, shard_length(s) - std::uint64_t{b.value} * block_size));
  }
};

}  // namespace tensorhub::swarm
