// Benchmark: manifest build over a generated image, against raw hashing speed.
//
// Measures, in one run and on the same warmed image:
//   1. raw single-core XXH3-128 over the whole image (one call per 16 MiB
//      shard, the same slicing the builder uses): the per-thread ceiling;
//   2. build_manifest with 1 thread, then with 2 threads (hashing, encoding,
//      BLAKE2b id and Ed25519 signature included).
// The goal (issue: foundation) is at least 80% of the raw rate per thread.
//
// Usage: bench_manifest_build [--size BYTES] [--shard-size BYTES] [--repeat N] [--json]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/byte_size.hpp"
#include "core/hash.hpp"
#include "core/parallel_for.hpp"
#include "core/random_fill.hpp"
#include "tensorhub/manifest.hpp"

using namespace tensorhub;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

template <typename F>
double best_of(int repeat, F&& f) {
  double best = 1e30;
  for (int i = 0; i < repeat; ++i) {
    const auto start = std::chrono::steady_clock::now();
    f();
    best = std::min(best, seconds_since(start));
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t size = 4ull << 30;
  std::uint64_t shard_size = kDefaultShardSize;
  int repeat = 3;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next_size = [&](std::uint64_t& out) {
      if (i + 1 >= argc) { std::fprintf(stderr, "%s needs a value\n", arg.c_str()); std::exit(2); }
      auto parsed = core::parse_byte_size(argv[++i]);
      if (!parsed) { std::fprintf(stderr, "%s: %s\n", arg.c_str(), parsed.status().message().c_str()); std::exit(2); }
      out = *parsed;
    };
    if (arg == "--size") next_size(size);
    else if (arg == "--shard-size") next_size(shard_size);
    else if (arg == "--repeat" && i + 1 < argc) repeat = std::max(1, std::atoi(argv[++i]));
    else if (arg == "--json") json = true;
    else { std::fprintf(stderr, "usage: %s [--size BYTES] [--shard-size BYTES] [--repeat N] [--json]\n", argv[0]); return 2; }
  }

  // Generate (and so touch and warm) the image in parallel.
  std::vector<std::byte> image(size);
  core::parallel_for((size + (64u << 20) - 1) / (64u << 20), 0, [&](std::size_t p) {
    const std::size_t begin = p * (64u << 20);
    core::fill_pseudo_random(std::span(image).subspan(begin, std::min<std::size_t>(64u << 20, size - begin)), 7, begin);
  });

  // 1. Raw XXH3-128, one core, same slicing as the builder.
  volatile std::uint8_t sink = 0;
  const double raw_s = best_of(repeat, [&] {
    for (std::uint64_t off = 0; off < size; off += shard_size) {
      sink = sink + core::xxh3_128(std::span(image).subspan(off, std::min(shard_size, size - off)))[0];
    }
  });

  // 2. build_manifest with 1 and 2 threads.
  std::array<std::uint8_t, 32> seed{};
  const Identity key = Identity::from_seed(seed);
  std::vector<TensorEntry> tensors;
  for (std::uint64_t off = 0, i = 0; off < size; off += 8ull << 20, ++i) {
    const std::uint64_t len = std::min<std::uint64_t>(8ull << 20, size - off);
    tensors.push_back(TensorEntry{"t" + std::to_string(i), DType::kU8, {len}, off, len});
  }
  auto build_with = [&](unsigned threads) {
    ManifestBuildOptions o;
    o.model = "bench";
    o.version = 1;
    o.shard_size = shard_size;
    o.threads = threads;
    return best_of(repeat, [&] {
      auto m = build_manifest(o, image, tensors, key);
      if (!m) { std::fprintf(stderr, "build failed: %s\n", m.status().to_string().c_str()); std::exit(1); }
    });
  };
  const double one_s = build_with(1);
  const double two_s = build_with(2);

  const double gb = static_cast<double>(size) / 1e9;
  const double raw = gb / raw_s, one = gb / one_s, two = gb / two_s;
  if (json) {
    std::printf("{\"image_bytes\": %llu, \"shard_size\": %llu, \"xxh3_variant\": \"%s\", \"raw_xxh3_gbps\": %.2f, "
                "\"build_1t_gbps\": %.2f, \"build_2t_gbps\": %.2f, \"per_thread_ratio_1t\": %.3f, "
                "\"per_thread_ratio_2t\": %.3f, \"cores\": %u}\n",
                static_cast<unsigned long long>(size), static_cast<unsigned long long>(shard_size),
                std::string(core::xxh3_implementation()).c_str(), raw, one, two, one / raw, two / 2 / raw,
                core::hardware_threads());
  } else {
    std::printf("manifest build over %s in %s shards (XXH3 %s, %u cores, best of %d)\n",
                core::format_byte_size(size).c_str(), core::format_byte_size(shard_size).c_str(),
                std::string(core::xxh3_implementation()).c_str(), core::hardware_threads(), repeat);
    std::printf("  raw XXH3-128, 1 core   %6.2f GB/s\n", raw);
    std::printf("  build, 1 thread        %6.2f GB/s  (%.0f%% of raw per thread)\n", one, 100 * one / raw);
    std::printf("  build, 2 threads       %6.2f GB/s  (%.0f%% of raw per thread)\n", two, 100 * two / 2 / raw);
  }
  return 0;
}
