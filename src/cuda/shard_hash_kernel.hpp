// XXH3-128 of shards that lie in GPU memory, computed on the GPU in two
// kernels (xxh3_blocks.hpp explains the split): phase 1 sums each 1 KiB
// block's terms, a warp per run of consecutive blocks; phase 2 runs each shard's scramble
// chain (8 threads, one per lane), merges, writes the canonical digest and,
// where an expected digest is given, a verdict byte. Only digests and
// verdicts leave the device.
//
// This is the CUDA runtime layer: plain types, no CUDA headers, so callers
// built by the host compiler can include it. Errors are a message (nullptr
// on success), wrapped into Status by the memory domain.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/xxh3_blocks.hpp"

namespace tensorhub::cuda {

// One shard: `piece_count` pieces from `first_piece` on, laid end to end
// (device pointers in the piece table). `terms_at` is its first slot in the
// scratch of Lanes (chain_blocks + 1 slots for a long shard, none for a
// short one); shard_hash_plan() fills it.
struct DeviceShard {
  std::uint32_t first_piece = 0;
  std::uint32_t piece_count = 0;
  std::uint64_t length = 0;
  std::uint64_t terms_at = 0;
  std::uint8_t expected[16] = {};
  std::uint8_t has_expected = 0;  // 0: compute the digest only
};

// Phase 1's work items: one per full block and one per tail, numbered
// shard by shard; item_start[s] is shard s's first (count + 1 entries).
// Sets terms_at of each shard and returns the scratch slots (Lanes) needed.
std::uint64_t shard_hash_plan(DeviceShard* shards, std::size_t count, std::uint64_t* item_start);

// Device buffers of one batch (all device memory, except `verdicts` and
// `digests`, which may be host-mapped pinned memory).
struct ShardHashBatch {
  const xxh3::Piece* pieces = nullptr;      // the piece table
  const DeviceShard* shards = nullptr;
  const std::uint64_t* item_start = nullptr;  // count + 1 entries
  std::size_t count = 0;
  std::uint64_t items = 0;                  // item_start[count]
  xxh3::Lanes* terms = nullptr;             // shard_hash_plan()'s slots
  std::uint8_t* digests = nullptr;          // 16 bytes a shard, canonical
  std::uint8_t* verdicts = nullptr;         // 1: matches; 0: differs or no expected digest
};

// Enqueues both phases on `stream` (a cudaStream_t; nullptr: the default
// stream). Returns nullptr, or the launch error's message.
const char* launch_shard_hash(const ShardHashBatch& batch, void* stream);
// Each phase alone, for the GPU benchmark's breakdown.
const char* launch_shard_hash_phase1(const ShardHashBatch& batch, void* stream);
const char* launch_shard_hash_phase2(const ShardHashBatch& batch, void* stream);
// Phase 1 with a chosen number of consecutive items (1 KiB blocks) per warp
// (0: chosen from the batch's size, as launch_shard_hash does), for tuning.
const char* launch_shard_hash_phase1_with(const ShardHashBatch& batch, void* stream, unsigned items_per_warp);
// The items per warp that launch_shard_hash gives a batch of `items`.
unsigned phase1_items_per_warp(std::uint64_t items);

}  // namespace tensorhub::cuda
