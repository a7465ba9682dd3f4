// Benchmark: what verifying a selection at a finer grain than a shard
// costs (issue 48's hash layout). Hashes one warmed image with XXH3-128 in
// leaves of each size, one core, and, for a Merkle tree per shard, hashes
// the leaf digests pairwise up to the shard's root. Reports per leaf size:
// the leaf-hash rate against whole-shard hashing, the tree's share, and
// the bytes of hashes a 1 TB version would carry (a hash per leaf, in the
// manifest) against a proof per leaf range (a root per shard in the
// manifest, log2(shard / leaf) sibling hashes sent with a range).
//
// Usage: bench_leaf_hashes [--size BYTES] [--shard-size BYTES] [--repeat N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_arguments.hpp"
#include "core/hash.hpp"
#include "core/parallel_for.hpp"
#include "core/random_fill.hpp"

using namespace tensorhub;

namespace {

double seconds_of(const auto& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The root of the digests `level`, hashed pairwise (an odd one is carried up).
core::Xxh3Digest merkle_root(std::vector<core::Xxh3Digest> level) {
  while (level.size() > 1) {
    std::vector<core::Xxh3Digest> up;
    up.reserve((level.size() + 1) / 2);
    for (std::size_t i = 0; i + 1 < level.size(); i += 2) {
      std::array<std::uint8_t, 32> pair;
      std::memcpy(pair.data(), level[i].data(), 16);
      std::memcpy(pair.data() + 16, level[i + 1].data(), 16);
      up.push_back(core::xxh3_128(std::as_bytes(std::span(pair))));
    }
    if (level.size() % 2 == 1) up.push_back(level.back());
    level = std::move(up);
  }
  return level.front();
}

std::string size_name(std::uint64_t bytes) {
  if (bytes >= (1u << 20)) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes >> 10) + " KiB";
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t size = 1ull << 30;
  std::uint64_t shard_size = 16ull << 20;
  int repeat = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--size") size = bench::size_argument(i, argc, argv);
    else if (arg == "--shard-size") shard_size = bench::size_argument(i, argc, argv);
    else if (arg == "--repeat" && i + 1 < argc) repeat = std::max(1, std::atoi(argv[++i]));
    else { std::fprintf(stderr, "usage: %s [--size BYTES] [--shard-size BYTES] [--repeat N]\n", argv[0]); return 2; }
  }
  if (size == 0 || shard_size == 0 || size % shard_size != 0) {
    std::fprintf(stderr, "--size must be a positive multiple of --shard-size\n");
    return 2;
  }
  std::vector<std::byte> image(size);
  core::parallel_for((size + (64u << 20) - 1) / (64u << 20), 0, [&](std::size_t p) {
    const std::size_t begin = p * (64u << 20);
    core::fill_pseudo_random(std::span(image).subspan(begin, std::min<std::size_t>(64u << 20, size - begin)), 7, begin);
  });

  volatile std::uint8_t sink = 0;
  const double gb = static_cast<double>(size) / 1e9;
  // Whole shards: today's layout, the reference.
  double whole_s = 1e30;
  for (int r = 0; r < repeat; ++r) {
    whole_s = std::min(whole_s, seconds_of([&] {
      for (std::uint64_t off = 0; off < size; off += shard_size) sink = sink + core::xxh3_128(std::span(image).subspan(off, shard_size))[0];
    }));
  }
  std::printf("xxh3-128 (%s), %s image, %s shards, one core, best of %d\n",
              std::string(core::xxh3_implementation()).c_str(), size_name(size).c_str(), size_name(shard_size).c_str(),
              repeat);
  std::printf("whole shards: %.1f GB/s\n", gb / whole_s);
  std::printf("%-8s %10s %8s %10s %14s %14s\n", "leaf", "leaves GB/s", "x whole", "tree share", "hashes/TB", "proof/leaf");
  for (std::uint64_t leaf : {1ull << 10, 2ull << 10, 4ull << 10, 16ull << 10, 64ull << 10, 256ull << 10, 1ull << 20}) {
    if (leaf > shard_size) continue;
    const std::uint64_t per_shard = shard_size / leaf;
    std::vector<core::Xxh3Digest> digests(per_shard);
    double leaves_s = 1e30, tree_s = 1e30;
    for (int r = 0; r < repeat; ++r) {
      double leaves = 0, tree = 0;
      for (std::uint64_t off = 0; off < size; off += shard_size) {
        leaves += seconds_of([&] {
          for (std::uint64_t i = 0; i < per_shard; ++i) digests[i] = core::xxh3_128(std::span(image).subspan(off + i * leaf, leaf));
        });
        tree += seconds_of([&] { sink = sink + merkle_root(digests)[0]; });
      }
      leaves_s = std::min(leaves_s, leaves);
      tree_s = std::min(tree_s, tree);
    }
    const double hashes_per_tb = 1e12 / static_cast<double>(leaf) * 16;
    std::uint64_t depth = 0;
    for (std::uint64_t n = per_shard; n > 1; n = (n + 1) / 2) ++depth;
    std::printf("%-8s %10.1f %8.2f %9.1f%% %11.2f GB %11llu B\n", size_name(leaf).c_str(), gb / leaves_s,
                whole_s / leaves_s, 100.0 * tree_s / (leaves_s + tree_s), hashes_per_tb / 1e9,
                static_cast<unsigned long long>(depth * 16));
  }
  return sink == 255 && false;
}
