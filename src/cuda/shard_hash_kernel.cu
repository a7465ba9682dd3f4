#include "cuda/shard_hash_kernel.hpp"

#include <cuda_runtime_api.h>

namespace tensorhub::cuda {
namespace {

using xxh3::kBlockBytes;
using xxh3::kLanes;
using xxh3::kWarpThreads;
using xxh3::Lanes;

constexpr int kPhase1Threads = 256;  // 8 warps
constexpr int kPhase2Threads = 128;  // 16 shards of 8 lanes
constexpr int kChainAhead = 16;      // terms in registers ahead of the dependent chain
// A warp takes up to this many consecutive items, so that the shard lookup
// and the thread's secret words are paid once per run of blocks, not per
// block; fewer when the batch is too small to fill the GPU that way.
constexpr unsigned kMaxItemsPerWarp = 32;
constexpr std::uint64_t kWarpsToFill = 4096;  // about 32 warps on each of an H100's 132 SMs

// The shard that holds item `item`: the last s with item_start[s] <= item.
__device__ std::size_t shard_of_item(const std::uint64_t* item_start, std::size_t count, std::uint64_t item) {
  std::size_t lo = 0;
  std::size_t hi = count;  // item_start[hi] > item
  while (hi - lo > 1) {
    const std::size_t mid = (lo + hi) / 2;
    if (item_start[mid] <= item) lo = mid; else hi = mid;
  }
  return lo;
}

// One warp per run of `per_warp` items, in order: for each, a full block's
// terms summed over the warp with shuffles, or (lane 0 alone) the shard's
// tail terms.
__global__ void phase1_kernel(ShardHashBatch batch, unsigned per_warp) {
  const std::uint64_t warp = (static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarpThreads;
  const int t = static_cast<int>(threadIdx.x % kWarpThreads);
  std::uint64_t item = warp * per_warp;
  if (item >= batch.items) return;  // whole warps leave together
  const std::uint64_t end = item + per_warp < batch.items ? item + per_warp : batch.items;
  // The secret words of this thread's four words of a block: the same in
  // every block (constant memory serializes the warp's distinct addresses,
  // so they are read once).
  std::uint64_t keys[xxh3::kWordsPerThread];
#pragma unroll
  for (int j = 0; j < xxh3::kWordsPerThread; ++j) keys[j] = xxh3::secret64(xxh3::word_secret_offset(xxh3::thread_word(t, j)));
  std::size_t s = shard_of_item(batch.item_start, batch.count, item);
  for (; item < end; ++item) {
    while (s + 1 < batch.count && item >= batch.item_start[s + 1]) ++s;
    const DeviceShard& shard = batch.shards[s];
    const xxh3::PiecesLoader in{batch.pieces + shard.first_piece, static_cast<int>(shard.piece_count)};
    const std::uint64_t block = item - batch.item_start[s];
    Lanes* out = batch.terms + shard.terms_at + block;
    if (block == xxh3::chain_blocks(shard.length)) {
      if (t == 0) *out = xxh3::tail_terms(in, shard.length);
      continue;
    }
    const std::uint64_t at = block * kBlockBytes;
    std::uint64_t product = 0;
    std::uint64_t data = 0;
    std::uint64_t within = at;
    const int p = in.locate(within);
    const std::uint8_t* base = in.pieces[p].data + within;
    if (within + kBlockBytes <= in.pieces[p].length && (reinterpret_cast<std::uintptr_t>(base) % 8) == 0) {
      // The common case: the block in one piece, aligned: coalesced loads.
      const std::uint64_t* words = reinterpret_cast<const std::uint64_t*>(base);
      std::uint64_t loaded[xxh3::kWordsPerThread];
#pragma unroll
      for (int j = 0; j < xxh3::kWordsPerThread; ++j) loaded[j] = __ldg(words + xxh3::thread_word(t, j));
#pragma unroll
      for (int j = 0; j < xxh3::kWordsPerThread; ++j) xxh3::add_word_terms(loaded[j], keys[j], product, data);
    } else {
      xxh3::thread_block_terms(in, at, t, product, data);
    }
    // Threads t, t^8, t^16, t^24 share lane t % 8: sum over them.
    const unsigned all = 0xFFFFFFFFu;
    product += __shfl_xor_sync(all, product, 8);
    product += __shfl_xor_sync(all, product, 16);
    data += __shfl_xor_sync(all, data, 8);
    data += __shfl_xor_sync(all, data, 16);
    // Lane i's term is its products plus the data of lane i ^ 1.
    const std::uint64_t partner_data = __shfl_xor_sync(all, data, 1);
    if (t < kLanes) out->v[t] = product + partner_data;
  }
}

// Eight threads per shard, one per lane: the chain, then lane 0 merges.
__global__ void phase2_kernel(ShardHashBatch batch) {
  const std::uint64_t global = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t s = global / kLanes;
  const int lane = static_cast<int>(global % kLanes);
  // Groups of 8 never straddle a shard boundary, so a group is all in or out.
  if (s >= batch.count) return;
  const DeviceShard& shard = batch.shards[s];
  const xxh3::PiecesLoader in{batch.pieces + shard.first_piece, static_cast<int>(shard.piece_count)};
  xxh3::Hash128 h;
  const unsigned group = 0xFFu << (threadIdx.x % kWarpThreads / kLanes * kLanes);
  if (shard.length <= xxh3::kMidsizeMax) {
    if (lane != 0) return;
    h = xxh3::hash_short(in, shard.length);
  } else {
    const Lanes* terms = batch.terms + shard.terms_at;
    const std::uint64_t blocks = xxh3::chain_blocks(shard.length);
    const std::uint64_t key = xxh3::scramble_key(lane);
    std::uint64_t acc = xxh3::initial_lane(lane);
    std::uint64_t b = 0;
    // Software-pipelined: the next kChainAhead terms are loading while the
    // current ones go through the chain, so the chain waits on no load.
    std::uint64_t current[kChainAhead];
    if (blocks >= kChainAhead) {
#pragma unroll
      for (int k = 0; k < kChainAhead; ++k) current[k] = terms[k].v[lane];
      for (; b + 2 * kChainAhead <= blocks; b += kChainAhead) {
        std::uint64_t next[kChainAhead];
#pragma unroll
        for (int k = 0; k < kChainAhead; ++k) next[k] = terms[b + kChainAhead + k].v[lane];
#pragma unroll
        for (int k = 0; k < kChainAhead; ++k) acc = xxh3::chain_step_keyed(acc, current[k], key);
#pragma unroll
        for (int k = 0; k < kChainAhead; ++k) current[k] = next[k];
      }
#pragma unroll
      for (int k = 0; k < kChainAhead; ++k) acc = xxh3::chain_step_keyed(acc, current[k], key);
      b += kChainAhead;
    }
    for (; b < blocks; ++b) acc = xxh3::chain_step_keyed(acc, terms[b].v[lane], key);
    acc += terms[blocks].v[lane];
    Lanes all;
#pragma unroll
    for (int i = 0; i < kLanes; ++i) all.v[i] = __shfl_sync(group, acc, i, kLanes);
    if (lane != 0) return;
    h = xxh3::finish_long(all, shard.length);
  }
  std::uint8_t digest[16];
  xxh3::canonical(h, digest);
  bool same = shard.has_expected != 0;
  for (int i = 0; i < 16; ++i) {
    batch.digests[16 * s + i] = digest[i];
    same = same && digest[i] == shard.expected[i];
  }
  batch.verdicts[s] = same ? 1 : 0;
}

const char* launch_error() {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

}  // namespace

unsigned phase1_items_per_warp(std::uint64_t items) {
  const std::uint64_t per_warp = items / kWarpsToFill;
  if (per_warp < 1) return 1;
  return per_warp > kMaxItemsPerWarp ? kMaxItemsPerWarp : static_cast<unsigned>(per_warp);
}

const char* launch_shard_hash_phase1_with(const ShardHashBatch& batch, void* stream, unsigned items_per_warp) {
  if (batch.items == 0) return nullptr;
  if (items_per_warp == 0) items_per_warp = phase1_items_per_warp(batch.items);
  const std::uint64_t warps = (batch.items + items_per_warp - 1) / items_per_warp;
  const std::uint64_t warps_per_block = kPhase1Threads / kWarpThreads;
  const std::uint64_t blocks = (warps + warps_per_block - 1) / warps_per_block;
  if (blocks > 0x7FFFFFFFu) return "too many blocks in one batch";
  phase1_kernel<<<static_cast<unsigned>(blocks), kPhase1Threads, 0, static_cast<cudaStream_t>(stream)>>>(
      batch, items_per_warp);
  return launch_error();
}

const char* launch_shard_hash_phase1(const ShardHashBatch& batch, void* stream) {
  return launch_shard_hash_phase1_with(batch, stream, 0);
}

const char* launch_shard_hash_phase2(const ShardHashBatch& batch, void* stream) {
  if (batch.count == 0) return nullptr;
  const std::uint64_t threads = static_cast<std::uint64_t>(batch.count) * kLanes;
  const std::uint64_t blocks = (threads + kPhase2Threads - 1) / kPhase2Threads;
  phase2_kernel<<<static_cast<unsigned>(blocks), kPhase2Threads, 0, static_cast<cudaStream_t>(stream)>>>(batch);
  return launch_error();
}

const char* launch_shard_hash(const ShardHashBatch& batch, void* stream) {
  if (const char* e = launch_shard_hash_phase1(batch, stream)) return e;
  return launch_shard_hash_phase2(batch, stream);
}

}  // namespace tensorhub::cuda
