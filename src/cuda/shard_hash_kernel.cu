#include "cuda/shard_hash_kernel.hpp"

#include <cuda_runtime_api.h>

namespace tensorhub::cuda {
namespace {

using xxh3::kBlockBytes;
using xxh3::kLanes;
using xxh3::kWarpThreads;
using xxh3::Lanes;

constexpr int kPhase1Threads = 256;  // 8 warps, each on its own block
constexpr int kPhase2Threads = 128;  // 16 shards of 8 lanes
constexpr int kChainUnroll = 8;      // terms loaded ahead of the dependent chain

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

// One warp per item: a full block's terms, summed over the warp with
// shuffles; or (lane 0 alone) the shard's tail terms.
__global__ void phase1_kernel(ShardHashBatch batch) {
  const std::uint64_t item = (static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarpThreads;
  const int t = static_cast<int>(threadIdx.x % kWarpThreads);
  if (item >= batch.items) return;  // whole warps leave together
  const std::size_t s = shard_of_item(batch.item_start, batch.count, item);
  const DeviceShard& shard = batch.shards[s];
  const xxh3::PiecesLoader in{batch.pieces + shard.first_piece, static_cast<int>(shard.piece_count)};
  const std::uint64_t block = item - batch.item_start[s];
  Lanes* out = batch.terms + shard.terms_at + block;
  if (block == xxh3::chain_blocks(shard.length)) {
    if (t == 0) *out = xxh3::tail_terms(in, shard.length);
    return;
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
#pragma unroll
    for (int j = 0; j < xxh3::kWordsPerThread; ++j) {
      const int w = xxh3::thread_word(t, j);
      xxh3::add_word_terms(words[w], xxh3::secret64(xxh3::word_secret_offset(w)), product, data);
    }
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
    std::uint64_t acc = xxh3::initial_lane(lane);
    std::uint64_t b = 0;
    for (; b + kChainUnroll <= blocks; b += kChainUnroll) {
      std::uint64_t ahead[kChainUnroll];
#pragma unroll
      for (int k = 0; k < kChainUnroll; ++k) ahead[k] = terms[b + k].v[lane];
#pragma unroll
      for (int k = 0; k < kChainUnroll; ++k) acc = xxh3::chain_step(acc, ahead[k], lane);
    }
    for (; b < blocks; ++b) acc = xxh3::chain_step(acc, terms[b].v[lane], lane);
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

const char* launch_shard_hash_phase1(const ShardHashBatch& batch, void* stream) {
  if (batch.items == 0) return nullptr;
  const std::uint64_t warps_per_block = kPhase1Threads / kWarpThreads;
  const std::uint64_t blocks = (batch.items + warps_per_block - 1) / warps_per_block;
  if (blocks > 0x7FFFFFFFu) return "too many blocks in one batch";
  phase1_kernel<<<static_cast<unsigned>(blocks), kPhase1Threads, 0, static_cast<cudaStream_t>(stream)>>>(batch);
  return launch_error();
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
