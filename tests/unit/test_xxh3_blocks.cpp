// The GPU's XXH3-128 steps (src/cuda/xxh3_blocks.hpp), run on the CPU and
// compared with libxxhash: the kernels call this same code on the device.
#include <doctest/doctest.h>
#include <xxhash.h>  // the shared libxxhash: an independent oracle

#include <cstring>
#include <random>
#include <vector>

#include "core/random_fill.hpp"
#include "cuda/shard_hash_kernel.hpp"
#include "cuda/xxh3_blocks.hpp"
#include "tensorhub/ids.hpp"

using namespace tensorhub;
namespace x = tensorhub::cuda::xxh3;

namespace {

std::string hex_of(const x::Hash128& h) {
  std::uint8_t out[16];
  x::canonical(h, out);
  return to_hex(std::span<const std::uint8_t>(out, 16));
}

std::string oracle_hex(const std::uint8_t* data, std::size_t size) {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits(data, size));
  return to_hex(std::span<const std::uint8_t>(c.digest, 16));
}

std::vector<std::uint8_t> random_bytes(std::size_t n, std::uint64_t seed) {
  std::vector<std::uint8_t> out(n);
  core::fill_pseudo_random(std::as_writable_bytes(std::span(out)), seed);
  return out;
}

}  // namespace

TEST_CASE("gpu xxh3: bit-exact with libxxhash for every length to 2,200 bytes and every alignment") {
  // Covers each short branch (0, 1-3, 4-8, 9-16, 17-128, 129-240), the first
  // long inputs, and the block edges at 1,024 and 2,048 where the chain grows.
  const auto data = random_bytes(2200 + 8, 11);
  for (std::size_t n = 0; n <= 2200; ++n) {
    for (std::size_t align : {0u, 1u, 3u, 7u}) {
      const std::uint8_t* p = data.data() + align;
      const std::string ours = hex_of(x::hash(x::ContiguousLoader{p}, n));
      if (ours != oracle_hex(p, n)) FAIL_CHECK("differs at length " << n << " alignment " << align);
    }
  }
}

TEST_CASE("gpu xxh3: bit-exact on long inputs of the sizes shards have") {
  const auto data = random_bytes((4u << 20) + 64, 12);
  for (std::size_t n : {241u, 1024u, 1025u, 4096u, 65536u, 1000003u, (1u << 20), (4u << 20) - 5, (4u << 20)}) {
    for (std::size_t align : {0u, 5u}) {
      const std::uint8_t* p = data.data() + align;
      CHECK_MESSAGE(hex_of(x::hash(x::ContiguousLoader{p}, n)) == oracle_hex(p, n), "length " << n << " align " << align);
    }
  }
}

TEST_CASE("gpu xxh3: an input cut into pieces anywhere hashes as its concatenation") {
  std::mt19937_64 rng(13);
  for (int round = 0; round < 60; ++round) {
    const std::size_t n = round < 20 ? rng() % 300 : 241 + rng() % 9000;
    const auto data = random_bytes(n, 100 + round);
    // Cut points at random, many of them inside words and stripes; some
    // pieces a single byte long.
    std::vector<x::Piece> pieces;
    std::size_t at = 0;
    while (at < n) {
      const std::size_t take = std::min<std::size_t>(n - at, 1 + rng() % (round % 3 == 0 ? 3 : 700));
      pieces.push_back(x::Piece{data.data() + at, take});
      at += take;
    }
    const x::PiecesLoader loader{pieces.data(), static_cast<int>(pieces.size())};
    const std::string expected = oracle_hex(data.data(), n);
    if (hex_of(x::hash(loader, n)) != expected) FAIL_CHECK("differs at length " << n << " in " << pieces.size() << " pieces");
  }
}

TEST_CASE("gpu xxh3: a warp's split of a block adds up to the block's stripes") {
  // The kernel's thread-to-word mapping (thread_block_terms) against the
  // specification's order, stripe by stripe, for several blocks.
  const auto data = random_bytes(8 * x::kBlockBytes, 14);
  const x::ContiguousLoader in{data.data()};
  for (std::uint64_t b = 0; b < 8; ++b) {
    x::Lanes by_stripe{};
    for (std::uint64_t s = 0; s < x::kStripesPerBlock; ++s)
      x::add_stripe_terms(in, b * x::kBlockBytes + s * x::kStripeBytes, static_cast<int>(8 * s), by_stripe);
    const x::Lanes by_warp = x::block_terms(in, b * x::kBlockBytes);
    for (int i = 0; i < x::kLanes; ++i) CHECK(by_warp.v[i] == by_stripe.v[i]);
  }
}

TEST_CASE("gpu xxh3: one changed byte anywhere in a long input changes the digest") {
  auto data = random_bytes(5000, 15);
  const std::string before = hex_of(x::hash(x::ContiguousLoader{data.data()}, data.size()));
  for (std::size_t at : {0u, 63u, 1023u, 1024u, 4000u, 4935u, 4999u}) {
    data[at] ^= 0x01;
    CHECK(hex_of(x::hash(x::ContiguousLoader{data.data()}, data.size())) != before);
    CHECK(hex_of(x::hash(x::ContiguousLoader{data.data()}, data.size())) == oracle_hex(data.data(), data.size()));
    data[at] ^= 0x01;
  }
}

TEST_CASE("gpu xxh3: the work plan gives each long shard a slot per full block and one for its tail") {
  std::vector<cuda::DeviceShard> shards(5);
  const std::uint64_t lengths[] = {240, 241, 1024, 1025, 16u << 20};
  for (int i = 0; i < 5; ++i) shards[i].length = lengths[i];
  std::vector<std::uint64_t> item_start(6);
  const std::uint64_t slots = cuda::shard_hash_plan(shards.data(), shards.size(), item_start.data());
  // 240: short, none; 241 and 1024: the tail only; 1025: one block + tail;
  // 16 MiB: 16,383 blocks + tail.
  CHECK(item_start == std::vector<std::uint64_t>{0, 0, 1, 2, 4, 4 + 16384});
  CHECK(slots == 4 + 16384);
  CHECK(shards[0].terms_at == 0);
  CHECK(shards[3].terms_at == 2);
  CHECK(shards[4].terms_at == 4);
}
