// XXH3-128 (libxxhash's XXH3_128bits: no seed, the default secret) cut into
// the steps that a GPU runs in parallel. The manifest's shard digests are
// exactly these values, so a shard that lands in GPU memory is verified
// there and the CPU never reads its bytes.
//
// Why the long-input hash is parallel: over 240 bytes XXH3 keeps 8 lanes of
// 64 bits. Each 64-byte stripe only *adds* terms that depend on the stripe
// and the secret, never on the lanes, and every 16 stripes (one 1 KiB block)
// each lane is scrambled on its own. So with D_b the sum of block b's terms,
//   lanes_{b+1} = scramble(lanes_b + D_b)   (lane by lane),
// every D_b is computed independently (phase 1, bandwidth-bound), and only
// the scramble chain is sequential (phase 2: one short step per KiB and lane,
// and the 8 lanes are independent until the final merge).
//
// Every function here is __host__ __device__: the CUDA kernels
// (shard_hash_kernel.cu) call them on the device, and the unit tests call the
// same code on the CPU and compare it with libxxhash at every commit. The
// bytes are read through a Loader: a type with
//   uint8_t  byte(uint64_t offset)   // the input's byte at `offset`
//   uint64_t le64(uint64_t offset)   // its 8 bytes at `offset`, little-endian
// so that one input may lie in several pieces (the regions of an image).
#pragma once

#include <stddef.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define TENSORHUB_HOST_DEVICE __host__ __device__
#else
#define TENSORHUB_HOST_DEVICE
#endif

namespace tensorhub::cuda::xxh3 {

inline constexpr uint64_t kPrime32_1 = 0x9E3779B1ULL;
inline constexpr uint64_t kPrime32_2 = 0x85EBCA77ULL;
inline constexpr uint64_t kPrime32_3 = 0xC2B2AE3DULL;
inline constexpr uint64_t kPrime64_1 = 0x9E3779B185EBCA87ULL;
inline constexpr uint64_t kPrime64_2 = 0xC2B2AE3D27D4EB4FULL;
inline constexpr uint64_t kPrime64_3 = 0x165667B19E3779F9ULL;
inline constexpr uint64_t kPrime64_4 = 0x85EBCA77C2B2AE63ULL;
inline constexpr uint64_t kPrime64_5 = 0x27D4EB2F165667C5ULL;

inline constexpr int kLanes = 8;
inline constexpr uint64_t kStripeBytes = 64;
inline constexpr uint64_t kStripesPerBlock = 16;  // (secret size - 64) / 8
inline constexpr uint64_t kBlockBytes = kStripeBytes * kStripesPerBlock;
inline constexpr uint64_t kMidsizeMax = 240;  // longer inputs take the block path
inline constexpr int kSecretBytes = 192;

// XXH3's default secret (the specification's kSecret).
#define TENSORHUB_XXH3_SECRET                                                                                       \
  0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c, 0xde, 0xd4, 0x6d,  \
      0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f, 0xcb, 0x79, 0xe6, 0x4e, 0xcc,   \
      0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21, 0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24,   \
      0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c, 0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88,   \
      0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3, 0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef,   \
      0x46, 0xa9, 0xde, 0xac, 0xd8, 0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7,   \
      0x0b, 0x4f, 0x1d, 0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73,   \
      0x64, 0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb, 0x17,   \
      0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e, 0x2b, 0x16, 0xbe,   \
      0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce, 0x45, 0xcb, 0x3a, 0x8f, 0x95,   \
      0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e

inline constexpr uint8_t kSecret[kSecretBytes] = {TENSORHUB_XXH3_SECRET};
#if defined(__CUDACC__)
static __constant__ uint8_t kDeviceSecret[kSecretBytes] = {TENSORHUB_XXH3_SECRET};
#endif

// Secret offsets of the long path.
inline constexpr int kScrambleSecret = kSecretBytes - 64;       // the scramble's keys
inline constexpr int kLastStripeSecret = kSecretBytes - 64 - 7;  // the input's last stripe
inline constexpr int kMergeLowSecret = 11;
inline constexpr int kMergeHighSecret = kSecretBytes - 64 - 11;

TENSORHUB_HOST_DEVICE inline uint8_t secret_byte(int offset) {
#if defined(__CUDA_ARCH__)
  return kDeviceSecret[offset];
#else
  return kSecret[offset];
#endif
}
TENSORHUB_HOST_DEVICE inline uint64_t secret64(int offset) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | secret_byte(offset + i);
  return v;
}
TENSORHUB_HOST_DEVICE inline uint32_t secret32(int offset) { return static_cast<uint32_t>(secret64(offset)); }

struct Hash128 {
  uint64_t low = 0;
  uint64_t high = 0;
};

// The 8 lanes of the long path, or one block's terms to add to them.
struct Lanes {
  uint64_t v[kLanes];
};

TENSORHUB_HOST_DEVICE inline Hash128 multiply_64_to_128(uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH__)
  return Hash128{a * b, __umul64hi(a, b)};
#else
  const unsigned __int128 p = static_cast<unsigned __int128>(a) * b;
  return Hash128{static_cast<uint64_t>(p), static_cast<uint64_t>(p >> 64)};
#endif
}
TENSORHUB_HOST_DEVICE inline uint64_t multiply_fold_64(uint64_t a, uint64_t b) {
  const Hash128 p = multiply_64_to_128(a, b);
  return p.low ^ p.high;
}
TENSORHUB_HOST_DEVICE inline uint64_t xorshift(uint64_t v, int shift) { return v ^ (v >> shift); }
TENSORHUB_HOST_DEVICE inline uint64_t rotl64(uint64_t v, int r) { return (v << r) | (v >> (64 - r)); }
TENSORHUB_HOST_DEVICE inline uint32_t rotl32(uint32_t v, int r) { return (v << r) | (v >> (32 - r)); }
TENSORHUB_HOST_DEVICE inline uint32_t swap32(uint32_t v) {
  return ((v << 24) & 0xff000000U) | ((v << 8) & 0x00ff0000U) | ((v >> 8) & 0x0000ff00U) | ((v >> 24) & 0x000000ffU);
}
TENSORHUB_HOST_DEVICE inline uint64_t swap64(uint64_t v) {
  return (static_cast<uint64_t>(swap32(static_cast<uint32_t>(v))) << 32) | swap32(static_cast<uint32_t>(v >> 32));
}
TENSORHUB_HOST_DEVICE inline uint64_t avalanche(uint64_t h) {
  h = xorshift(h, 37);
  h *= 0x165667919E3779F9ULL;
  return xorshift(h, 32);
}
TENSORHUB_HOST_DEVICE inline uint64_t avalanche_xxh64(uint64_t h) {
  h ^= h >> 33;
  h *= kPrime64_2;
  h ^= h >> 29;
  h *= kPrime64_3;
  h ^= h >> 32;
  return h;
}

// ---- Phase 1: the terms of stripes ----------------------------------------

// Adds the terms of input word `data` at lane i, keyed by secret word `key`:
// `product` collects lane i's term, `data_sum` lane (i ^ 1)'s.
TENSORHUB_HOST_DEVICE inline void add_word_terms(uint64_t data, uint64_t key, uint64_t& product, uint64_t& data_sum) {
  const uint64_t k = data ^ key;
  product += static_cast<uint64_t>(static_cast<uint32_t>(k)) * static_cast<uint32_t>(k >> 32);
  data_sum += data;
}

// Adds to `terms` the terms of the stripe at input offset `at`, keyed by the
// secret from byte `secret_offset` on.
template <typename Loader>
TENSORHUB_HOST_DEVICE inline void add_stripe_terms(const Loader& in, uint64_t at, int secret_offset, Lanes& terms) {
  for (int i = 0; i < kLanes; ++i) {
    uint64_t product = 0;
    uint64_t data = 0;
    add_word_terms(in.le64(at + 8 * i), secret64(secret_offset + 8 * i), product, data);
    terms.v[i] += product;
    terms.v[i ^ 1] += data;
  }
}

// The split of one 1 KiB block over the 32 threads of a warp: thread t reads
// words t, t + 32, t + 64 and t + 96 of the block (each load of the warp is
// 256 contiguous bytes), all of lane t % 8. Word w is lane w % 8 of stripe
// w / 8, keyed by secret word (w / 8) + (w % 8).
inline constexpr int kWarpThreads = 32;
inline constexpr int kWordsPerThread = static_cast<int>(kBlockBytes / 8) / kWarpThreads;

TENSORHUB_HOST_DEVICE inline int thread_word(int thread, int j) { return thread + kWarpThreads * j; }
TENSORHUB_HOST_DEVICE inline int word_secret_offset(int word) { return 8 * (word / kLanes + word % kLanes); }

// What thread `thread` of a warp contributes for the block at `block_at`:
// `product` for lane thread % 8 and `data_sum` for lane (thread % 8) ^ 1.
template <typename Loader>
TENSORHUB_HOST_DEVICE inline void thread_block_terms(const Loader& in, uint64_t block_at, int thread, uint64_t& product,
                                                     uint64_t& data_sum) {
  for (int j = 0; j < kWordsPerThread; ++j) {
    const int w = thread_word(thread, j);
    add_word_terms(in.le64(block_at + 8 * static_cast<uint64_t>(w)), secret64(word_secret_offset(w)), product,
                   data_sum);
  }
}

// D_b of the full block at `block_at`, summed the way a warp sums it (the
// kernel reduces the same per-thread values with shuffles; addition mod 2^64
// makes the order irrelevant, which this function lets the tests confirm).
template <typename Loader>
TENSORHUB_HOST_DEVICE inline Lanes block_terms(const Loader& in, uint64_t block_at) {
  Lanes terms{};
  for (int t = 0; t < kWarpThreads; ++t) {
    uint64_t product = 0;
    uint64_t data = 0;
    thread_block_terms(in, block_at, t, product, data);
    terms.v[t % kLanes] += product;
    terms.v[(t % kLanes) ^ 1] += data;
  }
  return terms;
}

// The number of full blocks that the scramble chain takes for an input of
// `length` bytes: the block holding the last byte is always the tail's.
// REQUIRES: length > kMidsizeMax.
TENSORHUB_HOST_DEVICE inline uint64_t chain_blocks(uint64_t length) { return (length - 1) / kBlockBytes; }

// The terms added after the chain: the stripes of the last, partial block
// and the input's last 64 bytes (which may overlap them).
// REQUIRES: length > kMidsizeMax.
template <typename Loader>
TENSORHUB_HOST_DEVICE inline Lanes tail_terms(const Loader& in, uint64_t length) {
  Lanes terms{};
  const uint64_t at = chain_blocks(length) * kBlockBytes;
  const uint64_t stripes = (length - 1 - at) / kStripeBytes;
  for (uint64_t s = 0; s < stripes; ++s) add_stripe_terms(in, at + s * kStripeBytes, static_cast<int>(8 * s), terms);
  add_stripe_terms(in, length - kStripeBytes, kLastStripeSecret, terms);
  return terms;
}

// ---- Phase 2: the scramble chain and the merge ------------------------------

TENSORHUB_HOST_DEVICE inline uint64_t initial_lane(int lane) {
  switch (lane) {
    case 0: return kPrime32_3;
    case 1: return kPrime64_1;
    case 2: return kPrime64_2;
    case 3: return kPrime64_3;
    case 4: return kPrime64_4;
    case 5: return kPrime32_2;
    case 6: return kPrime64_5;
    default: return kPrime32_1;
  }
}

// The secret word that lane `lane`'s scramble mixes in.
TENSORHUB_HOST_DEVICE inline uint64_t scramble_key(int lane) { return secret64(kScrambleSecret + 8 * lane); }

// One step of a lane's chain, given the lane's scramble_key(): add a full
// block's term, then scramble.
TENSORHUB_HOST_DEVICE inline uint64_t chain_step_keyed(uint64_t lane_value, uint64_t term, uint64_t key) {
  uint64_t v = lane_value + term;
  v = xorshift(v, 47);
  v ^= key;
  return v * kPrime32_1;
}
TENSORHUB_HOST_DEVICE inline uint64_t chain_step(uint64_t lane_value, uint64_t term, int lane) {
  return chain_step_keyed(lane_value, term, scramble_key(lane));
}

TENSORHUB_HOST_DEVICE inline uint64_t merge_lanes(const Lanes& lanes, int secret_offset, uint64_t start) {
  uint64_t r = start;
  for (int i = 0; i < 4; ++i) {
    r += multiply_fold_64(lanes.v[2 * i] ^ secret64(secret_offset + 16 * i),
                          lanes.v[2 * i + 1] ^ secret64(secret_offset + 16 * i + 8));
  }
  return avalanche(r);
}

// The digest from the lanes after the chain and the tail's terms.
TENSORHUB_HOST_DEVICE inline Hash128 finish_long(const Lanes& lanes, uint64_t length) {
  return Hash128{merge_lanes(lanes, kMergeLowSecret, length * kPrime64_1),
                 merge_lanes(lanes, kMergeHighSecret, ~(length * kPrime64_2))};
}

// ---- Inputs of at most 240 bytes (one thread) -------------------------------

template <typename Loader>
TENSORHUB_HOST_DEVICE inline uint64_t le32(const Loader& in, uint64_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | in.byte(at + i);
  return v;
}

template <typename Loader>
TENSORHUB_HOST_DEVICE inline uint64_t mix16(const Loader& in, uint64_t at, int secret_offset) {
  return multiply_fold_64(in.le64(at) ^ secret64(secret_offset), in.le64(at + 8) ^ secret64(secret_offset + 8));
}

template <typename Loader>
TENSORHUB_HOST_DEVICE inline void mix32(Hash128& acc, const Loader& in, uint64_t at1, uint64_t at2, int secret_offset) {
  acc.low += mix16(in, at1, secret_offset);
  acc.low ^= in.le64(at2) + in.le64(at2 + 8);
  acc.high += mix16(in, at2, secret_offset + 16);
  acc.high ^= in.le64(at1) + in.le64(at1 + 8);
}

TENSORHUB_HOST_DEVICE inline Hash128 finish_mid(const Hash128& acc, uint64_t length) {
  Hash128 h;
  h.low = avalanche(acc.low + acc.high);
  h.high = 0 - avalanche(acc.low * kPrime64_1 + acc.high * kPrime64_4 + length * kPrime64_2);
  return h;
}

template <typename Loader>
TENSORHUB_HOST_DEVICE inline Hash128 hash_short(const Loader& in, uint64_t length) {
  if (length == 0) {
    return Hash128{avalanche_xxh64(secret64(64) ^ secret64(72)), avalanche_xxh64(secret64(80) ^ secret64(88))};
  }
  if (length <= 3) {
    const uint32_t c1 = in.byte(0);
    const uint32_t c2 = in.byte(length >> 1);
    const uint32_t c3 = in.byte(length - 1);
    const uint32_t low = (c1 << 16) | (c2 << 24) | c3 | (static_cast<uint32_t>(length) << 8);
    const uint32_t high = rotl32(swap32(low), 13);
    return Hash128{avalanche_xxh64(low ^ static_cast<uint64_t>(secret32(0) ^ secret32(4))),
                   avalanche_xxh64(high ^ static_cast<uint64_t>(secret32(8) ^ secret32(12)))};
  }
  if (length <= 8) {
    const uint64_t input = le32(in, 0) + (le32(in, length - 4) << 32);
    const uint64_t keyed = input ^ (secret64(16) ^ secret64(24));
    Hash128 m = multiply_64_to_128(keyed, kPrime64_1 + (length << 2));
    m.high += m.low << 1;
    m.low ^= m.high >> 3;
    m.low = xorshift(m.low, 35);
    m.low *= 0x9FB21C651E98DF25ULL;
    m.low = xorshift(m.low, 28);
    m.high = avalanche(m.high);
    return m;
  }
  if (length <= 16) {
    const uint64_t flip_low = secret64(32) ^ secret64(40);
    const uint64_t flip_high = secret64(48) ^ secret64(56);
    const uint64_t input_low = in.le64(0);
    uint64_t input_high = in.le64(length - 8);
    Hash128 m = multiply_64_to_128(input_low ^ input_high ^ flip_low, kPrime64_1);
    m.low += (length - 1) << 54;
    input_high ^= flip_high;
    m.high += input_high + (input_high & 0xFFFFFFFFULL) * (kPrime32_2 - 1);
    m.low ^= swap64(m.high);
    Hash128 h = multiply_64_to_128(m.low, kPrime64_2);
    h.high += m.high * kPrime64_2;
    return Hash128{avalanche(h.low), avalanche(h.high)};
  }
  Hash128 acc{length * kPrime64_1, 0};
  if (length <= 128) {
    if (length > 32) {
      if (length > 64) {
        if (length > 96) mix32(acc, in, 48, length - 64, 96);
        mix32(acc, in, 32, length - 48, 64);
      }
      mix32(acc, in, 16, length - 32, 32);
    }
    mix32(acc, in, 0, length - 16, 0);
    return finish_mid(acc, length);
  }
  const uint64_t rounds = length / 32;
  for (uint64_t i = 0; i < 4; ++i) mix32(acc, in, 32 * i, 32 * i + 16, static_cast<int>(32 * i));
  acc.low = avalanche(acc.low);
  acc.high = avalanche(acc.high);
  for (uint64_t i = 4; i < rounds; ++i) mix32(acc, in, 32 * i, 32 * i + 16, static_cast<int>(3 + 32 * (i - 4)));
  mix32(acc, in, length - 16, length - 32, 136 - 17 - 16);
  return finish_mid(acc, length);
}

// ---- The whole hash, sequentially (the tests' and the host's reference) ----

template <typename Loader>
TENSORHUB_HOST_DEVICE inline Hash128 hash(const Loader& in, uint64_t length) {
  if (length <= kMidsizeMax) return hash_short(in, length);
  Lanes lanes;
  for (int i = 0; i < kLanes; ++i) lanes.v[i] = initial_lane(i);
  const uint64_t blocks = chain_blocks(length);
  for (uint64_t b = 0; b < blocks; ++b) {
    const Lanes terms = block_terms(in, b * kBlockBytes);
    for (int i = 0; i < kLanes; ++i) lanes.v[i] = chain_step(lanes.v[i], terms.v[i], i);
  }
  const Lanes tail = tail_terms(in, length);
  for (int i = 0; i < kLanes; ++i) lanes.v[i] += tail.v[i];
  return finish_long(lanes, length);
}

// The canonical (big-endian) 16-byte form that manifests store.
TENSORHUB_HOST_DEVICE inline void canonical(const Hash128& h, uint8_t out[16]) {
  for (int i = 0; i < 8; ++i) {
    out[i] = static_cast<uint8_t>(h.high >> (56 - 8 * i));
    out[8 + i] = static_cast<uint8_t>(h.low >> (56 - 8 * i));
  }
}

// A Loader over one contiguous buffer, any alignment.
struct ContiguousLoader {
  const uint8_t* data;
  TENSORHUB_HOST_DEVICE uint8_t byte(uint64_t at) const { return data[at]; }
  TENSORHUB_HOST_DEVICE uint64_t le64(uint64_t at) const {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | data[at + i];
    return v;
  }
};

// One piece of an input laid out in several (a tensor of an image).
struct Piece {
  const uint8_t* data;
  uint64_t length;
};

// A Loader over `count` pieces laid end to end. A word that straddles two
// pieces is read byte by byte; the others in one read of 8 bytes.
// REQUIRES: no piece is empty; reads stay inside the pieces' total length.
struct PiecesLoader {
  const Piece* pieces;
  int count;

  // The piece holding byte `at`, and `at` made relative to it.
  TENSORHUB_HOST_DEVICE int locate(uint64_t& at) const {
    int p = 0;
    while (p + 1 < count && at >= pieces[p].length) at -= pieces[p++].length;
    return p;
  }
  TENSORHUB_HOST_DEVICE uint8_t byte(uint64_t at) const {
    const int p = locate(at);
    return pieces[p].data[at];
  }
  TENSORHUB_HOST_DEVICE uint64_t le64(uint64_t at) const {
    uint64_t within = at;
    const int p = locate(within);
    if (within + 8 <= pieces[p].length) return ContiguousLoader{pieces[p].data}.le64(within);
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | byte(at + static_cast<uint64_t>(i));
    return v;
  }
};

}  // namespace tensorhub::cuda::xxh3
