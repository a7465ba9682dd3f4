// The shape of a version's image, as far as fetching and serving go: its
// size, its shards and the blocks a request covers, and a range of bytes
// within one shard.
#pragma once

#include <algorithm>
#include <cstdint>

#include "tensorhub/ids.hpp"

namespace tensorhub::swarm {

// Bytes [offset, offset + length) of one shard.
struct ShardRange {
  ShardIndex shard;
  std::uint64_t offset = 0;  // from the shard's first byte
  std::uint32_t length = 0;
};

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
  // The bytes of one block.
  ShardRange block_range(ShardIndex s, BlockIndex b) const {
    return ShardRange{s, std::uint64_t{b.value} * block_size, block_length(s, b)};
  }
  // The blocks a range touches, first and last.
  // REQUIRES: range.length != 0.
  BlockIndex first_block(const ShardRange& range) const {
    return BlockIndex{static_cast<std::uint32_t>(range.offset / block_size)};
  }
  BlockIndex last_block(const ShardRange& range) const {
    return BlockIndex{static_cast<std::uint32_t>((range.offset + range.length - 1) / block_size)};
  }
  // Where the range starts in the image.
  std::uint64_t image_offset(const ShardRange& range) const { return shard_offset(range.shard) + range.offset; }
};

}  // namespace tensorhub::swarm
