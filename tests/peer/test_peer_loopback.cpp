// Peers in one process over loopback: publish, discover the head, fetch,
// verify, serve onwards, release.
#include <doctest/doctest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <future>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <nlohmann/json.hpp>
#include <thread>

#include <csignal>
#include <sys/resource.h>
#include <sys/stat.h>

#include "core/random_fill.hpp"
#include "cuda/device_memory_domain.hpp"
#include "cuda/staging_ring.hpp"
#include "transport/mate_channel.hpp"
#include "transport/peer_internal.hpp"
#include "support/fake_device.hpp"
#include "support/gossip_network.hpp"
#include "support/model_fixture.hpp"
#include "support/temp_dir.hpp"
#include "tensorhub/peer.hpp"

using namespace tensorhub;
using namespace tensorhub::testing;
using namespace std::chrono_literals;

namespace {

SwarmKey swarm_key() { return test_swarm_key(0x21); }

std::unique_ptr<Peer> start_peer(std::uint64_t key, const PublicKey& publisher, std::vector<std::string> seeds,
                                 const std::function<void(PeerOptions&)>& adjust = {}) {
  PeerOptions o;
  o.listen = "127.0.0.1:0";
  o.data_listen = "127.0.0.1:0";
  o.seeds = std::move(seeds);
  o.trusted_publishers = {publisher};
  o.shard_size = 256u << 10;
  o.block_size = 64u << 10;
  o.host = "h" + std::to_string(key);
  if (adjust) adjust(o);
  auto peer = Peer::start(o, GossipNetwork::identity_for(key), swarm_key());
  REQUIRE_MESSAGE(peer.is_ok(), peer.status().to_string());
  return std::move(*peer);
}

// `peer` learns the head, fetches v1 of "policy" into memory it allocates,
// and finds `image`.
void fetch_v1_and_compare(Peer& peer, const std::vector<std::byte>& image) {
  REQUIRE(peer.wait_for_head("policy", 0, 10s).is_ok());
  auto fetched = peer.fetch("policy", 1);
  REQUIRE(fetched.is_ok());
  REQUIRE_MESSAGE(fetched->wait(20s).is_ok(), fetched->wait(0ms).to_string());
  CHECK(std::equal(fetched->bytes().begin(), fetched->bytes().end(), image.begin(), image.end()));
}

// A publisher (key `first`) and `workers` peers (keys first + 1, ...)
// seeded by it, all trusting it.
std::vector<std::unique_ptr<Peer>> publisher_and_workers(std::uint64_t first, std::size_t workers) {
  const PublicKey publisher_key = GossipNetwork::identity_for(first).public_key();
  std::vector<std::unique_ptr<Peer>> peers;
  peers.push_back(start_peer(first, publisher_key, {}));
  const std::string seed = peers[0]->gossip_address();
  for (std::size_t i = 1; i <= workers; ++i) peers.push_back(start_peer(first + i, publisher_key, {seed}));
  return peers;
}

// A publisher (key `key`) that published `image` as "policy" v1, and a
// worker (key `key` + 1) seeded by it that knows the head.
struct PublishedPair {
  std::unique_ptr<Peer> publisher, worker;
  std::optional<PublishHandle> published;
};
PublishedPair published_pair(std::uint64_t key, const std::vector<std::byte>& image,
                             const std::function<void(PeerOptions&)>& adjust_publisher = {}) {
  const PublicKey publisher_key = GossipNetwork::identity_for(key).public_key();
  PublishedPair p;
  p.publisher = start_peer(key, publisher_key, {}, adjust_publisher);
  p.worker = start_peer(key + 1, publisher_key, {p.publisher->gossip_address()});
  auto published = p.publisher->publish("policy", image, tensors_of(image));
  REQUIRE(published.is_ok());
  p.published.emplace(std::move(*published));
  REQUIRE(p.worker->wait_for_head("policy", 0, 10s).is_ok());
  return p;
}

// How many entries `dir` holds.
std::size_t entries(const std::filesystem::path& dir) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}

}  // namespace

TEST_CASE("peer: publish, discover, fetch and verify over loopback") {
  auto peers = publisher_and_workers(600, 2);
  Peer* publisher = peers[0].get();
  Peer* worker1 = peers[1].get();
  Peer* worker2 = peers[2].get();

  auto image = small_model(21, 3u << 20);
  const auto tensors = tensors_of(image);
  auto handle = publisher->publish("policy", image, tensors);
  REQUIRE_MESSAGE(handle.is_ok(), handle.status().to_string());
  CHECK(handle->info().version == 1);

  for (Peer* worker : {worker1, worker2}) {
    auto head = worker->wait_for_head("policy", 0, 10s);
    REQUIRE_MESSAGE(head.is_ok(), head.status().to_string());
    CHECK(head->version == 1);
    CHECK(head->id == handle->info().id);
  }
  auto f1 = worker1->fetch("policy", 0);
  REQUIRE_MESSAGE(f1.is_ok(), f1.status().to_string());
  std::vector<std::byte> destination(image.size());
  auto f2 = worker2->fetch("policy", 1, destination);
  REQUIRE(f2.is_ok());
  // The next shard is waited for, not polled: each wait returns with more
  // verified than it was given, until the fetch is done.
  std::uint32_t seen = 0;
  for (std::uint32_t step = 0; step <= f1->progress().shards_total; ++step) {
    const FetchProgressInfo p = f1->wait_progress(seen, 20s);
    if (p.done) break;
    REQUIRE(p.shards_verified > seen);
    seen = p.shards_verified;
  }
  CHECK(f1->wait_progress(seen, 0ms).done);
  REQUIRE_MESSAGE(f1->wait(20s).is_ok(), f1->wait(0ms).to_string());
  REQUIRE(f2->wait(20s).is_ok());
  CHECK(std::equal(f1->bytes().begin(), f1->bytes().end(), image.begin(), image.end()));
  CHECK(destination == image);
  CHECK(f1->progress().shards_verified == f1->progress().shards_total);

  // Both fetchers hold it now: the publisher can release after 2 replicas.
  REQUIRE(handle->wait_replicated(2, 10s).is_ok());
  handle->release();

  // A third worker fetches from the two, with the publisher's copy gone.
  auto worker3 = start_peer(603, GossipNetwork::identity_for(600).public_key(), {publisher->gossip_address()});
  REQUIRE(worker3->wait_for_head("policy", 0, 10s).is_ok());
  auto f3 = worker3->fetch("policy", 0);
  REQUIRE(f3.is_ok());
  REQUIRE(f3->wait(20s).is_ok());
  CHECK(std::equal(f3->bytes().begin(), f3->bytes().end(), image.begin(), image.end()));
}

TEST_CASE("peer: a manifest from an untrusted publisher is never believed") {
  const PublicKey trusted = GossipNetwork::identity_for(700).public_key();
  auto rogue = start_peer(701, GossipNetwork::identity_for(701).public_key(), {});  // trusts itself
  auto worker = start_peer(702, trusted, {rogue->gossip_address()});
  auto image = small_model(22, 1u << 20);
  const auto tensors = tensors_of(image);
  REQUIRE(rogue->publish("policy", image, tensors).is_ok());
  CHECK_FALSE(worker->wait_for_head("policy", 0, 3s).is_ok());
  auto f = worker->fetch("policy", 0);
  CHECK(f.status().code() == StatusCode::kUnavailable);
}

TEST_CASE("peer: the last holder of the head defers its release until another peer holds it") {
  const PublicKey publisher_key = GossipNetwork::identity_for(800).public_key();
  auto publisher = start_peer(800, publisher_key, {});
  const std::string seed = publisher->gossip_address();
  auto worker1 = start_peer(801, publisher_key, {seed});
  auto image = small_model(23, 2u << 20);
  const auto tensors = tensors_of(image);
  auto published = publisher->publish("policy", image, tensors);
  REQUIRE(published.is_ok());
  REQUIRE(worker1->wait_for_head("policy", 0, 10s).is_ok());
  auto f1 = worker1->fetch("policy", 1);
  REQUIRE(f1.is_ok());
  REQUIRE(f1->wait(20s).is_ok());

  // With one other holder, the publisher's release does not wait.
  REQUIRE(published->wait_replicated(1, 10s).is_ok());
  auto started = std::chrono::steady_clock::now();
  published->release();
  CHECK(std::chrono::steady_clock::now() - started < 5s);  // no deferral (the exact rule: test_peer_core.cpp)

  // Worker 1 is now the only holder of the head: its release waits.
  auto until = [](const std::function<bool()>& done, std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
    return done();
  };
  REQUIRE(until([&] { return worker1->replicas("policy", published->info().version).value_or(1) == 0; }, 10s));
  std::atomic<bool> released{false};
  f1->release_async([&] { released = true; });
  std::this_thread::sleep_for(500ms);
  CHECK_FALSE(released.load());

  // A late worker fetches from it; once it holds the version, worker 1 goes.
  auto worker2 = start_peer(802, publisher_key, {seed}, [](PeerOptions& o) { o.max_release_deferral = 500ms; });
  REQUIRE(worker2->wait_for_head("policy", 0, 10s).is_ok());
  auto f2 = worker2->fetch("policy", 1);
  REQUIRE(f2.is_ok());
  REQUIRE_MESSAGE(f2->wait(20s).is_ok(), f2->wait(0ms).to_string());
  CHECK(std::equal(f2->bytes().begin(), f2->bytes().end(), image.begin(), image.end()));
  CHECK(until([&] { return released.load(); }, 10s));

  // Worker 2 is the last holder now, with a deferral bounded at 500 ms.
  REQUIRE(until([&] { return worker2->replicas("policy", published->info().version).value_or(1) == 0; }, 10s));
  started = std::chrono::steady_clock::now();
  f2->release();
  const auto waited = std::chrono::steady_clock::now() - started;
  CHECK(waited >= 450ms);
  CHECK(waited < 3s);
}

TEST_CASE("peer: extra data lanes carry pieces, and the fetch verifies") {
  const Identity publisher_id = GossipNetwork::identity_for(620);
  auto publisher = start_peer(620, publisher_id.public_key(), {});
  auto worker = start_peer(621, publisher_id.public_key(), {publisher->gossip_address()},
                           [](PeerOptions& o) { o.data_lanes = 4; });
  auto image = small_model(23, 4u << 20);
  const auto tensors = tensors_of(image);
  auto handle = publisher->publish("policy", image, tensors);
  REQUIRE(handle.is_ok());
  REQUIRE(worker->wait_for_head("policy", 0, 10s).is_ok());
  auto f = worker->fetch("policy", 1);
  REQUIRE(f.is_ok());
  REQUIRE_MESSAGE(f->wait(20s).is_ok(), f->wait(0ms).to_string());
  CHECK(std::equal(f->bytes().begin(), f->bytes().end(), image.begin(), image.end()));

  // Every lane carried part of the version (requests spread by id), and the
  // holder sees the same four lanes from its side.
  auto lanes_of = [](const std::string& status_json) {
    auto status = nlohmann::json::parse(status_json);
    REQUIRE(status["data_links"].size() == 1);
    return status["data_links"][0]["lanes"];
  };
  const auto fetcher_lanes = lanes_of(worker->status_json());
  REQUIRE(fetcher_lanes.size() == 4);
  std::uint64_t received = 0;
  for (const auto& lane : fetcher_lanes) {
    CHECK(lane["bytes_received"].get<std::uint64_t>() > image.size() / 8);
    received += lane["bytes_received"].get<std::uint64_t>();
  }
  CHECK(received >= image.size());
  CHECK(lanes_of(publisher->status_json()).size() == 4);
}

TEST_CASE("peer: a data lane count out of range is refused at start") {
  PeerOptions o;
  o.listen = "127.0.0.1:0";
  o.data_lanes = 9;
  auto peer = Peer::start(o, GossipNetwork::identity_for(630), swarm_key());
  REQUIRE_FALSE(peer.is_ok());
  CHECK(peer.status().message().find("data lanes must be 1 to 8") != std::string::npos);
}

TEST_CASE("peer: a fetch of a version this peer published is a copy, dropping either handle leaves the other whole") {
  const Identity publisher_id = GossipNetwork::identity_for(640);
  auto publisher = start_peer(640, publisher_id.public_key(), {});
  auto image = small_model(24, 1u << 20);
  const auto tensors = tensors_of(image);
  auto published = publisher->publish("policy", image, tensors);
  REQUIRE(published.is_ok());
  std::vector<std::byte> destination(image.size());
  auto copy = publisher->fetch("policy", kLatestVersion, destination);
  REQUIRE_MESSAGE(copy.is_ok(), copy.status().to_string());
  REQUIRE(copy->wait(10s).is_ok());
  CHECK(destination == image);  // the caller's destination holds the bytes
  CHECK(copy->bytes().data() == destination.data());
  auto owned = publisher->fetch("policy", 1);  // into memory the peer allocates
  REQUIRE(owned.is_ok());
  REQUIRE(owned->wait(10s).is_ok());
  CHECK(std::equal(owned->bytes().begin(), owned->bytes().end(), image.begin(), image.end()));
  // Assigning over a handle releases what it held; the published version goes on being served.
  *copy = std::move(*owned);
  copy->release();
  auto worker = start_peer(641, publisher_id.public_key(), {publisher->gossip_address()});
  fetch_v1_and_compare(*worker, image);
  CHECK(published->bytes_served() >= image.size());
}

TEST_CASE("peer: a subscriber's callback may release a handle and fetch, without deadlock") {
  const Identity publisher_id = GossipNetwork::identity_for(650);
  auto publisher = start_peer(650, publisher_id.public_key(), {});
  auto worker = start_peer(651, publisher_id.public_key(), {publisher->gossip_address()});
  auto image = small_model(25, 1u << 20);
  const auto tensors = tensors_of(image);
  auto v1 = publisher->publish("policy", image, tensors);
  REQUIRE(v1.is_ok());
  REQUIRE(worker->wait_for_head("policy", 0, 10s).is_ok());
  auto held = worker->fetch("policy", 1);
  REQUIRE(held.is_ok());
  REQUIRE(held->wait(20s).is_ok());
  std::mutex mutex;
  std::condition_variable switched;
  std::optional<FetchHandle> next;
  bool done = false;
  worker->subscribe("policy", [&](const VersionInfo& head) {
    if (head.version < 2) return;
    held->release();  // blocks until the memory is free: fine off the I/O thread
    auto f = worker->fetch("policy", head.version);
    std::lock_guard lock(mutex);
    if (f.is_ok()) next.emplace(std::move(*f));
    done = true;
    switched.notify_all();
  });
  image[image.size() - 10] ^= std::byte{1};
  auto v2 = publisher->publish("policy", image, tensors);
  REQUIRE(v2.is_ok());
  std::unique_lock lock(mutex);
  REQUIRE(switched.wait_for(lock, 20s, [&] { return done; }));
  REQUIRE(next.has_value());
  REQUIRE(next->wait(20s).is_ok());
  CHECK(std::equal(next->bytes().begin(), next->bytes().end(), image.begin(), image.end()));
}

TEST_CASE("peer: publish from regions and fetch into regions over TCP, blocks gathered and scattered across them") {
  const Identity publisher_id = GossipNetwork::identity_for(660);
  auto publisher = start_peer(660, publisher_id.public_key(), {});
  auto worker = start_peer(661, publisher_id.public_key(), {publisher->gossip_address()});
  auto image = small_model(26, 2u << 20);
  const auto tensors = tensors_of(image);
  // Regions of 1 byte to 100 KiB, each its own buffer, on both sides, cut differently.
  auto cut = [&](std::uint64_t seed) {
    core::SplitMix64 rng(seed);
    std::vector<std::vector<std::byte>> buffers;
    for (std::size_t at = 0; at < image.size();) {
      const std::size_t n = std::min(image.size() - at, 1 + static_cast<std::size_t>(rng.below(100u << 10)));
      buffers.emplace_back(image.begin() + static_cast<std::ptrdiff_t>(at), image.begin() + static_cast<std::ptrdiff_t>(at + n));
      at += n;
    }
    return buffers;
  };
  auto source = cut(1);
  std::vector<ConstRegion> published;
  for (const auto& b : source) published.emplace_back(b.data(), b.size());
  auto handle = publisher->publish("policy", std::span<const ConstRegion>(published), tensors);
  REQUIRE_MESSAGE(handle.is_ok(), handle.status().to_string());
  REQUIRE(worker->wait_for_head("policy", 0, 10s).is_ok());
  std::vector<std::vector<std::byte>> into;
  for (const auto& b : cut(2)) into.emplace_back(b.size());
  std::vector<MutableRegion> regions;
  for (auto& b : into) regions.emplace_back(b.data(), b.size());
  auto f = worker->fetch("policy", 1, std::span<const MutableRegion>(regions));
  REQUIRE(f.is_ok());
  REQUIRE_MESSAGE(f->wait(20s).is_ok(), f->wait(0ms).to_string());
  std::vector<std::byte> got;
  for (const auto& b : into) got.insert(got.end(), b.begin(), b.end());
  CHECK(got == image);
  CHECK(f->bytes().empty());  // several regions: no single span
  CHECK(f->regions().size() == regions.size());
  // An empty region is refused with a reason.
  std::vector<MutableRegion> bad = {MutableRegion(into[0].data(), 0)};
  CHECK(worker->fetch("policy", 1, std::span<const MutableRegion>(bad)).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("peer: a peer whose seeds never answer says so, instead of only that no head appeared") {
  const PublicKey publisher = GossipNetwork::identity_for(640).public_key();
  // A peer under another swarm key: it answers nothing this swarm sends.
  PeerOptions o;
  o.listen = "127.0.0.1:0";
  o.data_listen = "127.0.0.1:0";
  std::array<std::uint8_t, 32> other{};
  other.fill(0x77);
  auto foreign = Peer::start(o, GossipNetwork::identity_for(641), SwarmKey::from_bytes(other));
  REQUIRE(foreign.is_ok());
  auto lonely = start_peer(642, publisher, {(*foreign)->gossip_address()});
  auto head = lonely->wait_for_head("policy", 0, 1500ms);
  REQUIRE_FALSE(head.is_ok());
  CHECK(head.status().code() == StatusCode::kUnavailable);
  CHECK(head.status().message().find("no seed answered") != std::string::npos);
  CHECK(head.status().message().find((*foreign)->gossip_address()) != std::string::npos);
  auto fetched = lonely->fetch("policy", kLatestVersion);
  REQUIRE_FALSE(fetched.is_ok());
  CHECK(fetched.status().message().find("no seed answered") != std::string::npos);

  // Joined, the same wait is an ordinary timeout.
  auto seed = start_peer(643, publisher, {});
  auto member = start_peer(644, publisher, {seed->gossip_address()});
  auto none = member->wait_for_head("policy", 0, 1500ms);
  REQUIRE_FALSE(none.is_ok());
  CHECK(none.status().code() == StatusCode::kTimeout);
}

TEST_CASE("peer: secure mode: versions published with blake2b-256, and a fetcher that requires it refuses others") {
  const PublicKey publisher_key = GossipNetwork::identity_for(650).public_key();
  auto publisher = start_peer(650, publisher_key, {}, [](PeerOptions& o) { o.shard_hash = ShardHashAlgorithm::kBlake2b_256; });
  const std::string seed = publisher->gossip_address();
  const PublicKey fast_key = GossipNetwork::identity_for(652).public_key();
  auto strict = start_peer(651, publisher_key, {seed}, [&](PeerOptions& o) {
    o.require_secure_hash = true;
    o.trusted_publishers.push_back(fast_key);
  });

  auto image = small_model(23, 1u << 20);
  const auto tensors = tensors_of(image);
  auto secure = publisher->publish("policy", image, tensors);
  REQUIRE(secure.is_ok());
  CHECK(secure->manifest().body().shard_hash == ShardHashAlgorithm::kBlake2b_256);
  REQUIRE(strict->wait_for_head("policy", 0, 10s).is_ok());
  auto fetched = strict->fetch("policy", kLatestVersion);
  REQUIRE_MESSAGE(fetched.is_ok(), fetched.status().to_string());
  REQUIRE(fetched->wait(20s).is_ok());
  CHECK(std::equal(fetched->bytes().begin(), fetched->bytes().end(), image.begin(), image.end()));

  // A trusted publisher in the default mode: XXH3-128.
  auto fast = start_peer(652, fast_key, {seed});
  auto quick = fast->publish("critic", image, tensors);
  REQUIRE(quick.is_ok());
  CHECK(quick->manifest().body().shard_hash == ShardHashAlgorithm::kXxh3_128);
  REQUIRE(strict->wait_for_head("critic", 0, 10s).is_ok());
  auto refused = strict->fetch("critic", kLatestVersion);
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.status().code() == StatusCode::kPermissionDenied);
  CHECK(refused.status().message().find("xxh3-128") != std::string::npos);
}

TEST_CASE("peer: a restarted publisher learns the head from the swarm before it numbers a version") {
  const PublicKey trainer_key = GossipNetwork::identity_for(660).public_key();
  auto image = small_model(24, 1u << 20);
  const auto tensors = tensors_of(image);
  auto trainer = start_peer(660, trainer_key, {});
  auto worker = start_peer(661, trainer_key, {trainer->gossip_address()});
  {
    auto v1 = trainer->publish("policy", image, tensors);
    REQUIRE(v1.is_ok());
    REQUIRE(worker->wait_for_head("policy", 0, 10s).is_ok());
    auto copy = worker->fetch("policy", kLatestVersion);
    REQUIRE(copy.is_ok());
    REQUIRE(copy->wait(20s).is_ok());
    v1->release();
    trainer.reset();  // the trainer's daemon restarts: it remembers nothing
    auto restarted = start_peer(660, trainer_key, {worker->gossip_address()});
    auto v2 = restarted->publish("policy", image, tensors);
    REQUIRE_MESSAGE(v2.is_ok(), v2.status().to_string());
    CHECK(v2->info().version == 2);  // not 1 again: that would be two manifests for one number
    CHECK(v2->manifest().body().parent == copy->info().id);
    auto head = worker->wait_for_head("policy", 1, 10s);
    REQUIRE(head.is_ok());
    CHECK(head->version == 2);
  }
  // A publisher whose seeds never answer fails with the reason, not a guess.
  std::array<std::uint8_t, 32> other{};
  other.fill(0x55);
  PeerOptions o;
  o.listen = "127.0.0.1:0";
  o.data_listen = "127.0.0.1:0";
  auto foreign = Peer::start(o, GossipNetwork::identity_for(662), SwarmKey::from_bytes(other));
  REQUIRE(foreign.is_ok());
  // It waits publish_head_wait for the head, not longer.
  auto lonely = start_peer(663, GossipNetwork::identity_for(663).public_key(), {(*foreign)->gossip_address()},
                           [](PeerOptions& lo) { lo.publish_head_wait = 500ms; });
  const auto began = std::chrono::steady_clock::now();
  auto refused = lonely->publish("policy", image, tensors);
  const auto took = std::chrono::steady_clock::now() - began;
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.status().code() == StatusCode::kUnavailable);
  CHECK(refused.status().message().find("no seed answered") != std::string::npos);
  CHECK(took >= 450ms);
  CHECK(took < 5s);
}

TEST_CASE("peer: wait_for_head reports a version signed twice instead of waiting for it") {
  const PublicKey key_a = GossipNetwork::identity_for(670).public_key();
  const PublicKey key_b = GossipNetwork::identity_for(671).public_key();
  auto trust_both = [&](PeerOptions& o) { o.trusted_publishers = {key_a, key_b}; };
  // Two trusted publishers that have not met each publish a v1.
  auto a = start_peer(670, key_a, {}, trust_both);
  auto b = start_peer(671, key_b, {}, trust_both);
  auto image_a = small_model(25, 1u << 20), image_b = small_model(26, 1u << 20);
  auto va = a->publish("policy", image_a, tensors_of(image_a));
  auto vb = b->publish("policy", image_b, tensors_of(image_b));
  REQUIRE(va.is_ok());
  REQUIRE(vb.is_ok());
  // A worker joins through both. It may believe the first manifest of v1
  // it hears of; once it holds both, it reports them.
  auto worker = start_peer(672, key_a, {a->gossip_address(), b->gossip_address()}, trust_both);
  Result<VersionInfo> head = Status::timeout("not asked");
  const auto deadline = std::chrono::steady_clock::now() + 15s;
  do {
    head = worker->wait_for_head("policy", 0, 1s);
    if (head.is_ok()) std::this_thread::sleep_for(50ms);
  } while (head.is_ok() && std::chrono::steady_clock::now() < deadline);
  REQUIRE_FALSE(head.is_ok());
  CHECK(head.status().code() == StatusCode::kVerifyFailed);
  CHECK(head.status().message().find("signed twice") != std::string::npos);
  auto fetched = worker->fetch("policy", 1);
  REQUIRE_FALSE(fetched.is_ok());
  CHECK(fetched.status().code() == StatusCode::kVerifyFailed);
}

TEST_CASE("peer: a release does not wait on a reader that stopped reading") {
  const PublicKey key = GossipNetwork::identity_for(680).public_key();
  auto publisher = start_peer(680, key, {}, [](PeerOptions& o) {
    o.super_seed = false;
    o.retain_head_replicas = 0;  // the release waits for no replica, only for its reads
    o.shard_size = 64u << 20;
  });
  // Requests of 16 MiB, 8 in flight: more than the sockets' buffers hold.
  auto reader = start_peer(681, key, {publisher->gossip_address()}, [](PeerOptions& o) { o.block_size = 16u << 20; });
  auto image = small_model(28, 256u << 20);
  const auto tensors = tensors_of(image);
  auto handle = publisher->publish("policy", image, tensors);
  REQUIRE(handle.is_ok());
  REQUIRE(reader->wait_for_head("policy", 0, 10s).is_ok());
  auto fetch = reader->fetch("policy", kLatestVersion);
  REQUIRE(fetch.is_ok());
  // The reader's I/O thread stops once bytes flow: it reads nothing more,
  // as a process stopped or stuck would, and the publisher's writes to it
  // fill the socket and wait.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (handle->bytes_served() == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  REQUIRE(handle->bytes_served() > 0);
  std::promise<void> resume;
  std::shared_future<void> gate = resume.get_future().share();
  peer::post_to_io_thread(*reader, [gate] { gate.wait(); });
  while (handle->bytes_served() < image.size() && std::chrono::steady_clock::now() < deadline) {
    const std::uint64_t before = handle->bytes_served();
    std::this_thread::sleep_for(100ms);
    if (handle->bytes_served() == before) break;  // the writes wait on the reader
  }
  REQUIRE(handle->bytes_served() < image.size());
  const auto began = std::chrono::steady_clock::now();
  handle->release();
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  MESSAGE("release took " << waited << " s with a stalled reader");
  // The 1 s grace, then its connection is closed. (Without the grace this
  // reader, silent on gossip too, is declared dead in about 3 s; a member
  // that stops reading one connection and gossips on would hold the
  // release until TCP gives up, 30 s.)
  CHECK(waited < 2.0);
  resume.set_value();
}

TEST_CASE("peer: a requester that asks for every block 20 times takes at most twice the version, and others are served") {
  // A broken or hostile requester repeats each request: without the
  // holder's limits it would be sent every block 20 times, taking the
  // holder's upload from everyone else. It gets a block once while it is
  // queued, and at most twice the version in all; an honest requester
  // fetching at the same time completes.
  const PublicKey key = GossipNetwork::identity_for(690).public_key();
  auto publisher = start_peer(690, key, {}, [](PeerOptions& o) { o.super_seed = false; });
  PeerOptions o;
  o.listen = "127.0.0.1:0";
  o.data_listen = "127.0.0.1:0";
  o.seeds = {publisher->gossip_address()};
  o.trusted_publishers = {key};
  o.shard_size = 256u << 10;
  o.block_size = 64u << 10;
  o.host = "greedy";
  peer::InternalOptions internal;
  internal.repeat_requests = 20;
  internal.serve_fetched = false;  // it takes, never gives: the honest one has the publisher only
  auto greedy = peer::start_peer(o, internal, GossipNetwork::identity_for(691), swarm_key());
  REQUIRE_MESSAGE(greedy.is_ok(), greedy.status().to_string());
  auto honest = start_peer(692, key, {publisher->gossip_address()});
  auto image = small_model(29, 16u << 20);
  const auto tensors = tensors_of(image);
  auto handle = publisher->publish("policy", image, tensors);
  REQUIRE(handle.is_ok());
  REQUIRE((*greedy)->wait_for_head("policy", 0, 10s).is_ok());
  REQUIRE(honest->wait_for_head("policy", 0, 10s).is_ok());
  auto taken = (*greedy)->fetch("policy", kLatestVersion);
  auto fetched = honest->fetch("policy", kLatestVersion);
  REQUIRE(taken.is_ok());
  REQUIRE(fetched.is_ok());
  const Status done = fetched->wait(60s);
  REQUIRE_MESSAGE(done.is_ok(), done.to_string());
  CHECK(std::equal(fetched->bytes().begin(), fetched->bytes().end(), image.begin(), image.end()));
  const Status greedy_done = taken->wait(30s);
  const auto status = nlohmann::json::parse(publisher->status_json());
  const auto& v = status["versions"][0];
  const auto served = v["bytes_served"].get<std::uint64_t>();
  MESSAGE("served " << served << " bytes of a " << image.size() << "-byte image to one honest and one greedy "
                    << "requester, refused " << v["requests_refused"].get<std::uint64_t>()
                    << " requests; the greedy fetch: " << greedy_done.to_string());
  CHECK(v["requests_refused"].get<std::uint64_t>() > 0);
  // The honest requester's copy (and its end game), and at most twice the
  // version and 16 MiB to the greedy one; without the limits, 21 copies.
  CHECK(served <= 2 * image.size() + (2 * image.size() + (16u << 20)));
}

TEST_CASE("peer: a worker that fetches a version again after each release is served every time") {
  // The twice-the-version allowance counts one fetch: a worker that
  // releases the version and fetches it again (a rollout that reloads, a
  // restarted engine) starts afresh. The publisher is its only source.
  const PublicKey key = GossipNetwork::identity_for(695).public_key();
  auto publisher = start_peer(695, key, {}, [](PeerOptions& o) { o.super_seed = false; });
  auto worker = start_peer(696, key, {publisher->gossip_address()}, [](PeerOptions& o) { o.retain_head_replicas = 0; });
  auto image = small_model(30, 16u << 20);  // four fetches: more than twice it and 16 MiB
  const auto tensors = tensors_of(image);
  auto handle = publisher->publish("policy", image, tensors);
  REQUIRE(handle.is_ok());
  REQUIRE(worker->wait_for_head("policy", 0, 10s).is_ok());
  for (int round = 0; round < 4; ++round) {
    CAPTURE(round);
    auto fetched = worker->fetch("policy", 1);
    REQUIRE(fetched.is_ok());
    const Status done = fetched->wait(20s);
    REQUIRE_MESSAGE(done.is_ok(), done.to_string());
    CHECK(std::equal(fetched->bytes().begin(), fetched->bytes().end(), image.begin(), image.end()));
    fetched->release();
  }
  CHECK(handle->bytes_served() >= 4 * image.size());
}

TEST_CASE("peer: with a member list, a swarm-key holder off it gets no byte from the members") {
  const PublicKey publisher_key = GossipNetwork::identity_for(1000).public_key();
  const std::vector<PublicKey> members = {publisher_key, GossipNetwork::identity_for(1001).public_key(),
                                          GossipNetwork::identity_for(1002).public_key()};
  auto listed = [&](PeerOptions& o) { o.members = members; };
  auto publisher = start_peer(1000, publisher_key, {}, listed);
  const std::string seed = publisher->gossip_address();
  auto worker = start_peer(1001, publisher_key, {seed}, listed);
  // A member without a list of its own introduces the outsider to everyone.
  auto open = start_peer(1002, publisher_key, {seed});
  auto outsider = start_peer(1003, publisher_key, {open->gossip_address()});

  auto image = small_model(31, 2u << 20);
  const auto tensors = tensors_of(image);
  auto published = publisher->publish("policy", image, tensors);
  REQUIRE_MESSAGE(published.is_ok(), published.status().to_string());
  REQUIRE(worker->wait_for_head("policy", 0, 10s).is_ok());
  auto fetched = worker->fetch("policy", 1);
  REQUIRE(fetched.is_ok());
  REQUIRE(fetched->wait(20s).is_ok());

  // The outsider hears of the head and of the holders (through the open
  // member) but every holder refuses its connections.
  REQUIRE(outsider->wait_for_head("policy", 0, 10s).is_ok());
  auto refused = outsider->fetch("policy", 1);
  REQUIRE(refused.is_ok());
  CHECK_FALSE(refused->wait(5s).is_ok());
  CHECK(refused->progress().bytes_verified == 0);
  CHECK(publisher->status_json().find("\"not_admitted\":0") == std::string::npos);

  // A list must name the peer that holds it.
  const std::vector<PublicKey> without_self = {GossipNetwork::identity_for(1001).public_key()};
  CHECK(publisher->set_members(without_self).code() == StatusCode::kInvalidArgument);
  PeerOptions o;
  o.listen = "127.0.0.1:0";
  o.members = without_self;
  CHECK(Peer::start(o, GossipNetwork::identity_for(1004), swarm_key()).status().code() == StatusCode::kInvalidArgument);

  // Taken off the publisher's list, the worker is forgotten and cut off there.
  REQUIRE(publisher->set_members({publisher_key, GossipNetwork::identity_for(1002).public_key()}).is_ok());
  CHECK(publisher->status_json().find(GossipNetwork::identity_for(1001).public_key().hex()) == std::string::npos);
}

namespace {

std::uint64_t landings(Peer& peer, const char* what) {
  return nlohmann::json::parse(peer.status_json())["landings"][what].get<std::uint64_t>();
}

}  // namespace

TEST_CASE("peer: a fetch into GPU memory over TCP lands through the staging ring, verifies on the device, and serves onwards") {
  // GPU memory is the fake device's (host memory posing as device memory,
  // copies that run when the peer polls their tickets): the engine's path
  // is the one a real GPU takes.
  FakeDevice device(2);
  device.complete_on_query(true);
  std::unique_ptr<cuda::StagingRing> ring;
  REQUIRE(cuda::StagingRing::create(device, {.slot_bytes = 64u << 10, .slots = 8}, ring));
  const cuda::DeviceMemoryDomain gpu(device, ring.get());

  auto peers = publisher_and_workers(660, 3);
  Peer* publisher = peers[0].get();
  Peer* worker = peers[1].get();
  Peer* later = peers[2].get();
  Peer* third = peers[3].get();

  auto image = small_model(66, 3u << 20);
  auto handle = publisher->publish("policy", image, tensors_of(image));
  REQUIRE_MESSAGE(handle.is_ok(), handle.status().to_string());
  REQUIRE(worker->wait_for_head("policy", 0, 10s).is_ok());
  // Regions of odd sizes, so blocks span them.
  DeviceRegions memory(device, {image.size() / 3 + 7, 1, image.size() - image.size() / 3 - 8});
  auto fetched = peer::fetch_into(*worker, "policy", 1, memory.regions(), gpu);
  REQUIRE_MESSAGE(fetched.is_ok(), fetched.status().to_string());
  REQUIRE_MESSAGE(fetched->wait(30s).is_ok(), fetched->wait(0ms).to_string());
  CHECK(memory.bytes() == image);
  const std::uint64_t blocks = (image.size() + (64u << 10) - 1) / (64u << 10);
  CHECK(landings(*worker, "staged") + landings(*worker, "through_host_buffer") >= blocks);
  CHECK(landings(*worker, "staged") > 0);
  CHECK(device.hashes() >= (image.size() + (256u << 10) - 1) / (256u << 10));  // every shard on the device
  CHECK(device.misplaced_copies() == 0);
  CHECK(device.peak_pinned_bytes() == 8 * (64u << 10));  // the ring is the only host memory it pinned
  const auto status = nlohmann::json::parse(worker->status_json());
  CHECK(status["versions"][0]["memory"] == "fake");

  // The publisher lets go (the worker holds it now): a later fetcher is
  // served from the worker's GPU memory: its first pieces read back one by
  // one, then from a host mirror read back once.
  handle->release();
  REQUIRE(later->wait_for_head("policy", 0, 10s).is_ok());
  auto copy = later->fetch("policy", 1);
  REQUIRE(copy.is_ok());
  REQUIRE_MESSAGE(copy->wait(30s).is_ok(), copy->wait(0ms).to_string());
  CHECK(std::equal(copy->bytes().begin(), copy->bytes().end(), image.begin(), image.end()));
  const std::uint64_t read_back = device.bytes_to_host();
  CHECK(read_back >= image.size());  // the mirror
  // A third fetcher (the later one serves too) costs the GPU no more reads
  // than proofs of possession: pieces come from the mirror.
  REQUIRE(third->wait_for_head("policy", 0, 10s).is_ok());
  auto again = third->fetch("policy", 1);
  REQUIRE(again.is_ok());
  REQUIRE_MESSAGE(again->wait(30s).is_ok(), again->wait(0ms).to_string());
  CHECK(std::equal(again->bytes().begin(), again->bytes().end(), image.begin(), image.end()));
  MESSAGE("read back from the GPU: " << read_back << " bytes for the second fetcher, "
                                     << device.bytes_to_host() - read_back << " for the third");
  CHECK(device.bytes_to_host() - read_back < image.size() / 8);
  // The mirror is pinned memory of the version's size, freed with the version.
  CHECK(device.pinned_bytes() == 8 * (64u << 10) + image.size());
  fetched->release();
  CHECK(device.pinned_bytes() == 8 * (64u << 10));
}

TEST_CASE("peer: a GPU fetch whose ring is too small lands the rest through host buffers, and still verifies") {
  FakeDevice device(1);  // copies run only when a ticket is asked about
  device.complete_on_query(true);
  std::unique_ptr<cuda::StagingRing> ring;
  REQUIRE(cuda::StagingRing::create(device, {.slot_bytes = 64u << 10, .slots = 1}, ring));
  const cuda::DeviceMemoryDomain gpu(device, ring.get());
  const Identity publisher_id = GossipNetwork::identity_for(670);
  auto publisher = start_peer(670, publisher_id.public_key(), {});
  auto worker = start_peer(671, publisher_id.public_key(), {publisher->gossip_address()}, [](PeerOptions& o) {
    o.data_lanes = 4;                 // payloads arrive four at a time
    o.mirror_gpu_versions = false;    // and are served from a copy each
  });
  auto image = small_model(67, 2u << 20);
  auto handle = publisher->publish("policy", image, tensors_of(image));
  REQUIRE(handle.is_ok());
  REQUIRE(worker->wait_for_head("policy", 0, 10s).is_ok());
  DeviceRegions memory(device, {image.size()});
  auto fetched = peer::fetch_into(*worker, "policy", 1, memory.regions(), gpu);
  REQUIRE(fetched.is_ok());
  REQUIRE_MESSAGE(fetched->wait(30s).is_ok(), fetched->wait(0ms).to_string());
  CHECK(memory.bytes() == image);
  MESSAGE("staged " << landings(*worker, "staged") << ", through host buffers "
                    << landings(*worker, "through_host_buffer"));
  CHECK(landings(*worker, "staged") > 0);
  CHECK(landings(*worker, "in_flight") == 0);
  // Without a mirror, a later fetcher's pieces are each read back.
  REQUIRE(handle->wait_replicated(1, 10s).is_ok());
  handle->release();
  auto later = start_peer(672, publisher_id.public_key(), {publisher->gossip_address()});
  REQUIRE(later->wait_for_head("policy", 0, 10s).is_ok());
  const std::uint64_t before = device.bytes_to_host();
  auto copy = later->fetch("policy", 1);
  REQUIRE(copy.is_ok());
  REQUIRE_MESSAGE(copy->wait(30s).is_ok(), copy->wait(0ms).to_string());
  CHECK(std::equal(copy->bytes().begin(), copy->bytes().end(), image.begin(), image.end()));
  CHECK(device.bytes_to_host() - before >= image.size());
  // Pieces went out through the ring's one slot while it was free, the
  // others as copies.
  MESSAGE("served through the ring: " << landings(*worker, "served_staged") << " pieces");
  CHECK(landings(*worker, "served_staged") > 0);
  // Without a destination, a GPU fetch is refused: the host cannot allocate there.
  auto none = peer::fetch_into(*worker, "policy", 1, {}, gpu);
  CHECK(none.status().code() == StatusCode::kInvalidArgument);
  // Through the public API a GPU is named by UUID; this machine has none.
  const MutableRegion some[] = {memory.regions()[0]};
  auto bad = worker->fetch("policy", 1, some, MemoryOptions{"cuda:0"});
  CHECK(bad.status().code() == StatusCode::kInvalidArgument);
  CHECK(bad.status().message().find("not a GPU UUID") != std::string::npos);
  CHECK(worker->fetch("policy", 1, {}, MemoryOptions{"GPU-8b2c3a10-1f2e-4d3c-9a8b-7c6d5e4f3a2b"}).status().code() ==
        StatusCode::kInvalidArgument);
  auto absent = worker->fetch("policy", 1, some, MemoryOptions{"GPU-8b2c3a10-1f2e-4d3c-9a8b-7c6d5e4f3a2b"});
  const StatusCode code = absent.status().code();
  CHECK((code == StatusCode::kUnavailable || code == StatusCode::kNotFound));
  MESSAGE("a GPU fetch on this machine: " << absent.status().to_string());
  // The handle's destructor lets go at once, before the memory is freed.
}

TEST_CASE("peer: a version published from GPU memory is hashed on the GPU and served from a host mirror") {
  FakeDevice device(2);
  const cuda::DeviceMemoryDomain gpu(device);
  auto peers = publisher_and_workers(680, 2);
  Peer* trainer = peers[0].get();
  auto image = small_model(68, 3u << 20);
  DeviceRegions weights(device, {image.size() / 2 + 3, image.size() - image.size() / 2 - 3});
  weights.fill_from(image);
  std::vector<ConstRegion> parts(weights.regions().begin(), weights.regions().end());
  auto handle = peer::publish_from(*trainer, "policy", parts, tensors_of(image), gpu);
  REQUIRE_MESSAGE(handle.is_ok(), handle.status().to_string());
  CHECK(device.hashes() == (image.size() + (256u << 10) - 1) / (256u << 10));  // the manifest, on the GPU
  for (std::size_t w = 1; w <= 2; ++w) {
    REQUIRE(peers[w]->wait_for_head("policy", 0, 10s).is_ok());
    auto fetched = peers[w]->fetch("policy", 1);
    REQUIRE(fetched.is_ok());
    REQUIRE_MESSAGE(fetched->wait(30s).is_ok(), fetched->wait(0ms).to_string());
    CHECK(std::equal(fetched->bytes().begin(), fetched->bytes().end(), image.begin(), image.end()));
  }
  // Read back from the GPU: the mirror once, the first pieces before it,
  // proofs; not a copy per fetcher.
  MESSAGE("read back from the GPU for two fetchers: " << device.bytes_to_host() << " bytes, version "
                                                      << image.size());
  CHECK(device.bytes_to_host() >= image.size());
  CHECK(device.bytes_to_host() < 2 * image.size());
  CHECK(device.misplaced_copies() == 0);
  // The public API names a GPU by UUID; a malformed one is refused first.
  auto bad = trainer->publish("policy", parts, tensors_of(image), MemoryOptions{"cuda:0"});
  CHECK(bad.status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("peer: a GPU copy that fails costs its block a second fetch, and the version still completes") {
  FakeDevice device(1);
  device.complete_on_query(true);
  device.fail_copy(2);  // the third payload's copy to the GPU fails
  std::unique_ptr<cuda::StagingRing> ring;
  REQUIRE(cuda::StagingRing::create(device, {.slot_bytes = 64u << 10, .slots = 8}, ring));
  const cuda::DeviceMemoryDomain gpu(device, ring.get());
  auto peers = publisher_and_workers(690, 1);
  auto image = small_model(69, 1u << 20);
  auto handle = peers[0]->publish("policy", image, tensors_of(image));
  REQUIRE(handle.is_ok());
  REQUIRE(peers[1]->wait_for_head("policy", 0, 10s).is_ok());
  DeviceRegions memory(device, {image.size()});
  auto fetched = peer::fetch_into(*peers[1], "policy", 1, memory.regions(), gpu);
  REQUIRE(fetched.is_ok());
  REQUIRE_MESSAGE(fetched->wait(30s).is_ok(), fetched->wait(0ms).to_string());
  CHECK(memory.bytes() == image);
}

namespace {

nlohmann::json host_mates(Peer& peer) { return nlohmann::json::parse(peer.status_json())["host_mates"]; }

}  // namespace

TEST_CASE("peer: a fetch into GPU memory copies the version from a host mate's GPU, verifies it, and needs no network") {
  // The peers share one fake device, as processes share a GPU (or a host's
  // GPUs); its IPC handles name its allocations. Each peer has its own ring
  // and domain, as each process would.
  FakeDevice device(2);
  device.complete_on_query(true);
  struct Gpu {
    std::unique_ptr<cuda::StagingRing> ring;
    std::unique_ptr<cuda::DeviceMemoryDomain> domain;
  };
  std::vector<Gpu> gpus(4);
  for (Gpu& g : gpus) {
    REQUIRE(cuda::StagingRing::create(device, {.slot_bytes = 64u << 10, .slots = 8}, g.ring));
    g.domain = std::make_unique<cuda::DeviceMemoryDomain>(device, g.ring.get());
  }
  const PublicKey publisher = GossipNetwork::identity_for(900).public_key();
  auto on = [](const char* host) { return [host](PeerOptions& o) { o.host = host; }; };
  auto trainer = start_peer(900, publisher, {}, on("node1"));
  const std::string seed = trainer->gossip_address();
  auto mate = start_peer(901, publisher, {seed}, on("node1"));
  auto stranger = start_peer(902, publisher, {seed}, on("node2"));
  auto refused = start_peer(903, publisher, {seed}, on("node1"));
  auto image = small_model(90, 2u << 20);
  DeviceRegions weights(device, {image.size() / 3, image.size() - image.size() / 3});
  weights.fill_from(image);
  std::vector<ConstRegion> parts(weights.regions().begin(), weights.regions().end());
  auto published = peer::publish_from(*trainer, "policy", parts, tensors_of(image), *gpus[0].domain);
  REQUIRE_MESSAGE(published.is_ok(), published.status().to_string());
  for (Peer* p : {mate.get(), stranger.get(), refused.get()}) REQUIRE(p->wait_for_head("policy", 0, 10s).is_ok());
  // Gossip must have carried the trainer's holding before a mate is seen.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (mate->replicas("policy", published->info().version).value_or(0) == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }

  // A mate on node1: every shard copied over the local channel and verified.
  DeviceRegions into(device, {image.size() / 2 + 5, image.size() - image.size() / 2 - 5});
  auto fetched = peer::fetch_into(*mate, "policy", 1, into.regions(), *gpus[1].domain);
  REQUIRE(fetched.is_ok());
  REQUIRE_MESSAGE(fetched->wait(30s).is_ok(), fetched->wait(0ms).to_string());
  CHECK(into.bytes() == image);
  const auto manifest_shards = published->manifest().shard_count();
  CHECK(host_mates(*mate)["shards_copied"] == manifest_shards);
  CHECK(host_mates(*mate)["bytes_copied"] == image.size());
  CHECK(landings(*mate, "staged") == 0);  // nothing came over the network
  CHECK(host_mates(*trainer)["versions_shared"] == 1);
  CHECK(device.ipc_opened() == 2);  // one per region of the trainer's
  CHECK(device.ipc_open_now() == 0);  // closed once copied

  // Another host: the swarm, over TCP.
  DeviceRegions far(device, {image.size()});
  auto over_tcp = peer::fetch_into(*stranger, "policy", 1, far.regions(), *gpus[2].domain);
  REQUIRE(over_tcp.is_ok());
  REQUIRE_MESSAGE(over_tcp->wait(30s).is_ok(), over_tcp->wait(0ms).to_string());
  CHECK(far.bytes() == image);
  CHECK(host_mates(*stranger)["shards_copied"] == 0);
  CHECK(landings(*stranger, "staged") > 0);

  // A mate whose IPC handles do not open (as across hosts with one label):
  // the shards come from the swarm instead, and the fetch completes.
  device.refuse_ipc();
  DeviceRegions fallback(device, {image.size()});
  auto fell_back = peer::fetch_into(*refused, "policy", 1, fallback.regions(), *gpus[3].domain);
  REQUIRE(fell_back.is_ok());
  REQUIRE_MESSAGE(fell_back->wait(30s).is_ok(), fell_back->wait(0ms).to_string());
  CHECK(fallback.bytes() == image);
  CHECK(host_mates(*refused)["shards_copied"] == 0);
  CHECK(landings(*refused, "staged") > 0);
  CHECK(device.misplaced_copies() == 0);
}

TEST_CASE("peer: the mate channel refuses what it cannot share, and says why") {
  const PublicKey publisher = GossipNetwork::identity_for(910).public_key();
  auto holder = start_peer(910, publisher, {}, [](PeerOptions& o) { o.host = "node1"; });
  const auto status = nlohmann::json::parse(holder->status_json());
  REQUIRE(status["host_mates"]["channel"] == true);
  const std::string data_addr = status["self"]["data_addr"];
  auto image = small_model(91, 1u << 20);
  auto published = holder->publish("policy", image, tensors_of(image));
  REQUIRE(published.is_ok());
  std::vector<peer::SharedRange> ranges;
  int connection = -1;
  // Host memory is not shared with other processes.
  Status s = peer::ask_mate(holder->id(), data_addr, published->info().id, image.size(), 2000, ranges, connection);
  CHECK(s.code() == StatusCode::kUnavailable);
  CHECK(s.message().find("refused") != std::string::npos);
  CHECK(s.message().find("not shared") != std::string::npos);
  // A version it does not hold.
  ManifestId other = published->info().id;
  other.bytes[0] ^= 1;
  s = peer::ask_mate(holder->id(), data_addr, other, image.size(), 2000, ranges, connection);
  CHECK(s.code() == StatusCode::kUnavailable);
  CHECK(s.message().find("does not hold that version") != std::string::npos);
  // Nobody answers under another address.
  s = peer::ask_mate(holder->id(), "127.0.0.1:1", other, image.size(), 2000, ranges, connection);
  CHECK(s.code() == StatusCode::kUnavailable);
  CHECK(host_mates(*holder)["versions_shared"] == 0);
}

TEST_CASE("peer: a fetch into a file writes it through host buffers, puts it in place once verified, and serves it") {
  const Identity publisher_id = GossipNetwork::identity_for(690);
  auto image = small_model(69, 2u << 20);
  auto pair = published_pair(690, image);
  auto& publisher = pair.publisher;
  auto& worker = pair.worker;
  auto& published = pair.published;
  TempDir dir;
  const std::string path = dir.file("policy.bin");
  auto entries = [&] { return ::entries(dir.path()); };
  auto contents = [](const std::string& file) {
    std::ifstream in(file, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return std::vector<std::byte>(reinterpret_cast<const std::byte*>(bytes.data()),
                                  reinterpret_cast<const std::byte*>(bytes.data()) + bytes.size());
  };

  auto fetched = worker->fetch_to_file("policy", kLatestVersion, path);
  REQUIRE_MESSAGE(fetched.is_ok(), fetched.status().to_string());
  CHECK_FALSE(std::filesystem::exists(path));  // only wait() puts it in place
  REQUIRE_MESSAGE(fetched->wait(20s).is_ok(), fetched->wait(0ms).to_string());
  CHECK(contents(path) == image);
  CHECK(entries() == 1);  // the temporary file became `path`
  CHECK(std::equal(fetched->bytes().begin(), fetched->bytes().end(), image.begin(), image.end()));
  // Every payload reached the file through a host buffer and pwrite.
  CHECK(landings(*worker, "through_host_buffer") >= image.size() / (64u << 10));
  CHECK(landings(*worker, "staged") == 0);

  // The worker serves the version from its file to a later fetcher.
  REQUIRE(published->wait_replicated(1, 10s).is_ok());
  published->release();
  auto later = start_peer(692, publisher_id.public_key(), {publisher->gossip_address()});
  fetch_v1_and_compare(*later, image);

  // A version held here already is copied into a second file.
  const std::string second = dir.file("copy.bin");
  {
    auto copy = worker->fetch_to_file("policy", 1, second);
    REQUIRE(copy.is_ok());
    REQUIRE_MESSAGE(copy->wait(20s).is_ok(), copy->wait(0ms).to_string());
    CHECK(contents(second) == image);
  }

  // A handle dropped before its wait() leaves nothing behind.
  const std::string dropped = dir.file("dropped.bin");
  CHECK(later->fetch_to_file("policy", 1, dropped).is_ok());
  CHECK_FALSE(std::filesystem::exists(dropped));
  CHECK(entries() == 2);
  // So does one released before its wait(), while the handle lives on.
  {
    auto released = later->fetch_to_file("policy", 1, dropped);
    REQUIRE(released.is_ok());
    CHECK(entries() == 3);  // the temporary file
    released->release();
    CHECK(entries() == 2);
    CHECK(released->wait(5s).code() == StatusCode::kCancelled);
    CHECK_FALSE(std::filesystem::exists(dropped));
  }

  // Releasing the worker's handle keeps its file; fetches that cannot start
  // say why. (`later` holds a copy, so the release of the head need not
  // wait for one: max_release_deferral.)
  auto held_later = later->fetch("policy", 1);
  REQUIRE(held_later.is_ok());
  REQUIRE(held_later->wait(20s).is_ok());
  fetched->release();
  CHECK(contents(path) == image);
  CHECK_MESSAGE(fetched->wait(0ms).is_ok(), fetched->wait(0ms).to_string());  // it was put in place before
  CHECK(later->fetch_to_file("policy", 1, path, FileOptions{0644, /*overwrite=*/false}).status().code() ==
        StatusCode::kAlreadyExists);
  CHECK(later->fetch_to_file("policy", 1, dir.file("no/such/dir")).status().code() == StatusCode::kNotFound);
  CHECK(later->fetch_to_file("policy", 7, dir.file("v7")).status().code() == StatusCode::kNotFound);
  CHECK(entries() == 2);
}

TEST_CASE("peer: a fetch into a file that its file system refuses fails at once, naming why, and leaves nothing") {
  // RLIMIT_FSIZE makes pwrite past 1 MiB fail with EFBIG, as a full file
  // system fails with ENOSPC (tests/cli covers ENOSPC in a real tmpfs).
  auto image = small_model(70, 4u << 20);
  auto pair = published_pair(700, image, [](PeerOptions& o) { o.super_seed = false; });
  auto& publisher = pair.publisher;
  auto& worker = pair.worker;
  auto& published = pair.published;
  TempDir dir;
  const std::string path = dir.file("policy.bin");
  auto entries = [&] { return ::entries(dir.path()); };
  struct rlimit before {};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &before) == 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = before;
  small.rlim_cur = 1u << 20;
  Status failed;
  const auto started = std::chrono::steady_clock::now();
  {
    // The publisher's I/O thread waits until the limit is set: no block
    // comes before it, and the file is sized before it (ftruncate past the
    // limit would fail).
    std::promise<void> go;
    std::shared_future<void> gate = go.get_future().share();
    peer::post_to_io_thread(*publisher, [gate] { gate.wait(); });
    auto fetched = worker->fetch_to_file("policy", 1, path);
    const bool created = fetched.is_ok();
    if (created) REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
    go.set_value();
    REQUIRE(created);
    failed = fetched->wait(20s);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    MESSAGE("failed after " << seconds << " s: " << failed.to_string());
    CHECK(seconds < 2.0);
    // The temporary file is gone before the handle is released.
    CHECK(entries() == 0);
  }
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &before) == 0);
  std::signal(SIGXFSZ, old_handler);
  CHECK(failed.code() == StatusCode::kIoError);
  CHECK(failed.message().find("File too large") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(path));
  // The publisher sent about what the file took, not the version again and again.
  CHECK(published->bytes_served() < 3 * (1u << 20));
  // A retry at once, with room, succeeds.
  auto retried = worker->fetch_to_file("policy", 1, path);
  REQUIRE(retried.is_ok());
  REQUIRE_MESSAGE(retried->wait(20s).is_ok(), retried->wait(0ms).to_string());
  CHECK(std::filesystem::file_size(path) == image.size());
  CHECK(entries() == 1);
}

TEST_CASE("peer: an output path that is not a regular file is refused, and a long legal name works") {
  auto image = small_model(71, 1u << 20);
  auto pair = published_pair(702, image);
  auto& worker = pair.worker;
  TempDir dir;
  const std::string fifo = dir.file("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const std::string link = dir.file("link");
  const std::string target = dir.file("target");
  write_test_file(target, std::vector<std::byte>(10));
  std::filesystem::create_symlink(target, link);
  std::filesystem::create_directory(dir.file("subdir"));
  for (const std::string& refused : {fifo, link, dir.file("subdir"), std::string("/dev/null")}) {
    CAPTURE(refused);
    auto f = worker->fetch_to_file("policy", 1, refused);
    REQUIRE_FALSE(f.is_ok());
    CHECK(f.status().code() == StatusCode::kInvalidArgument);
    CHECK(f.status().message().find("refusing to replace") != std::string::npos);
  }
  CHECK(std::filesystem::is_symlink(link));
  CHECK(std::filesystem::is_fifo(fifo));
  CHECK(std::filesystem::file_size(target) == 10);
  // A read-only regular file is replaced, as mv replaces it.
  const std::string read_only = dir.file("read-only");
  write_test_file(read_only, std::vector<std::byte>(10));
  std::filesystem::permissions(read_only, std::filesystem::perms::owner_read);
  {
    auto f = worker->fetch_to_file("policy", 1, read_only);
    REQUIRE(f.is_ok());
    REQUIRE(f->wait(20s).is_ok());
  }
  CHECK(std::filesystem::file_size(read_only) == image.size());
  // 250 bytes: legal, though the temporary name's suffix would pass 255.
  const std::string long_name = dir.file(std::string(250, 'w'));
  {
    auto f = worker->fetch_to_file("policy", 1, long_name);
    REQUIRE_MESSAGE(f.is_ok(), f.status().to_string());
    REQUIRE_MESSAGE(f->wait(20s).is_ok(), f->wait(0ms).to_string());
  }
  CHECK(std::filesystem::file_size(long_name) == image.size());
}

TEST_CASE("peer: handles that outlive their Peer hold nothing, and their release returns at once") {
  auto image = small_model(72, 1u << 20);
  auto pair = published_pair(704, image);
  auto& published = pair.published;
  auto fetched = pair.worker->fetch("policy", 1);
  REQUIRE(fetched.is_ok());
  REQUIRE(fetched->wait(20s).is_ok());
  const auto started = std::chrono::steady_clock::now();
  pair.worker.reset();
  pair.publisher.reset();
  fetched->release();
  published->release();
  CHECK(published->wait_replicated(1, 1s).code() == StatusCode::kCancelled);
  CHECK(std::chrono::steady_clock::now() - started < 15s);
}

TEST_CASE("peer: a fetch whose only holder sends shards that fail verification names that holder") {
  const Identity publisher_id = GossipNetwork::identity_for(706);
  auto publisher = start_peer(706, publisher_id.public_key(), {});
  const std::string seed = publisher->gossip_address();
  PeerOptions liar_options;
  liar_options.listen = "127.0.0.1:0";
  liar_options.data_listen = "127.0.0.1:0";
  liar_options.seeds = {seed};
  liar_options.trusted_publishers = {publisher_id.public_key()};
  liar_options.shard_size = 256u << 10;
  liar_options.block_size = 64u << 10;
  liar_options.host = "h707";
  peer::InternalOptions corrupt;
  corrupt.corrupt_serving = true;
  auto liar = peer::start_peer(liar_options, corrupt, GossipNetwork::identity_for(707), swarm_key());
  REQUIRE(liar.is_ok());
  auto image = small_model(73, 1u << 20);
  {
    auto published = publisher->publish("policy", image, tensors_of(image));
    REQUIRE(published.is_ok());
    REQUIRE((*liar)->wait_for_head("policy", 0, 10s).is_ok());
    auto held = (*liar)->fetch("policy", 1);
    REQUIRE(held.is_ok());
    REQUIRE(held->wait(20s).is_ok());
    REQUIRE(published->wait_replicated(1, 10s).is_ok());
    auto worker = start_peer(708, publisher_id.public_key(), {seed});
    REQUIRE(worker->wait_for_head("policy", 0, 10s).is_ok());
    published->release();  // the liar is the only holder now
    auto fetched = worker->fetch("policy", 1);
    REQUIRE(fetched.is_ok());
    const Status failed = fetched->wait(60s);
    MESSAGE(failed.to_string());
    CHECK(failed.code() == StatusCode::kUnavailable);
    CHECK(failed.message().find("holder " + (*liar)->id().short_hex() + " sent ") != std::string::npos);
    CHECK(failed.message().find("failed verification") != std::string::npos);
  }
}
