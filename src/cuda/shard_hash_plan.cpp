// shard_hash_plan(): host-side numbering of the GPU hash's work items, built
// with or without CUDA so that the CPU tests check it.
#include "cuda/shard_hash_kernel.hpp"

namespace tensorhub::cuda {

std::uint64_t shard_hash_plan(DeviceShard* shards, std::size_t count, std::uint64_t* item_start) {
  std::uint64_t items = 0;
  std::uint64_t slots = 0;
  for (std::size_t s = 0; s < count; ++s) {
    item_start[s] = items;
    shards[s].terms_at = slots;
    if (shards[s].length > xxh3::kMidsizeMax) {
      // One item per full block, and the tail's.
      const std::uint64_t n = xxh3::chain_blocks(shards[s].length) + 1;
      items += n;
      slots += n;
    }
  }
  item_start[count] = items;
  return slots;
}

}  // namespace tensorhub::cuda
