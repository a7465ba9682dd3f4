// GPU memory as a memory domain (src/cuda/device_memory_domain.hpp) on the
// fake device: shards verified by the kernels' own code "on the device"
// (only digests come back), copies and proofs, and whole fetches into
// device regions in virtual time.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>

#include "core/random_fill.hpp"
#include "cuda/device_memory_domain.hpp"
#include "support/fake_device.hpp"
#include "support/model_fixture.hpp"
#include "support/peer_checks.hpp"
#include "support/peer_network.hpp"

using namespace tensorhub;
using namespace tensorhub::testing;
using namespace std::chrono_literals;

namespace {

// Cuts `total` bytes into regions of odd sizes (so shards span them).
std::vector<std::size_t> odd_sizes(std::size_t total) {
  std::vector<std::size_t> out;
  const std::size_t cuts[] = {100003, 1, 65536, 77777, 4095};
  std::size_t left = total;
  for (std::size_t i = 0; left > 0; ++i) {
    const std::size_t n = std::min(left, cuts[i % 5]);
    out.push_back(n);
    left -= n;
  }
  return out;
}

}  // namespace

TEST_CASE("device domain: every shard verifies on the device, across region boundaries, and a changed byte fails its shard only") {
  FakeDevice device;
  cuda::DeviceMemoryDomain domain(device);
  const auto image = small_model(31, 1u << 20);
  const Manifest manifest = build_small(image, test_identity(1));
  DeviceRegions regions(device, odd_sizes(image.size()));
  regions.fill_from(image);
  const core::ConstRegions on_device = regions.image().as_const();
  for (std::uint32_t s = 0; s < manifest.shard_count(); ++s) CHECK(domain.verify_shard(manifest, ShardIndex{s}, on_device));
  CHECK(device.hashes() == manifest.shard_count());
  CHECK(device.hashed_bytes() == image.size());
  CHECK(device.bytes_to_host() == 0);  // XXH3 shards never come back to the host
  CHECK(device.misplaced_copies() == 0);
  // One byte changed in the last region: only its shard fails.
  regions.regions().back()[10] ^= std::byte{1};
  const std::uint64_t changed_at = image.size() - regions.regions().back().size() + 10;
  for (std::uint32_t s = 0; s < manifest.shard_count(); ++s) {
    const ShardEntry& e = manifest.shard(ShardIndex{s});
    const bool holds = changed_at >= e.byte_offset && changed_at < e.byte_offset + e.byte_length;
    CHECK(domain.verify_shard(manifest, ShardIndex{s}, on_device) == !holds);
  }
  CHECK_FALSE(domain.verify_shard(manifest, ShardIndex{static_cast<std::uint32_t>(manifest.shard_count())}, on_device));
}

TEST_CASE("device domain: BLAKE2b shards (secure mode) are read back and verified on the host") {
  FakeDevice device;
  cuda::DeviceMemoryDomain domain(device);
  const auto image = small_model(32, 256u << 10);
  ManifestBuildOptions options = small_options();
  options.shard_hash = ShardHashAlgorithm::kBlake2b_256;
  const Manifest manifest = build_small(image, test_identity(1), options);
  DeviceRegions regions(device, odd_sizes(image.size()));
  regions.fill_from(image);
  for (std::uint32_t s = 0; s < manifest.shard_count(); ++s) {
    CHECK(domain.verify_shard(manifest, ShardIndex{s}, regions.image().as_const()));
  }
  CHECK(device.hashes() == 0);
  CHECK(device.bytes_to_host() == image.size());
}

TEST_CASE("device domain: copies between layouts whose region boundaries differ, and proofs equal the host's") {
  FakeDevice device;
  cuda::DeviceMemoryDomain domain(device);
  std::vector<std::byte> bytes(300000);
  core::fill_pseudo_random(bytes, 5);
  DeviceRegions from(device, odd_sizes(bytes.size()));
  from.fill_from(bytes);
  DeviceRegions to(device, {1000, 150000, 149000});
  CHECK(domain.copy(from.image().as_const(), to.image(), 999, 200000));
  const std::vector<std::byte> landed = to.bytes();
  CHECK(std::equal(landed.begin() + 999, landed.begin() + 200999, bytes.begin() + 999));
  // A host image copies into device regions too (a held host version).
  const core::ConstRegions host{std::span<const std::byte>(bytes)};
  DeviceRegions fresh(device, {300000});
  CHECK(domain.copy(host, fresh.image(), 0, bytes.size()));
  CHECK(std::equal(bytes.begin(), bytes.end(), fresh.regions()[0].begin()));
  // A proof over device memory is the host's proof of the same bytes.
  const std::uint8_t nonce[] = {1, 2, 3};
  const peer::ByteRange ranges[] = {{0, 100}, {100000, 4096}, {299000, 1000}};
  CHECK(domain.digest_ranges(nonce, ranges, from.image().as_const()) ==
        peer::host_memory().digest_ranges(nonce, ranges, host));
  // A lost device copies nothing and proves nothing.
  device.lose();
  CHECK_FALSE(domain.copy(host, fresh.image(), 0, 10));
  CHECK(domain.digest_ranges(nonce, ranges, from.image().as_const()) == core::Blake2bDigest{});
}

TEST_CASE("device domain: a peer fetches v1 into device regions and v2 reuses its unchanged shards device-side") {
  PeerNetwork net(21);
  add_peers(net, 2);
  FakeDevice device;
  cuda::DeviceMemoryDomain domain(device);
  auto image = small_model(33, 1u << 20);
  const auto tensors = tensors_of(image);
  auto v1 = net.publish(0, "policy", image, tensors);
  REQUIRE(v1.is_ok());
  REQUIRE(net.run_until([&] { return knows_head(net, 1, 1); }, 10s));
  DeviceRegions first(device, odd_sizes(image.size()));
  auto f1 = net.fetch(1, "policy", 1, first.regions(), domain);
  REQUIRE(f1.is_ok());
  REQUIRE(net.run_until([&] { return complete(*f1); }, 20s));
  CHECK(same_bytes(*f1, image));
  const std::size_t shards = (*v1)->manifest->shard_count();
  CHECK(device.hashes() == shards);

  auto next = image;
  next[next.size() - 5] ^= std::byte{1};
  REQUIRE(net.publish(0, "policy", next, tensors).is_ok());
  REQUIRE(net.run_until([&] { return knows_head(net, 1, 2); }, 10s));
  DeviceRegions second(device, {next.size()});
  auto f2 = net.fetch(1, "policy", 2, second.regions(), domain);
  REQUIRE(f2.is_ok());
  REQUIRE(net.run_until([&] { return complete(*f2); }, 20s));
  CHECK(same_bytes(*f2, next));
  // Every shard of v2 verified on the device: the changed one fetched, the
  // others copied from v1 and checked again.
  CHECK(device.hashes() == 2 * shards);
  // Only proofs of possession read device bytes back: at most 4 x 16 KiB
  // each, never a shard.
  CHECK(device.bytes_to_host() % (4 * 16384) == 0);
  CHECK(device.bytes_to_host() <= 2 * 4 * 16384);
  CHECK(device.misplaced_copies() == 0);
}

TEST_CASE("device domain: a manifest built from device regions is the one built on the host, signature and all") {
  for (ShardHashAlgorithm algorithm : {ShardHashAlgorithm::kXxh3_128, ShardHashAlgorithm::kBlake2b_256}) {
    FakeDevice device;
    cuda::DeviceMemoryDomain domain(device);
    const auto image = small_model(34, 1u << 20);
    ManifestBuildOptions options = small_options();
    options.shard_hash = algorithm;
    const Manifest on_host = build_small(image, test_identity(1), options);
    DeviceRegions regions(device, odd_sizes(image.size()));
    regions.fill_from(image);
    std::vector<ConstRegion> parts;
    for (MutableRegion r : regions.regions()) parts.push_back(r);
    auto on_device = peer::build_manifest_in(domain, options, parts, tensors_of(image), test_identity(1));
    REQUIRE_MESSAGE(on_device.is_ok(), on_device.status().to_string());
    CHECK(on_device->id() == on_host.id());
    CHECK(std::ranges::equal(on_device->encoded(), on_host.encoded()));
    CHECK(device.hashes() == (algorithm == ShardHashAlgorithm::kXxh3_128 ? on_host.shard_count() : 0));
    // A bad argument fails before any shard is hashed.
    const std::size_t hashed = device.hashes();
    options.shard_size = 1000;
    CHECK(peer::build_manifest_in(domain, options, parts, tensors_of(image), test_identity(1)).status().code() ==
          StatusCode::kInvalidArgument);
    CHECK(device.hashes() == hashed);
  }
}
