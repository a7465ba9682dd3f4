// Whole peers in virtual time (tests/support/peer_network): the peer core
// over real gossip and a deterministic data plane, no sockets.
#include <doctest/doctest.h>

#include "core/random_fill.hpp"
#include "support/model_fixture.hpp"
#include "support/peer_checks.hpp"
#include "support/peer_network.hpp"

using namespace tensorhub;
using namespace tensorhub::peer;
using namespace tensorhub::testing;
using namespace std::chrono_literals;

namespace {

// Peer 0 publishes `image` as v1 of "policy"; peer 1 fetches it to the end.
std::shared_ptr<LocalVersion> published_and_fetched(PeerNetwork& net, const std::vector<std::byte>& image,
                                                    const std::vector<TensorEntry>& tensors) {
  REQUIRE(net.publish(0, "policy", image, tensors).is_ok());
  REQUIRE(net.run_until([&] { return knows_head(net, 1, 1); }, 10s));
  auto v1 = net.fetch(1, "policy", 1);
  REQUIRE(v1.is_ok());
  REQUIRE(net.run_until([&] { return complete(*v1); }, 20s));
  return *v1;
}

}  // namespace

TEST_CASE("peer core: a published version is found through gossip, fetched, verified and served onwards") {
  PeerNetwork net(1);
  add_peers(net, 4);
  const auto image = small_model(1, 1u << 20);
  auto published = net.publish(0, "policy", image, tensors_of(image));
  REQUIRE_MESSAGE(published.is_ok(), published.status().to_string());
  REQUIRE(net.run_until([&] { return knows_head(net, 1, 1) && knows_head(net, 2, 1) && knows_head(net, 3, 1); }, 10s));
  for (std::size_t p = 1; p < 4; ++p) CHECK(net.heads_seen(p).size() == 1);
  std::vector<std::shared_ptr<LocalVersion>> fetches;
  for (std::size_t p = 1; p < 4; ++p) {
    auto f = net.fetch(p, "policy", kLatestVersion);
    REQUIRE_MESSAGE(f.is_ok(), f.status().to_string());
    fetches.push_back(*f);
  }
  REQUIRE(net.run_until([&] { return std::all_of(fetches.begin(), fetches.end(), complete); }, 30s));
  for (const auto& f : fetches) CHECK(same_bytes(f, image));
  // The fetchers served each other: the publisher sent less than three copies.
  CHECK(net.bytes_served(0) < 3 * image.size());
  CHECK(net.bytes_served(1) + net.bytes_served(2) + net.bytes_served(3) > 0);
  REQUIRE(net.run_until([&] { return net.core(0).replicas((*published)->id) == 3; }, 10s));
}

TEST_CASE("peer core: a manifest asked of a peer that never answers is asked of another that names it") {
  PeerNetwork net(2);
  add_peers(net, 2);
  const auto image = small_model(2, 512u << 10);
  REQUIRE(net.publish(0, "policy", image, tensors_of(image)).is_ok());
  REQUIRE(net.run_until([&] { return knows_head(net, 1, 1); }, 10s));
  auto f = net.fetch(1, "policy", 1);
  REQUIRE(f.is_ok());
  REQUIRE(net.run_until([&] { return complete(*f); }, 20s));
  // The publisher goes silent; a newcomer that joins through it asks it first.
  net.silence(0);
  const std::size_t newcomer = net.add_peer(Location{"dc", "r0", "h9"}, {0});
  REQUIRE(net.run_until([&] { return knows_head(net, newcomer, 1); }, 20s));
  CHECK(net.messages(newcomer, 0, swarm::MessageType::kGetManifest) >= 1);
  CHECK(net.messages(newcomer, 1, swarm::MessageType::kGetManifest) >= 1);
  auto g = net.fetch(newcomer, "policy", 1);
  REQUIRE(g.is_ok());
  REQUIRE(net.run_until([&] { return complete(*g); }, 20s));
  CHECK(same_bytes(*g, image));
}

TEST_CASE("peer core: a fetch of a version held here is a copy, and releasing one never touches the other") {
  PeerNetwork net(3);
  add_peers(net, 3);
  const auto image = small_model(3, 512u << 10);
  auto published = net.publish(0, "policy", image, tensors_of(image));
  REQUIRE(published.is_ok());
  // On the publisher itself: a copy into new memory, with the bytes.
  auto copy = net.fetch(0, "policy", kLatestVersion);
  REQUIRE(copy.is_ok());
  CHECK(*copy != *published);
  REQUIRE(net.run_until([&] { return complete(*copy); }, 5s));
  CHECK(same_bytes(*copy, image));
  CHECK(net.bytes_copied(0) == image.size());
  bool copy_released = false;
  net.release(0, *copy, ReleaseMode::kNow, [&] { copy_released = true; });
  CHECK(copy_released);  // its memory went back (ReleaseMemory)
  CHECK(net.core(0).find((*published)->id) == *published);  // still served
  CHECK(state_of(*published) == VersionState::kComplete);

  // Two fetches of one version on a worker: the second copies the first once
  // it completes; releasing the first while it fetches hands its place to the second.
  REQUIRE(net.run_until([&] { return knows_head(net, 1, 1); }, 10s));
  auto first = net.fetch(1, "policy", 1);
  auto second = net.fetch(1, "policy", 1);
  REQUIRE(first.is_ok());
  REQUIRE(second.is_ok());
  bool first_released = false;
  net.release(1, *first, ReleaseMode::kNow, [&] { first_released = true; });
  CHECK(first_released);
  CHECK(state_of(*first) == VersionState::kFailed);  // cancelled while it fetched
  CHECK((*first)->result.code() == StatusCode::kCancelled);
  REQUIRE(net.run_until([&] { return complete(*second); }, 20s));
  CHECK(same_bytes(*second, image));
  CHECK(net.core(1).find((*published)->id) == *second);  // and it serves now
  // A third copies from it, and the first's release changed nothing for either.
  auto third = net.fetch(1, "policy", 1);
  REQUIRE(third.is_ok());
  REQUIRE(net.run_until([&] { return complete(*third); }, 5s));
  CHECK(same_bytes(*third, image));
  net.release(1, *third);
  CHECK(state_of(*second) == VersionState::kComplete);
  CHECK(net.core(1).private_copies() == 0);
}

TEST_CASE("peer core: shards unchanged since the version held are copied locally, only changed ones cross") {
  PeerNetwork net(4);
  add_peers(net, 2);
  auto image = small_model(4, 1u << 20);
  const auto tensors = tensors_of(image);
  const auto v1 = published_and_fetched(net, image, tensors);
  const std::uint64_t received_v1 = net.piece_bytes_received(1);
  // v2 changes the bytes of one 64 KiB shard near the end.
  auto next = image;
  next[next.size() - 1000] ^= std::byte{0xff};
  auto v2_published = net.publish(0, "policy", next, tensors);
  REQUIRE(v2_published.is_ok());
  REQUIRE(net.run_until([&] { return knows_head(net, 1, 2); }, 10s));
  auto v2 = net.fetch(1, "policy", 2);
  REQUIRE(v2.is_ok());
  REQUIRE(net.run_until([&] { return complete(*v2); }, 20s));
  CHECK(same_bytes(*v2, next));
  const std::uint64_t shard = (*v2_published)->manifest->shard_size();
  CHECK(net.bytes_copied(1) >= image.size() - shard);
  CHECK(net.piece_bytes_received(1) - received_v1 <= shard);
  CHECK(state_of(v1) == VersionState::kComplete);  // the source stays as it was
}

TEST_CASE("peer core: a publication that lost its version number, or broke the chain, serves nothing") {
  PeerNetwork net(5);
  add_peers(net, 2);
  const auto image = small_model(5, 256u << 10);
  REQUIRE(net.publish(0, "policy", image, tensors_of(image)).is_ok());
  REQUIRE(net.run_until([&] { return knows_head(net, 1, 1); }, 10s));
  // Peer 1 builds a v1 of its own, as if it had not heard of peer 0's.
  auto options = small_options(1);
  auto stale = std::make_shared<const Manifest>(build_small(image, PeerNetwork::identity(1), options));
  auto refused = net.core(1).publish(net.now(), stale, core::ConstRegions(std::span<const std::byte>(image)));
  CHECK(refused.status().code() == StatusCode::kAlreadyExists);
  CHECK(net.core(1).versions().empty());
  CHECK(net.core(1).find(stale->id()) == nullptr);
  CHECK(net.gossip().core(1).self_record()->record.holdings.empty());
  CHECK(net.core(1).latest("policy")->id != stale->id());
}

TEST_CASE("peer core: two manifests signed for one version are kept as proof and neither is believed") {
  PeerNetwork net(6);
  add_peers(net, 3);
  // Peers 0 and 1, both trusted publishers, publish a v1 each before either hears of the other.
  const auto a = small_model(6, 256u << 10), b = small_model(7, 256u << 10);
  auto pa = net.publish(0, "policy", a, tensors_of(a));
  auto pb = net.publish(1, "policy", b, tensors_of(b));
  REQUIRE(pa.is_ok());
  REQUIRE(pb.is_ok());
  REQUIRE(net.run_until([&] { return net.core(2).heads().equivocated("policy", VersionNumber{1}); }, 20s));
  for (std::size_t p : {0, 1}) {
    REQUIRE(net.run_until([&] { return net.core(p).heads().equivocated("policy", VersionNumber{1}); }, 20s));
  }
  for (std::size_t p = 0; p < 3; ++p) {
    CHECK_FALSE(net.core(p).latest("policy").has_value());
    REQUIRE(net.core(p).heads().equivocations().size() == 1);
    const Equivocation& e = net.core(p).heads().equivocations()[0];
    CHECK(e.first.id() != e.second.id());
    // The user is told why, by a fetch of that number or of the head.
    for (std::uint64_t asked : {std::uint64_t{1}, std::uint64_t{0}}) {
      const Status s = net.core(p).resolve("policy", VersionNumber{asked}).status();
      CHECK(s.code() == StatusCode::kVerifyFailed);
      CHECK(s.message().find("signed twice") != std::string::npos);
    }
    CHECK(net.core(p).equivocation_above("policy", VersionNumber{0}).code() == StatusCode::kVerifyFailed);
    CHECK(net.core(p).equivocation_above("policy", VersionNumber{1}).is_ok());
  }
  // Peer 2 heard both from others: it reported the proof at error level.
  const auto& errors = net.errors(2);
  CHECK(std::any_of(errors.begin(), errors.end(),
                    [](const std::string& r) { return r.find("equivocation") != std::string::npos; }));
  // The next publication skips the poisoned number.
  CHECK(net.core(0).next_version("policy").version == VersionNumber{2});
}

TEST_CASE("peer core: the last holder of the head defers its release until another holds it, or until the bound") {
  PeerCoreConfig config;
  config.retention = swarm::RetentionPolicy{1, 500ms};
  PeerNetwork net(7, config);
  add_peers(net, 3);
  const auto image = small_model(8, 256u << 10);
  auto published = net.publish(0, "policy", image, tensors_of(image));
  REQUIRE(published.is_ok());
  REQUIRE(net.run_until([&] { return knows_head(net, 1, 1); }, 10s));
  auto f1 = net.fetch(1, "policy", 1);
  REQUIRE(f1.is_ok());
  REQUIRE(net.run_until([&] { return complete(*f1); }, 20s));
  // One other holder: the publisher's release does not wait.
  REQUIRE(net.run_until([&] { return net.core(0).replicas((*published)->id) == 1; }, 10s));
  bool publisher_released = false;
  net.release(0, *published, ReleaseMode::kHonourRetention, [&] { publisher_released = true; });
  CHECK(publisher_released);
  // Peer 1 is the last holder now: its release waits while nobody else holds it.
  REQUIRE(net.run_until([&] { return net.core(1).replicas((*published)->id) == 0; }, 10s));
  bool released1 = false;
  net.release(1, *f1, ReleaseMode::kHonourRetention, [&] { released1 = true; });
  net.run_for(400ms);
  CHECK_FALSE(released1);
  CHECK(net.core(1).find((*f1)->id) == *f1);  // still served
  auto f2 = net.fetch(2, "policy", 1);
  REQUIRE(f2.is_ok());
  REQUIRE(net.run_until([&] { return complete(*f2); }, 20s));
  // Peer 2 holds it complete, so peer 1 lets go, before its 500 ms bound.
  REQUIRE(net.run_until([&] { return released1; }, 5s));
  // Peer 2, the last holder, waits out its bound: 500 ms of virtual time, exactly.
  REQUIRE(net.run_until([&] { return net.core(2).replicas((*published)->id) == 0; }, 10s));
  bool released2 = false;
  const TimePoint asked = net.now();
  TimePoint at = kTimeNever;
  net.release(2, *f2, ReleaseMode::kHonourRetention, [&] {
    released2 = true;
    at = net.now();
  });
  REQUIRE(net.run_until([&] { return released2; }, 5s, 1ms));
  CHECK(at - asked >= 500ms);
  CHECK(at - asked < 510ms);
}

namespace {

// `image` copied into separate buffers cut at random points (1 byte to
// `largest` bytes each), so that no region is contiguous with the next.
std::vector<std::vector<std::byte>> cut_into_buffers(const std::vector<std::byte>& image, std::uint64_t seed,
                                                     std::size_t largest) {
  core::SplitMix64 rng(seed);
  std::vector<std::vector<std::byte>> buffers;
  for (std::size_t at = 0; at < image.size();) {
    const std::size_t n = std::min(image.size() - at, 1 + static_cast<std::size_t>(rng.below(largest)));
    buffers.emplace_back(image.begin() + static_cast<std::ptrdiff_t>(at), image.begin() + static_cast<std::ptrdiff_t>(at + n));
    at += n;
  }
  return buffers;
}

template <typename Region, typename Buffers>
std::vector<Region> regions_of(Buffers& buffers) {
  std::vector<Region> out;
  for (auto& b : buffers) out.push_back(Region(b.data(), b.size()));
  return out;
}

std::vector<std::byte> joined(const std::vector<std::vector<std::byte>>& buffers) {
  std::vector<std::byte> out;
  for (const auto& b : buffers) out.insert(out.end(), b.begin(), b.end());
  return out;
}

}  // namespace

TEST_CASE("peer core: a version published from many small regions is fetched into other regions, shards spanning them") {
  PeerNetwork net(8);
  add_peers(net, 3);
  auto image = small_model(9, 1u << 20);
  const auto tensors = tensors_of(image);
  // About 100 regions of up to 20 KiB: every 64 KiB shard spans several.
  auto published_buffers = cut_into_buffers(image, 1, 20u << 10);
  REQUIRE(published_buffers.size() > 50);
  const auto published_regions = regions_of<ConstRegion>(published_buffers);
  auto v1 = net.publish(0, "policy", std::span<const ConstRegion>(published_regions), tensors);
  REQUIRE_MESSAGE(v1.is_ok(), v1.status().to_string());
  // Its manifest is the one the flat image gives: the regions are only where the bytes lie.
  CHECK((*v1)->manifest->shard(ShardIndex{3}).digest ==
        build_small(image, PeerNetwork::identity(0), small_options(1)).shard(ShardIndex{3}).digest);
  REQUIRE(net.run_until([&] { return knows_head(net, 1, 1) && knows_head(net, 2, 1); }, 10s));
  // Peer 1 fetches into buffers cut elsewhere (up to 30 KiB), from the regions of peer 0.
  std::vector<std::vector<std::byte>> into;
  for (const auto& b : cut_into_buffers(image, 2, 30u << 10)) into.emplace_back(b.size());
  const auto into_regions = regions_of<MutableRegion>(into);
  auto f1 = net.fetch(1, "policy", 1, std::span<const MutableRegion>(into_regions));
  REQUIRE(f1.is_ok());
  REQUIRE(net.run_until([&] { return complete(*f1); }, 20s));
  CHECK(joined(into) == image);
  // The publisher lets go; peer 2 fetches from peer 1, which serves from its regions.
  net.release(0, *v1);
  auto f2 = net.fetch(2, "policy", 1);
  REQUIRE(f2.is_ok());
  REQUIRE(net.run_until([&] { return complete(*f2); }, 20s));
  CHECK(same_bytes(*f2, image));
  CHECK(net.bytes_served(1) >= image.size());

  // v2 changes one shard; peer 1 fetches it into new regions: the unchanged
  // shards are copied from its v1 regions to its v2 regions, region to region.
  auto next = image;
  next[next.size() / 2] ^= std::byte{0x33};
  auto next_buffers = cut_into_buffers(next, 3, 20u << 10);
  const auto next_regions = regions_of<ConstRegion>(next_buffers);
  REQUIRE(net.publish(0, "policy", std::span<const ConstRegion>(next_regions), tensors).is_ok());
  REQUIRE(net.run_until([&] { return knows_head(net, 1, 2); }, 10s));
  std::vector<std::vector<std::byte>> into2;
  for (const auto& b : cut_into_buffers(next, 4, 50u << 10)) into2.emplace_back(b.size());
  const auto into2_regions = regions_of<MutableRegion>(into2);
  const std::uint64_t copied_before = net.bytes_copied(1);
  auto g = net.fetch(1, "policy", 2, std::span<const MutableRegion>(into2_regions));
  REQUIRE(g.is_ok());
  REQUIRE(net.run_until([&] { return complete(*g); }, 20s));
  CHECK(joined(into2) == next);
  CHECK(net.bytes_copied(1) - copied_before >= image.size() - (64u << 10));
}

namespace {

// Host memory through the domain seam: what the test domains change a part of.
struct HostDomain : MemoryDomain {
  std::string_view name() const override { return "test-host"; }
  bool verify_shard(const Manifest& m, ShardIndex i, const core::ConstRegions& image) const override {
    return host_memory().verify_shard(m, i, image);
  }
  Status copy(const core::ConstRegions& from, const core::MutableRegions& to, std::uint64_t offset,
              std::uint64_t length) const override {
    return host_memory().copy(from, to, offset, length);
  }
  core::Blake2bDigest digest_ranges(std::span<const std::uint8_t> prefix, std::span<const ByteRange> ranges,
                                    const core::ConstRegions& image) const override {
    return host_memory().digest_ranges(prefix, ranges, image);
  }
  bool read(const core::ConstRegions& image, std::uint64_t offset, std::span<std::byte> out) const override {
    return host_memory().read(image, offset, out);
  }
  bool digest(ShardHashAlgorithm algorithm, const core::ConstRegions& image, std::uint64_t offset,
              std::uint64_t length, ShardDigest& out) const override {
    return host_memory().digest(algorithm, image, offset, length, out);
  }
  Status write(const core::MutableRegions& image, std::uint64_t offset,
               std::span<const std::byte> bytes) const override {
    return host_memory().write(image, offset, bytes);
  }
};

// Host memory that counts what the core asked of it: the seam a GPU domain plugs into.
struct CountingDomain final : HostDomain {
  mutable std::size_t verified = 0, copied = 0;
  mutable std::uint64_t copied_bytes = 0;
  std::string_view name() const override { return "counting"; }
  bool verify_shard(const Manifest& m, ShardIndex i, const core::ConstRegions& image) const override {
    ++verified;
    return HostDomain::verify_shard(m, i, image);
  }
  Status copy(const core::ConstRegions& from, const core::MutableRegions& to, std::uint64_t offset,
              std::uint64_t length) const override {
    ++copied;
    copied_bytes += length;
    return HostDomain::copy(from, to, offset, length);
  }
};

}  // namespace

TEST_CASE("peer core: the destination's memory domain verifies every shard fetched or copied, and copies every unchanged one") {
  PeerNetwork net(10);
  add_peers(net, 2);
  auto image = small_model(11, 1u << 20);
  const auto tensors = tensors_of(image);
  auto v1 = net.publish(0, "policy", image, tensors);
  REQUIRE(v1.is_ok());
  REQUIRE(net.run_until([&] { return knows_head(net, 1, 1); }, 10s));
  CountingDomain domain;
  auto f1 = net.fetch(1, "policy", 1, std::span<const MutableRegion>(), domain);
  REQUIRE(f1.is_ok());
  REQUIRE(net.run_until([&] { return complete(*f1); }, 20s));
  const std::size_t shards = (*v1)->manifest->shard_count();
  CHECK(domain.verified == shards);  // every shard once: none failed
  CHECK(domain.copied == 0);
  // v2 with one shard changed: the rest is copied by the domain; the one
  // fetched and every copy are verified.
  auto next = image;
  next[100] ^= std::byte{1};
  REQUIRE(net.publish(0, "policy", next, tensors).is_ok());
  REQUIRE(net.run_until([&] { return knows_head(net, 1, 2); }, 10s));
  auto f2 = net.fetch(1, "policy", 2, std::span<const MutableRegion>(), domain);
  REQUIRE(f2.is_ok());
  REQUIRE(net.run_until([&] { return complete(*f2); }, 20s));
  CHECK(same_bytes(*f2, next));
  CHECK(domain.verified == shards + 1 + (shards - 1));
  CHECK(domain.copied == shards - 1);
  CHECK(domain.copied_bytes == next.size() - (*v1)->manifest->shard(ShardIndex{0}).byte_length);
}

TEST_CASE("peer core: a fetch whose only holder stops serving the version fails, rather than waiting for ever") {
  PeerNetwork net(12);
  add_peers(net, 2);
  const auto image = small_model(12, 4u << 20);
  auto published = net.publish(0, "policy", image, tensors_of(image));
  REQUIRE(published.is_ok());
  REQUIRE(net.run_until([&] { return knows_head(net, 1, 1); }, 10s));
  auto f = net.fetch(1, "policy", kLatestVersion);
  REQUIRE(f.is_ok());
  // Some blocks arrive, then the publisher releases it at once (a file
  // withdrawn, a trainer that lets go).
  REQUIRE(net.run_until([&] { return net.piece_bytes_received(1) > 0; }, 10s, 1ms));
  net.release(0, *published, ReleaseMode::kNow);
  const auto failed = [&] {
    return (*f)->state == VersionState::kFailed;
  };
  REQUIRE(net.run_until(failed, 30s));
  MESSAGE("failed with: " << (*f)->result.to_string());
  CHECK((*f)->result.code() == StatusCode::kUnavailable);
}

TEST_CASE("peer core: a failed fetch can be retried at once: a new fetch, never a copy of the failed one") {
  PeerNetwork net(14);
  add_peers(net, 3);  // peer 2 fetches later, to hold the version again
  const auto image = small_model(14, 2u << 20);
  auto published = net.publish(0, "policy", image, tensors_of(image));
  REQUIRE(published.is_ok());
  REQUIRE(net.run_until([&] { return knows_head(net, 1, 1) && knows_head(net, 2, 1); }, 10s));
  auto holder = net.fetch(2, "policy", 1);
  REQUIRE(holder.is_ok());
  REQUIRE(net.run_until([&] { return complete(*holder); }, 20s));
  net.release(2, *holder, ReleaseMode::kNow);  // peer 2 lets go: the publisher is the only holder
  auto first = net.fetch(1, "policy", 1);
  REQUIRE(first.is_ok());
  REQUIRE(net.run_until([&] { return net.piece_bytes_received(1) > 0; }, 10s, 1ms));
  net.release(0, *published, ReleaseMode::kNow);
  const auto failed = [](const std::shared_ptr<LocalVersion>& v) {
    return v->state == VersionState::kFailed;
  };
  REQUIRE(net.run_until([&] { return failed(*first); }, 30s));
  // Retried at once: it fails too (nobody holds it), promptly, as a fetch of its own.
  auto retry = net.fetch(1, "policy", 1);
  REQUIRE(retry.is_ok());
  CHECK((*retry)->role == VersionRole::kFetched);
  CHECK(net.core(1).find((*retry)->id) == *retry);
  REQUIRE(net.run_until([&] { return failed(*retry); }, 30s));
  // Once a holder exists again, a retry succeeds, while the failed handles
  // are still held and then released (they hold nothing of the new one).
  auto republished = net.publish(0, "policy", image, tensors_of(image));  // v2: same bytes, a new version
  REQUIRE(republished.is_ok());
  REQUIRE(net.run_until([&] { return knows_head(net, 1, 2); }, 10s));
  auto success = net.fetch(1, "policy", 2);
  REQUIRE(success.is_ok());
  REQUIRE(net.run_until([&] { return complete(*success); }, 20s));
  CHECK(same_bytes(*success, image));
  net.release(1, *first, ReleaseMode::kNow);
  net.release(1, *retry, ReleaseMode::kNow);
  net.run_for(1s);
  CHECK(net.core(1).find((*success)->id) == *success);
}

namespace {

// Host memory whose writes fail once `refuse_after` bytes went in (a file
// system that fills up).
struct FillingDomain final : HostDomain {
  mutable std::uint64_t written = 0;
  std::uint64_t refuse_after = 0;
  std::string_view name() const override { return "filling"; }
  Status write(const core::MutableRegions& image, std::uint64_t offset,
               std::span<const std::byte> bytes) const override {
    if (written + bytes.size() > refuse_after) return Status::io_error("cannot write: No space left on device");
    written += bytes.size();
    return HostDomain::write(image, offset, bytes);
  }
};

}  // namespace

TEST_CASE("peer core: a destination that refuses bytes ends the fetch with its error, and the sources stop sending") {
  PeerNetwork net(15);
  add_peers(net, 2);
  const auto image = small_model(15, 4u << 20);
  auto published = net.publish(0, "policy", image, tensors_of(image));
  REQUIRE(published.is_ok());
  REQUIRE(net.run_until([&] { return knows_head(net, 1, 1); }, 10s));
  std::vector<std::byte> out(image.size());
  FillingDomain full;
  full.refuse_after = 1u << 20;
  const MutableRegion region(out);
  const TimePoint started = net.now();
  auto f = net.fetch(1, "policy", 1, std::span<const MutableRegion>(&region, 1), full);
  REQUIRE(f.is_ok());
  const auto finished = [&] {
    return (*f)->state != VersionState::kFetching;
  };
  REQUIRE(net.run_until(finished, 30s, 1ms));
  const double seconds = to_seconds(net.now() - started);
  {
    MESSAGE("failed after " << seconds << " s with: " << (*f)->result.to_string());
    CHECK((*f)->state == VersionState::kFailed);
    CHECK((*f)->result.code() == StatusCode::kIoError);
    CHECK((*f)->result.message().find("No space left on device") != std::string::npos);
  }
  // Within a second of the first refusal, and nothing more is asked for.
  CHECK(seconds < 1.0);
  const std::uint64_t received = net.piece_bytes_received(1);
  net.run_for(5s);
  CHECK(net.piece_bytes_received(1) == received);
  CHECK(received <= full.refuse_after + (1u << 20));
  CHECK(net.core(1).find((*f)->id) == nullptr);  // forgotten: a retry is a new fetch
}

TEST_CASE("peer core: a fetch whose only holder dies when every missing shard is begun fails too") {
  PeerNetwork net(13);
  add_peers(net, 3);  // peer 2 holds nothing
  const auto image = small_model(13, 1u << 20);  // 17 shards of 64 KiB
  auto published = net.publish(0, "policy", image, tensors_of(image));
  REQUIRE(published.is_ok());
  REQUIRE(net.run_until([&] { return knows_head(net, 1, 1); }, 10s));
  auto f = net.fetch(1, "policy", kLatestVersion);
  REQUIRE(f.is_ok());
  // The last few shards are all requested (begun) when the holder dies:
  // what it had in flight never arrives.
  const std::uint64_t most = image.size() - 4 * (64u << 10);
  REQUIRE(net.run_until([&] { return net.piece_bytes_received(1) >= most; }, 10s, 10us));
  REQUIRE(net.piece_bytes_received(1) < image.size());
  net.crash(0);
  const auto finished = [&] {
    return (*f)->state != VersionState::kFetching;
  };
  REQUIRE(net.run_until(finished, 60s));
  CHECK((*f)->state == VersionState::kFailed);
  CHECK((*f)->result.code() == StatusCode::kUnavailable);
}

TEST_CASE("peer core: a shard copied from a local version whose memory changed is fetched instead, never kept") {
  // Peer 1 holds v1 in memory its owner then changes (one byte in a shard
  // that v2 leaves unchanged). v2 copies its unchanged shards from v1: the
  // changed one fails verification and crosses the network instead; a
  // private copy of v1 itself fails with kVerifyFailed instead of handing
  // out the changed bytes.
  PeerNetwork net(5);
  add_peers(net, 2);
  auto image = small_model(5, 1u << 20);
  const auto tensors = tensors_of(image);
  const auto v1 = published_and_fetched(net, image, tensors);
  const std::uint64_t received_v1 = net.piece_bytes_received(1);
  v1->destination.for_each(1000, 1, [](std::span<std::byte> b) { b[0] ^= std::byte{0x55}; });

  auto next = image;
  next[next.size() - 1000] ^= std::byte{0xff};
  auto v2_published = net.publish(0, "policy", next, tensors);
  REQUIRE(v2_published.is_ok());
  REQUIRE(net.run_until([&] { return knows_head(net, 1, 2); }, 10s));
  auto v2 = net.fetch(1, "policy", 2);
  REQUIRE(v2.is_ok());
  REQUIRE(net.run_until([&] { return complete(*v2); }, 20s));
  CHECK(same_bytes(*v2, next));
  // What crossed: the shard whose copy failed, and the one v2 changed.
  const Manifest& m = *(*v2_published)->manifest;
  const std::uint64_t shard = m.shard_size();
  const std::uint64_t expected = m.shard(ShardIndex{static_cast<std::uint32_t>(1000 / shard)}).byte_length +
                                 m.shard(ShardIndex{static_cast<std::uint32_t>((next.size() - 1000) / shard)}).byte_length;
  CHECK(net.piece_bytes_received(1) - received_v1 == expected);
  CHECK_FALSE(net.errors(1).empty());

  auto copy = net.fetch(1, "policy", 1);
  REQUIRE(copy.is_ok());
  REQUIRE(net.run_until([&] { return state_of(*copy) != VersionState::kFetching; }, 5s));
  CHECK(state_of(*copy) == VersionState::kFailed);
}

TEST_CASE("peer core: a member counts as a replica once it proves it holds the version, never on its record's word") {
  // Peer 1 fetches v1; peer 2 only says so in its record (it holds
  // nothing). The publisher counts peer 1 once its answer to a challenge
  // matches, and never peer 2, whose record claims the version all along.
  PeerNetwork net(12);
  add_peers(net, 3);
  const auto image = small_model(12, 1u << 20);
  auto published = net.publish(0, "policy", image, tensors_of(image));
  REQUIRE(published.is_ok());
  const ManifestId id = (*published)->id;
  net.gossip().core(2).set_holding(gossip::HoldingEntry{"policy", 1, id, 1000});
  net.gossip().pump(2);
  REQUIRE(net.run_until([&] { return knows_head(net, 1, 1); }, 10s));
  auto fetched = net.fetch(1, "policy", 1);
  REQUIRE(fetched.is_ok());
  REQUIRE(net.run_until([&] { return complete(*fetched); }, 20s));
  REQUIRE(net.run_until([&] { return net.core(0).replicas(id) == 1; }, 10s));
  // Both claim it; one proved it. Asked again and again, the liar stays out.
  for (int round = 0; round < 4; ++round) {
    net.core(0).challenge_holders(net.now(), id);
    net.run_for(6s);
  }
  std::size_t claiming = 0;
  for (const auto& m : net.gossip().core(0).members()) {
    for (const auto& h : m.record->record.holdings) claiming += h.manifest_id == id && h.complete();
  }
  CHECK(claiming == 2);
  CHECK(net.core(0).replicas(id) == 1);
}

TEST_CASE("possession proofs: challenges are fresh and bounded, answers are checked against the challenger's bytes") {
  PossessionProofs proofs;
  core::SplitMix64 rng(7);
  ManifestId v;
  v.bytes.fill(1);
  const PeerId peer = GossipNetwork::identity_for(3).public_key();
  const TimePoint t0 = TimePoint(std::chrono::seconds(100));
  auto c = proofs.challenge(t0, v, peer, 5, 1u << 20, rng);
  REQUIRE(c.has_value());
  CHECK(c->ranges.size() == PossessionProofs::kRanges);
  for (const ByteRange& r : c->ranges) CHECK(r.offset + r.length <= (1u << 20));
  CHECK_FALSE(proofs.challenge(t0 + 1s, v, peer, 5, 1u << 20, rng).has_value());  // one pending at a time
  // The wire form round-trips, and refuses ranges outside the image.
  const auto bytes = encode_challenge(*c);
  auto back = decode_challenge(bytes, 1u << 20);
  REQUIRE(back.has_value());
  CHECK(back->nonce == c->nonce);
  CHECK(back->ranges == c->ranges);
  CHECK_FALSE(decode_challenge(bytes, 1000).has_value());
  CHECK_FALSE(decode_challenge(std::span(bytes).first(20), 1u << 20).has_value());
  // A wrong answer proves nothing and ends the challenge; the right one to
  // a fresh challenge does, for that incarnation only.
  core::Blake2bDigest expected{};
  expected[0] = 9;
  proofs.expect(v, peer, expected);
  core::Blake2bDigest wrong = expected;
  wrong[1] = 1;
  CHECK_FALSE(proofs.on_answer(v, peer, wrong));
  CHECK_FALSE(proofs.proved(v, peer, 5));
  auto again = proofs.challenge(t0 + 2s, v, peer, 5, 1u << 20, rng);
  REQUIRE(again.has_value());
  CHECK(again->nonce != c->nonce);
  proofs.expect(v, peer, expected);
  CHECK(proofs.on_answer(v, peer, expected));
  CHECK(proofs.proved(v, peer, 5));
  CHECK_FALSE(proofs.proved(v, peer, 6));  // restarted: it proves it again
  CHECK_FALSE(proofs.on_answer(v, peer, expected));  // no news
  proofs.forget(v);
  CHECK_FALSE(proofs.proved(v, peer, 5));
}

TEST_CASE("peer core: a peer that finds a version signed twice sends the proof to the peers that believe it") {
  // Every peer believes v1 = A. Peer 3 alone then learns B, signed by the
  // same publisher for the same number (nobody names B, so gossip alone
  // would never show it to the others): it sends both manifests to the
  // members whose records name v1, and every peer ends up refusing both.
  PeerNetwork net(13);
  add_peers(net, 4);
  const auto a = small_model(13, 256u << 10);
  REQUIRE(net.publish(0, "policy", a, tensors_of(a)).is_ok());
  for (std::size_t p = 1; p < 4; ++p) REQUIRE(net.run_until([&] { return knows_head(net, p, 1); }, 10s));
  auto b = a;
  b[b.size() - 10] ^= std::byte{1};
  ManifestBuildOptions options;
  options.model = "policy";
  options.version = 1;
  options.shard_size = 64u << 10;
  auto manifest_b = build_manifest(options, b, tensors_of(b), PeerNetwork::identity(0));
  REQUIRE(manifest_b.is_ok());
  CHECK(net.core(3).learn_manifest(net.now(), std::make_shared<const Manifest>(std::move(*manifest_b))).code() ==
        StatusCode::kVerifyFailed);
  CHECK(net.core(3).heads().equivocated("policy", VersionNumber{1}));
  for (std::size_t p = 0; p < 4; ++p) {
    CAPTURE(p);
    REQUIRE(net.run_until([&] { return net.core(p).heads().equivocated("policy", VersionNumber{1}); }, 10s));
    CHECK_FALSE(net.core(p).latest("policy").has_value());
  }
}
