// The checks that need a GPU, in one program that prints one JSON object:
//   probe      the device, driver and the GPUDirect attributes
//   hash       the XXH3-128 kernels bit-exact against libxxhash (CPU) over
//              lengths 0 .. 256 MiB, unaligned starts, shards in pieces,
//              and verdicts for right and wrong expected digests
//   hash_speed one shard's latency (16/64/256 MiB), the aggregate over many
//              16 MiB shards, each phase alone, and a device-to-device copy
//              as the memory roofline, all in this run
//   staging    the staging ring's host-to-device rate against plain pinned
//              cudaMemcpy in this run, with slots prefilled and with a
//              producer thread copying into them, and the landed bytes
//              checked by the kernel; its device-to-host rate (fills, as
//              serving without a mirror does) against plain pinned
//              cudaMemcpy, and the filled bytes compared
//   sharing    a 256 MiB range at an odd offset exported by CUDA IPC,
//              opened by a second process of this program, verified there
//              by the kernel and copied; a dma-buf exported for 64 MiB
// Built on a development machine (the kernels by nvcc, this file by the
// host compiler) with the CUDA runtime and libstdc++ linked statically (tests/gpu/run says how), so a GPU machine
// without our Debian libraries runs it. Exit status 0 when every
// correctness check passed.
#include <cuda_runtime_api.h>

#define XXH_INLINE_ALL
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cuda/cuda_sharing.hpp"
#include "cuda/device_api.hpp"
#include "cuda/rdma_registration.hpp"
#include "cuda/shard_hash_kernel.hpp"
#include "cuda/staging_ring.hpp"

using namespace tensorhub;
using namespace tensorhub::cuda;

namespace {

#define CHECK_CUDA(call)                                                                      \
  do {                                                                                        \
    const cudaError_t e_ = (call);                                                            \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(2);                                                                           \
    }                                                                                         \
  } while (0)

template <typename T>
void device_alloc(T** out, std::size_t bytes) {
  void* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, bytes));
  *out = static_cast<T*>(p);
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out + "\"";
}

void fill(std::vector<std::uint8_t>& out, std::uint64_t seed) {
  std::uint64_t x = seed;
  for (std::size_t i = 0; i + 8 <= out.size(); i += 8) {
    x += 0x9E3779B97F4A7C15ULL;
    std::uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    std::memcpy(out.data() + i, &z, 8);
  }
}

void oracle(const std::uint8_t* data, std::size_t n, std::uint8_t out[16]) {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits(data, n));
  std::memcpy(out, c.digest, 16);
}

// A batch of shards on the device, with its tables and scratch.
struct Batch {
  std::vector<xxh3::Piece> pieces;
  std::vector<DeviceShard> shards;
  std::vector<std::uint64_t> item_start;
  xxh3::Piece* d_pieces = nullptr;
  DeviceShard* d_shards = nullptr;
  std::uint64_t* d_items = nullptr;
  xxh3::Lanes* d_terms = nullptr;
  std::uint8_t* d_digests = nullptr;
  std::uint8_t* d_verdicts = nullptr;
  ShardHashBatch view;

  void add(std::vector<xxh3::Piece> shard_pieces, const std::uint8_t* expected) {
    DeviceShard s;
    s.first_piece = static_cast<std::uint32_t>(pieces.size());
    s.piece_count = static_cast<std::uint32_t>(shard_pieces.size());
    for (const auto& p : shard_pieces) s.length += p.length;
    if (s.piece_count == 0) {  // an empty shard still names a readable piece
      shard_pieces.push_back(xxh3::Piece{nullptr, 0});
      s.piece_count = 1;
    }
    pieces.insert(pieces.end(), shard_pieces.begin(), shard_pieces.end());
    if (expected != nullptr) {
      std::memcpy(s.expected, expected, 16);
      s.has_expected = 1;
    }
    shards.push_back(s);
  }

  void upload() {
    item_start.assign(shards.size() + 1, 0);
    const std::uint64_t slots = shard_hash_plan(shards.data(), shards.size(), item_start.data());
    device_alloc(&d_pieces, sizeof(xxh3::Piece) * pieces.size());
    device_alloc(&d_shards, sizeof(DeviceShard) * shards.size());
    device_alloc(&d_items, sizeof(std::uint64_t) * item_start.size());
    device_alloc(&d_terms, sizeof(xxh3::Lanes) * std::max<std::uint64_t>(slots, 1));
    device_alloc(&d_digests, 16 * shards.size());
    device_alloc(&d_verdicts, shards.size());
    CHECK_CUDA(cudaMemcpy(d_pieces, pieces.data(), sizeof(xxh3::Piece) * pieces.size(), cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(d_shards, shards.data(), sizeof(DeviceShard) * shards.size(), cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(d_items, item_start.data(), sizeof(std::uint64_t) * item_start.size(), cudaMemcpyHostToDevice));
    view = ShardHashBatch{d_pieces, d_shards, d_items, shards.size(), item_start.back(), d_terms, d_digests, d_verdicts};
  }

  void digests(std::vector<std::uint8_t>& out, std::vector<std::uint8_t>& verdicts) const {
    out.resize(16 * shards.size());
    verdicts.resize(shards.size());
    CHECK_CUDA(cudaMemcpy(out.data(), d_digests, out.size(), cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(verdicts.data(), d_verdicts, verdicts.size(), cudaMemcpyDeviceToHost));
  }

  ~Batch() {
    cudaFree(d_pieces);
    cudaFree(d_shards);
    cudaFree(d_items);
    cudaFree(d_terms);
    cudaFree(d_digests);
    cudaFree(d_verdicts);
  }
};

using Launch = std::function<const char*(const ShardHashBatch&, void*)>;

// Median milliseconds of `runs` launches.
double time_ms(const Batch& b, const Launch& launch, int runs) {
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  std::vector<float> ms;
  for (int i = 0; i < runs + 1; ++i) {
    CHECK_CUDA(cudaEventRecord(start));
    if (const char* e = launch(b.view, nullptr)) {
      std::fprintf(stderr, "launch: %s\n", e);
      std::exit(2);
    }
    CHECK_CUDA(cudaEventRecord(stop));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float t = 0;
    CHECK_CUDA(cudaEventElapsedTime(&t, start, stop));
    if (i > 0) ms.push_back(t);  // the first run warms up
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

std::string probe() {
  int device = 0;
  CHECK_CUDA(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  auto attribute = [&](cudaDeviceAttr a) {
    int v = -1;
    if (cudaDeviceGetAttribute(&v, a, device) != cudaSuccess) v = -1;
    return v;
  };
  std::ostringstream o;
  o << "{\"name\": " << json_string(prop.name) << ", \"compute\": \"" << prop.major << "." << prop.minor
    << "\", \"memory_bytes\": " << prop.totalGlobalMem << ", \"driver\": " << driver << ", \"runtime\": " << runtime
    << ", \"pci_bus\": " << prop.pciBusID << ", \"gpudirect_rdma_supported\": "
    << attribute(cudaDevAttrGPUDirectRDMASupported)
    << ", \"gpudirect_rdma_flush_writes_options\": " << attribute(cudaDevAttrGPUDirectRDMAFlushWritesOptions)
    << ", \"gpudirect_rdma_writes_ordering\": " << attribute(cudaDevAttrGPUDirectRDMAWritesOrdering)
    << ", \"nvidia_peermem_loaded\": " << (peermem_loaded() ? "true" : "false") << "}";
  return o.str();
}

// ---- hash: correctness --------------------------------------------------------

std::string check_hash(const std::vector<std::uint8_t>& host, const std::uint8_t* device, int& failures) {
  const std::size_t mib = std::size_t{1} << 20;
  const std::vector<std::size_t> lengths{0,    1,     3,       4,           8,           9,          16,       17,
                                         128,  129,   240,     241,         1024,        1025,       65536,    1000003,
                                         16 * mib - 5, 16 * mib, 64 * mib, 256 * mib};
  Batch batch;
  std::vector<std::vector<std::uint8_t>> expected;
  int index = 0;
  for (std::size_t n : lengths) {
    for (std::size_t at : {0u, 1u, 7u, 64u}) {
      if (at + n > host.size()) continue;
      std::uint8_t d[16];
      oracle(host.data() + at, n, d);
      expected.emplace_back(d, d + 16);
      std::uint8_t given[16];
      std::memcpy(given, d, 16);
      if (index % 2 == 1) given[index % 16] ^= 0x40;  // odd shards get a wrong expectation
      batch.add(n == 0 ? std::vector<xxh3::Piece>{} : std::vector<xxh3::Piece>{{device + at, n}}, given);
      ++index;
    }
  }
  // Shards in pieces from scattered places: the oracle hashes their
  // concatenation on the CPU.
  std::uint64_t rng = 77;
  auto next = [&] { return rng = rng * 6364136223846793005ULL + 1442695040888963407ULL; };
  for (int round = 0; round < 24; ++round) {
    std::vector<xxh3::Piece> pieces;
    std::vector<std::uint8_t> joined;
    const int count = 1 + static_cast<int>(next() % 9);
    for (int k = 0; k < count; ++k) {
      const std::size_t n = 1 + next() % (round < 12 ? 3000 : 3 * mib);
      const std::size_t at = next() % (host.size() - n);
      pieces.push_back({device + at, n});
      joined.insert(joined.end(), host.begin() + at, host.begin() + at + n);
    }
    std::uint8_t d[16];
    oracle(joined.data(), joined.size(), d);
    expected.emplace_back(d, d + 16);
    std::uint8_t given[16];
    std::memcpy(given, d, 16);
    if (index % 2 == 1) given[0] ^= 0x01;
    batch.add(pieces, given);
    ++index;
  }
  batch.upload();
  if (const char* e = launch_shard_hash(batch.view, nullptr)) {
    std::fprintf(stderr, "launch: %s\n", e);
    std::exit(2);
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<std::uint8_t> digests, verdicts;
  batch.digests(digests, verdicts);
  int digest_mismatches = 0, verdict_mismatches = 0;
  for (std::size_t s = 0; s < expected.size(); ++s) {
    if (std::memcmp(digests.data() + 16 * s, expected[s].data(), 16) != 0) {
      ++digest_mismatches;
      std::fprintf(stderr, "hash mismatch: shard %zu, %llu bytes\n", s,
                   static_cast<unsigned long long>(batch.shards[s].length));
    }
    if (verdicts[s] != (s % 2 == 0 ? 1 : 0)) ++verdict_mismatches;
  }
  failures += digest_mismatches + verdict_mismatches;
  std::ostringstream o;
  o << "{\"shards\": " << expected.size() << ", \"digest_mismatches\": " << digest_mismatches
    << ", \"verdict_mismatches\": " << verdict_mismatches << ", \"max_length\": " << 256 * mib << "}";
  return o.str();
}

// ---- hash: speed -----------------------------------------------------------------

std::string hash_speed(std::uint8_t* device, std::size_t device_bytes) {
  const std::size_t mib = std::size_t{1} << 20;
  std::ostringstream o;
  o << "{\"single_shard\": [";
  bool first = true;
  for (std::size_t n : {16 * mib, 64 * mib, 256 * mib}) {
    Batch b;
    b.add({{device, n}}, nullptr);
    b.upload();
    const double all = time_ms(b, launch_shard_hash, 10);
    const double p1 = time_ms(b, launch_shard_hash_phase1, 10);
    const double p2 = time_ms(b, launch_shard_hash_phase2, 10);
    o << (first ? "" : ", ") << "{\"mib\": " << n / mib << ", \"ms\": " << all << ", \"phase1_ms\": " << p1
      << ", \"phase2_ms\": " << p2 << "}";
    first = false;
  }
  // Many 16 MiB shards at once: all of the buffer.
  const std::size_t shard = 16 * mib;
  const std::size_t count = device_bytes / shard;
  Batch b;
  for (std::size_t i = 0; i < count; ++i) b.add({{device + i * shard, shard}}, nullptr);
  b.upload();
  const double all = time_ms(b, launch_shard_hash, 5);
  const double p1 = time_ms(b, launch_shard_hash_phase1, 5);
  const double p2 = time_ms(b, launch_shard_hash_phase2, 5);
  const double bytes = static_cast<double>(count * shard);
  // Phase 1's rate by the number of consecutive blocks a warp takes.
  std::ostringstream sweep;
  for (unsigned per_warp : {1u, 2u, 4u, 8u, 16u, 32u}) {
    const Launch launch = [per_warp](const ShardHashBatch& batch, void* stream) {
      return launch_shard_hash_phase1_with(batch, stream, per_warp);
    };
    sweep << (per_warp == 1 ? "" : ", ") << "{\"blocks_per_warp\": " << per_warp
          << ", \"phase1_gb_per_s\": " << bytes / time_ms(b, launch, 5) / 1e6 << "}";
  }
  // Roofline: a device-to-device copy of half the buffer (reads and writes).
  const std::size_t half = device_bytes / 2;
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  CHECK_CUDA(cudaMemcpy(device + half, device, half, cudaMemcpyDeviceToDevice));
  CHECK_CUDA(cudaEventRecord(start));
  CHECK_CUDA(cudaMemcpy(device + half, device, half, cudaMemcpyDeviceToDevice));
  CHECK_CUDA(cudaEventRecord(stop));
  CHECK_CUDA(cudaEventSynchronize(stop));
  float copy_ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&copy_ms, start, stop));
  o << "], \"many\": {\"shards\": " << count << ", \"shard_mib\": 16, \"ms\": " << all
    << ", \"gb_per_s\": " << bytes / all / 1e6 << ", \"phase1_gb_per_s\": " << bytes / p1 / 1e6
    << ", \"phase2_ms\": " << p2 << ", \"blocks_per_warp\": " << phase1_items_per_warp(b.view.items)
    << ", \"phase1_sweep\": [" << sweep.str() << "]}, \"d2d_copy_gb_per_s_read_plus_write\": "
    << 2.0 * static_cast<double>(half) / copy_ms / 1e6 << "}";
  return o.str();
}

// ---- staging ring --------------------------------------------------------------

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// A staging ring, or the program ends with the reason.
std::unique_ptr<StagingRing> ring_or_exit(DeviceApi& api, StagingRing::Options options) {
  std::unique_ptr<StagingRing> ring;
  if (Status s = StagingRing::create(api, options, ring); !s) {
    std::fprintf(stderr, "%s\n", s.to_string().c_str());
    std::exit(2);
  }
  return ring;
}

// Moves `total` bytes of `source` into device memory at `device` through a
// ring; with `producer`, a thread copies each slot's bytes from `source`
// (as a NIC would write them) before it lands. Returns GB/s.
double staged_rate(DeviceApi& api, const std::uint8_t* source, std::uint8_t* device, std::size_t total,
                   StagingRing::Options options, bool producer) {
  const std::unique_ptr<StagingRing> ring = ring_or_exit(api, options);
  core::MutableRegions destination(std::span<std::byte>(reinterpret_cast<std::byte*>(device), total));
  std::vector<peer::PayloadStage::Landed> landed;
  std::size_t next = 0;
  std::size_t done = 0;
  const std::size_t pieces = (total + options.slot_bytes - 1) / options.slot_bytes;
  const auto start = std::chrono::steady_clock::now();
  while (done < pieces) {
    if (next < pieces) {
      std::span<std::byte> slot = ring->take(options.slot_bytes);
      if (!slot.empty()) {
        const std::size_t at = next * options.slot_bytes;
        const std::size_t n = std::min(options.slot_bytes, total - at);
        if (producer) std::memcpy(slot.data(), source + at, n);
        if (Status s = ring->land(slot, destination, at, n, next); !s) {
          std::fprintf(stderr, "%s\n", s.to_string().c_str());
          std::exit(2);
        }
        ++next;
        continue;
      }
    }
    landed.clear();
    ring->poll(landed);
    done += landed.size();
    for (const auto& l : landed)
      if (!l.ok) std::exit(3);
  }
  return static_cast<double>(total) / seconds_since(start) / 1e9;
}

// Moves `total` bytes of device memory at `device` to the host through a
// ring's slots (PayloadStage::fill: what serving a GPU-held version without
// a mirror does), each slot given back once its copy has landed. With
// `check`, each slot's bytes are compared with `expected` first. Returns GB/s.
double filled_rate(DeviceApi& api, const std::uint8_t* device, std::size_t total, StagingRing::Options options,
                   const std::uint8_t* expected, bool& equal) {
  const std::unique_ptr<StagingRing> ring = ring_or_exit(api, options);
  core::ConstRegions source(std::span<const std::byte>(reinterpret_cast<const std::byte*>(device), total));
  std::map<std::uint64_t, std::span<std::byte>> slots;  // by tag
  std::vector<peer::PayloadStage::Landed> landed;
  std::size_t next = 0;
  std::size_t done = 0;
  const std::size_t pieces = (total + options.slot_bytes - 1) / options.slot_bytes;
  const auto start = std::chrono::steady_clock::now();
  while (done < pieces) {
    if (next < pieces) {
      const std::size_t at = next * options.slot_bytes;
      const std::size_t n = std::min(options.slot_bytes, total - at);
      std::span<std::byte> slot = ring->take(n);
      if (!slot.empty()) {
        if (Status s = ring->fill(slot, source, at, n, next); !s) {
          std::fprintf(stderr, "%s\n", s.to_string().c_str());
          std::exit(2);
        }
        slots[next++] = slot;
        continue;
      }
    }
    landed.clear();
    ring->poll(landed);
    for (const auto& l : landed) {
      if (!l.ok) std::exit(3);
      std::span<std::byte> slot = slots[l.tag];
      if (expected != nullptr && std::memcmp(slot.data(), expected + l.offset, l.length) != 0) equal = false;
      ring->give_back(slot);
      slots.erase(l.tag);
      ++done;
    }
  }
  return static_cast<double>(total) / seconds_since(start) / 1e9;
}

std::string staging(std::uint8_t* device, const std::vector<std::uint8_t>& host, int& failures) {
  std::unique_ptr<DeviceApi> api;
  if (Status s = open_cuda_device("", 2, api); !s) {
    std::fprintf(stderr, "%s\n", s.to_string().c_str());
    std::exit(2);
  }
  const std::size_t total = std::min<std::size_t>(host.size() & ~std::size_t{4095}, std::size_t{1} << 30);
  // Baseline: one pinned buffer, plain cudaMemcpy.
  void* pinned = nullptr;
  CHECK_CUDA(cudaHostAlloc(&pinned, total, cudaHostAllocPortable));
  std::memcpy(pinned, host.data(), total);
  CHECK_CUDA(cudaMemcpy(device, pinned, total, cudaMemcpyHostToDevice));
  auto t = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) CHECK_CUDA(cudaMemcpy(device, pinned, total, cudaMemcpyHostToDevice));
  const double plain = 3.0 * static_cast<double>(total) / seconds_since(t) / 1e9;
  // What one core's memcpy into pinned memory moves: the bound of the
  // "with_producer" rates below, whose producer is this thread.
  t = std::chrono::steady_clock::now();
  std::memcpy(pinned, host.data(), total);
  const double memcpy_rate = static_cast<double>(total) / seconds_since(t) / 1e9;
  std::ostringstream o;
  o << "{\"bytes\": " << total << ", \"plain_pinned_h2d_gb_per_s\": " << plain
    << ", \"producer_memcpy_gb_per_s\": " << memcpy_rate << ", \"ring\": [";
  bool first = true;
  const std::size_t mib = std::size_t{1} << 20;
  for (std::size_t slot : {1 * mib, 4 * mib, 16 * mib}) {
    for (std::size_t slots : {4u, 16u}) {
      const StagingRing::Options options{slot, slots};
      const double prefilled = staged_rate(*api, static_cast<const std::uint8_t*>(pinned), device, total, options, false);
      const double produced = staged_rate(*api, host.data(), device, total, options, true);
      o << (first ? "" : ", ") << "{\"slot_mib\": " << slot / mib << ", \"slots\": " << slots
        << ", \"prefilled_gb_per_s\": " << prefilled << ", \"prefilled_of_plain\": " << prefilled / plain
        << ", \"with_producer_gb_per_s\": " << produced << ", \"with_producer_of_plain\": " << produced / plain << "}";
      first = false;
    }
  }
  // Device to host: the ring's fills against plain pinned cudaMemcpy.
  CHECK_CUDA(cudaMemcpy(pinned, device, total, cudaMemcpyDeviceToHost));
  t = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) CHECK_CUDA(cudaMemcpy(pinned, device, total, cudaMemcpyDeviceToHost));
  const double plain_d2h = 3.0 * static_cast<double>(total) / seconds_since(t) / 1e9;
  o << "], \"plain_pinned_d2h_gb_per_s\": " << plain_d2h << ", \"ring_d2h\": [";
  bool fills_equal = true;
  first = true;
  for (std::size_t slot : {1 * mib, 4 * mib, 16 * mib}) {
    for (std::size_t slots : {4u, 16u}) {
      const StagingRing::Options options{slot, slots};
      const bool check = slot == mib && slots == 16u;  // one run also compares every byte (untimed others)
      const double rate = filled_rate(*api, device, total, options, nullptr, fills_equal);
      if (check) filled_rate(*api, device, total, options, host.data(), fills_equal);
      o << (first ? "" : ", ") << "{\"slot_mib\": " << slot / mib << ", \"slots\": " << slots
        << ", \"gb_per_s\": " << rate << ", \"of_plain\": " << rate / plain_d2h << "}";
      first = false;
    }
  }
  if (!fills_equal) ++failures;
  o << "], \"d2h_bytes_equal\": " << (fills_equal ? "true" : "false");
  cudaFreeHost(pinned);
  // The last run copied host[0, total) through the ring: the kernel checks it.
  std::uint8_t d[16];
  oracle(host.data(), total, d);
  Batch b;
  b.add({{device, total}}, d);
  b.upload();
  if (launch_shard_hash(b.view, nullptr) != nullptr) std::exit(2);
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<std::uint8_t> digests, verdicts;
  b.digests(digests, verdicts);
  if (verdicts[0] != 1) ++failures;
  o << ", \"landed_bytes_verified\": " << (verdicts[0] == 1 ? "true" : "false") << "}";
  return o.str();
}

// ---- sharing: CUDA IPC between two processes, dma-buf export ----------------

std::string hex(const std::uint8_t* data, std::size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < n; ++i) {
    out += digits[data[i] >> 4];
    out += digits[data[i] & 15];
  }
  return out;
}

bool unhex(const std::string& text, std::uint8_t* out, std::size_t n) {
  if (text.size() != 2 * n) return false;
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned long v = std::strtoul(text.substr(2 * i, 2).c_str(), nullptr, 16);
    out[i] = static_cast<std::uint8_t>(v);
  }
  return true;
}

// The second process: opens the range, hashes it where it lies (the verdict
// against the parent's digest), copies it into memory of its own, closes
// it. Prints one JSON object; exits 0 when the bytes were right.
int ipc_child(const std::string& handle_hex, std::uint64_t offset, std::uint64_t length, const std::string& digest_hex) {
  IpcRange range;
  std::uint8_t expected[16];
  if (!unhex(handle_hex, range.handle.data(), range.handle.size()) || !unhex(digest_hex, expected, 16)) return 2;
  range.offset = offset;
  range.length = length;
  auto t = std::chrono::steady_clock::now();
  std::unique_ptr<IpcMapping> mapping;
  if (Status st = IpcMapping::open(range, "", mapping); !st) {
    std::printf("{\"error\": %s}\n", json_string(st.to_string()).c_str());
    return 1;
  }
  const double open_ms = 1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  Batch b;
  b.add({{reinterpret_cast<const std::uint8_t*>(mapping->data()), mapping->size()}}, expected);
  b.upload();
  if (launch_shard_hash(b.view, nullptr) != nullptr) return 2;
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<std::uint8_t> digests, verdicts;
  b.digests(digests, verdicts);
  std::uint8_t* own = nullptr;
  device_alloc(&own, length);
  CHECK_CUDA(cudaMemcpy(own, mapping->data(), length, cudaMemcpyDeviceToDevice));
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  CHECK_CUDA(cudaEventRecord(start));
  CHECK_CUDA(cudaMemcpy(own, mapping->data(), length, cudaMemcpyDeviceToDevice));
  CHECK_CUDA(cudaEventRecord(stop));
  CHECK_CUDA(cudaEventSynchronize(stop));
  float copy_ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&copy_ms, start, stop));
  mapping.reset();
  cudaFree(own);
  std::printf("{\"open_ms\": %g, \"verified_on_gpu\": %s, \"copy_gb_per_s_read_plus_write\": %g}\n", open_ms,
              verdicts[0] == 1 ? "true" : "false", 2.0 * static_cast<double>(length) / copy_ms / 1e6);
  return verdicts[0] == 1 ? 0 : 1;
}

std::string sharing(std::uint8_t* device, const std::vector<std::uint8_t>& host, const char* self, int& failures) {
  std::ostringstream o;
  // CUDA IPC: a range at an odd offset inside the allocation, opened by a
  // second process of this program.
  const std::size_t offset = 12345;
  const std::size_t length = std::size_t{256} << 20;
  IpcRange range;
  std::uint8_t digest[16];
  oracle(host.data() + offset, length, digest);
  o << "{\"ipc\": ";
  if (Status st = export_ipc_range(device + offset, length, range); !st) {
    ++failures;
    o << "{\"error\": " << json_string(st.to_string()) << "}";
  } else {
    const std::string command = std::string(self) + " --ipc-child " + hex(range.handle.data(), range.handle.size()) +
                                " " + std::to_string(range.offset) + " " + std::to_string(range.length) + " " +
                                hex(digest, 16);
    std::string child_output;
    int child_status = -1;
    if (FILE* pipe = popen(command.c_str(), "r")) {
      char buffer[512];
      while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) child_output += buffer;
      child_status = pclose(pipe);
    }
    while (!child_output.empty() && child_output.back() == '\n') child_output.pop_back();
    if (child_status != 0) ++failures;
    o << "{\"offset\": " << range.offset << ", \"bytes\": " << length << ", \"child_exit\": " << child_status
      << ", \"child\": " << (child_output.empty() ? "null" : child_output) << "}";
  }
  // The misuse that export_ipc_range must refuse: host memory.
  const bool host_refused = !export_ipc_range(host.data(), 64, range);
  if (!host_refused) ++failures;
  o << ", \"ipc_host_memory_refused\": " << (host_refused ? "true" : "false");
  // dma-buf: a page-aligned 64 MiB range; the file's size is the range's.
  const std::size_t dma_bytes = std::size_t{64} << 20;
  int fd = -1;
  const Status exported = export_dma_buf(device, dma_bytes, fd);
  o << ", \"dma_buf\": {\"exported\": " << (exported ? "true" : "false");
  if (exported) {
    const off_t size = lseek(fd, 0, SEEK_END);
    o << ", \"fd_size\": " << size;
    if (size != static_cast<off_t>(dma_bytes)) ++failures;
    close(fd);
  } else {
    o << ", \"error\": " << json_string(exported.to_string());
  }
  const bool misaligned_refused = !export_dma_buf(device + 1, dma_bytes, fd);
  if (!misaligned_refused) ++failures;
  o << ", \"misaligned_refused\": " << (misaligned_refused ? "true" : "false");
  // What a peer registers a GPU version's region by (DeviceApi): a region
  // 512 bytes into a page, 1 MiB long, exported as the pages around it.
  std::unique_ptr<DeviceApi> api;
  if (Status opened = open_cuda_device("", 1, api); opened) {
    const std::size_t mib_bytes = std::size_t{1} << 20;
    const std::byte* region = reinterpret_cast<const std::byte*>(device) + 3 * 4096 + 512;
    peer::DmaBuf buf;
    const Status region_exported = api->export_dma_buf(region, mib_bytes, buf);
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    const off_t expected = static_cast<off_t>((512 + mib_bytes + page - 1) / page * page);
    const off_t region_size = region_exported ? lseek(buf.fd(), 0, SEEK_END) : -1;
    const bool region_ok = region_exported && buf.offset() == 512 && region_size == expected;
    if (!region_ok) ++failures;
    o << ", \"region\": {\"exported\": " << (region_ok ? "true" : "false") << ", \"offset\": " << buf.offset()
      << ", \"fd_size\": " << region_size << "}";
    // The flush before a shard's check: what it costs per call.
    constexpr int kFlushes = 1000;
    const auto began = std::chrono::steady_clock::now();
    for (int i = 0; i < kFlushes; ++i) api->flush_nic_writes();
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - began).count();
    o << ", \"flush_us\": " << us / kFlushes;
  }
  o << "}}";
  return o.str();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 6 && std::string(argv[1]) == "--ipc-child") {
    return ipc_child(argv[2], std::strtoull(argv[3], nullptr, 10), std::strtoull(argv[4], nullptr, 10), argv[5]);
  }
  std::string out_path;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--json") out_path = argv[i + 1];
  int failures = 0;
  const std::size_t mib = std::size_t{1} << 20;
  std::vector<std::uint8_t> host(1024 * mib + 4096);
  fill(host, 1);
  std::uint8_t* device = nullptr;
  const std::size_t device_bytes = 4096 * mib;  // 4 GiB: 256 shards of 16 MiB
  device_alloc(&device, device_bytes);
  CHECK_CUDA(cudaMemcpy(device, host.data(), host.size(), cudaMemcpyHostToDevice));

  std::ostringstream o;
  const auto t0 = std::chrono::steady_clock::now();
  o << "{\"probe\": " << probe();
  o << ", \"hash\": " << check_hash(host, device, failures);
  o << ", \"hash_speed\": " << hash_speed(device, device_bytes);
  o << ", \"staging\": " << staging(device, host, failures);
  // The child is this program by its real path (popen's shell would read
  // /proc/self/exe as itself).
  char self[4096] = {};
  if (readlink("/proc/self/exe", self, sizeof self - 1) < 0) std::strncpy(self, argv[0], sizeof self - 1);
  o << ", \"sharing\": " << sharing(device, host, self, failures);
  o << ", \"failures\": " << failures << ", \"seconds\": " << seconds_since(t0) << "}\n";
  cudaFree(device);
  std::fputs(o.str().c_str(), stdout);
  if (!out_path.empty()) std::ofstream(out_path) << o.str();
  return failures == 0 ? 0 : 1;
}
