// Whole swarms of SwarmCores over the in-process network, moving real bytes
// and verifying real hashes: 50+ peers, crashes, corruption, late joiners,
// an early release, and a shard whose last holder dies.
#include <doctest/doctest.h>

#include "manifest/synthetic_model.hpp"
#include "support/model_fixture.hpp"
#include "support/swarm_network.hpp"

using namespace tensorhub;
using namespace tensorhub::testing;
using namespace std::chrono_literals;

namespace {

struct Version {
  Version(std::uint64_t data_bytes = 8u << 20, std::uint64_t shard_size = 256u << 10) {
    image = small_model(11, data_bytes);
    auto options = small_options();
    options.shard_size = shard_size;
    manifest.emplace(build_small(image, test_identity(), options));
  }
  std::vector<std::byte> image;
  std::optional<Manifest> manifest;
};

swarm::SwarmConfig config() {
  swarm::SwarmConfig c;
  c.fetch.block_size = 64u << 10;
  c.fetch.request_timeout = 500ms;
  c.fetch.starvation_timeout = 3s;
  return c;
}

constexpr double kMBps = 1e6;

swarm::Location rack(std::size_t i) { return {"dc1", "rack" + std::to_string(i % 4), "host" + std::to_string(i)}; }

}  // namespace

TEST_CASE("swarm cluster: 1 publisher and 60 fetchers all end byte-identical, mostly served by each other") {
  Version v;
  SwarmNetwork net(1, *v.manifest, v.image, config());
  const std::size_t publisher = net.add_holder(rack(0), 100 * kMBps);
  for (std::size_t i = 1; i <= 60; ++i) net.add_fetcher(rack(i), 100 * kMBps);
  REQUIRE(net.run_until([&] { return net.count_finished() == 60; }, 120s));
  std::uint64_t served_by_others = 0;
  for (std::size_t i = 1; i <= 60; ++i) {
    CHECK(net.complete(i));
    CHECK(net.image_matches(i));
    served_by_others += net.bytes_served(i);
  }
  const double size = static_cast<double>(v.image.size());
  MESSAGE("publisher uploaded " << net.bytes_served(publisher) / size << "x the version; fetchers " << served_by_others / size
                                << "x; all done at t=" << to_seconds(net.now()) << " s");
  // The swarm effect: the publisher sends far less than 60 copies.
  CHECK(net.bytes_served(publisher) < 10 * v.image.size());
  CHECK(served_by_others > 40 * v.image.size());
  // Little is sent twice: endgame duplicates only overdue requests.
  CHECK(net.bytes_served(publisher) + served_by_others < 66 * v.image.size());
}

TEST_CASE("swarm cluster: holders crash mid-transfer, every survivor completes verified") {
  Version v;
  SwarmNetwork net(2, *v.manifest, v.image, config());
  net.add_holder(rack(0), 50 * kMBps);
  for (std::size_t i = 1; i <= 50; ++i) net.add_fetcher(rack(i), 50 * kMBps);
  net.run_until(net.now() + 150ms);
  for (std::size_t victim : {3, 9, 17, 22, 31, 40}) net.crash(victim);
  REQUIRE(net.run_until([&] {
    for (std::size_t i = 1; i <= 50; ++i) {
      if (net.alive(i) && !net.result(i)) return false;
    }
    return true;
  }, 120s));
  for (std::size_t i = 1; i <= 50; ++i) {
    if (!net.alive(i)) continue;
    CHECK(net.complete(i));
    CHECK(net.image_matches(i));
  }
}

TEST_CASE("swarm cluster: a holder serving corrupted data is detected and avoided") {
  Version v;
  SwarmNetwork net(3, *v.manifest, v.image, config());
  net.add_holder(rack(0), 50 * kMBps);
  const std::size_t liar = net.add_holder(rack(1), 500 * kMBps);  // fast, so it is popular
  net.corrupt(liar);
  for (std::size_t i = 2; i <= 50; ++i) net.add_fetcher(rack(i), 50 * kMBps);
  REQUIRE(net.run_until([&] { return net.count_finished() == 49; }, 120s));
  for (std::size_t i = 2; i <= 50; ++i) {
    CHECK(net.complete(i));
    CHECK(net.image_matches(i));
  }
}

TEST_CASE("swarm cluster: a slow corrupt holder's late copies never overwrite bytes that verified") {
  // The liar's pieces take about a second each: its requests time out and
  // go to the honest holder, whose copies land and verify while the liar's
  // are still arriving. A late payload written over a verified block left
  // fetches "complete" with corrupted images (seen in cli.swarm_peers).
  Version v(2u << 20);
  SwarmNetwork net(5, *v.manifest, v.image, config());
  net.add_holder(rack(0), 20 * kMBps);
  const std::size_t liar = net.add_holder(rack(0), 0.07 * kMBps);
  net.corrupt(liar);
  for (std::size_t i = 2; i <= 9; ++i) net.add_fetcher(rack(i), 20 * kMBps);
  REQUIRE(net.run_until([&] { return net.count_finished() == 8; }, 120s));
  // Until the last of the liar's payloads has arrived.
  net.run_until(net.now() + std::chrono::seconds(static_cast<int>(net.bytes_served(liar) / (0.07 * kMBps)) + 1));
  for (std::size_t i = 2; i <= 9; ++i) {
    CHECK(net.complete(i));
    CHECK(net.image_matches(i));
  }
}

TEST_CASE("swarm cluster: a peer joining mid-distribution completes") {
  Version v;
  SwarmNetwork net(4, *v.manifest, v.image, config());
  net.add_holder(rack(0), 50 * kMBps);
  for (std::size_t i = 1; i <= 50; ++i) net.add_fetcher(rack(i), 50 * kMBps);
  net.run_until(net.now() + 300ms);
  const std::size_t late = net.add_fetcher(rack(99), 50 * kMBps);
  REQUIRE(net.run_until([&] { return net.count_finished() == 51; }, 120s));
  CHECK(net.complete(late));
  CHECK(net.image_matches(late));
}

TEST_CASE("swarm cluster: the publisher releases after R replicas and the swarm still completes") {
  Version v;
  SwarmNetwork net(5, *v.manifest, v.image, config());
  const std::size_t publisher = net.add_holder(rack(0), 100 * kMBps);
  for (std::size_t i = 1; i <= 50; ++i) net.add_fetcher(rack(i), 100 * kMBps);
  constexpr std::size_t kReplicas = 3;
  REQUIRE(net.run_until([&] { return net.count_complete() >= kReplicas; }, 120s));
  net.stop_serving(publisher);
  REQUIRE(net.run_until([&] { return net.count_finished() == 50; }, 120s));
  for (std::size_t i = 1; i <= 50; ++i) {
    CHECK(net.complete(i));
    CHECK(net.image_matches(i));
  }
}

TEST_CASE("swarm cluster: when the last holder of a shard dies, fetches fail cleanly") {
  Version v(4u << 20);
  SwarmNetwork net(6, *v.manifest, v.image, config());
  const std::size_t publisher = net.add_holder(rack(0), 2 * kMBps);  // slow: most shards never leave it
  for (std::size_t i = 1; i <= 10; ++i) net.add_fetcher(rack(i), 50 * kMBps);
  net.run_until(net.now() + 300ms);
  net.crash(publisher);
  REQUIRE(net.run_until([&] { return net.count_finished() == 10; }, 60s));
  for (std::size_t i = 1; i <= 10; ++i) {
    REQUIRE(net.result(i).has_value());
    CHECK(net.result(i)->code() == StatusCode::kUnavailable);
    CHECK(net.result(i)->message().find("no reachable peer holds shard") != std::string::npos);
  }
}

TEST_CASE("swarm cluster: a HAVE goes to peers fetching from us and to a super-seed, never to a plain holder") {
  // A plain holder only serves: it has no use for news of shards. A
  // super-seed paces its reveals by them. Two fetchers in one rack fetch
  // from the holder and from each other.
  using swarm::MessageType;
  using Mode = swarm::SwarmCore::ServeMode;
  Version v;
  const std::size_t shards = v.manifest->shard_count();
  for (const Mode mode : {Mode::kPlain, Mode::kSuperSeed}) {
    CAPTURE(static_cast<int>(mode));
    SwarmNetwork net(7, *v.manifest, v.image, config());
    const std::size_t holder = net.add_holder(rack(0), 50 * kMBps, mode);
    const std::size_t f1 = net.add_fetcher(rack(4), 50 * kMBps);
    const std::size_t f2 = net.add_fetcher(rack(8), 50 * kMBps);
    REQUIRE(net.run_until([&] { return net.count_finished() == 2; }, 60s));
    CHECK(net.image_matches(f1));
    CHECK(net.image_matches(f2));
    for (const std::size_t f : {f1, f2}) {
      if (mode == Mode::kPlain) {
        CHECK(net.messages(f, holder, MessageType::kHave) == 0);
      } else {
        CHECK(net.messages(f, holder, MessageType::kHave) > 0);
        CHECK(net.messages(f, holder, MessageType::kHave) <= shards);
      }
    }
    // The fetchers tell each other, each shard at most once.
    CHECK(net.messages(f1, f2, MessageType::kHave) + net.messages(f2, f1, MessageType::kHave) > 0);
    CHECK(net.messages(f1, f2, MessageType::kHave) <= shards);
    CHECK(net.messages(f2, f1, MessageType::kHave) <= shards);
  }
}

TEST_CASE("swarm cluster: each shard crosses the WAN once, the remote datacenter shares it among itself") {
  // A holder in dc1 and eight fetchers in dc2. Every fetcher starts with
  // nothing in flight, so each would take a shard across the WAN at once;
  // the holder sends a shard into dc2 to one carrier and defers the others
  // to it, and the carrier finishes the shard it began.
  using Mode = swarm::SwarmCore::ServeMode;
  Version v;
  for (const Mode mode : {Mode::kPlain, Mode::kSuperSeed}) {
    CAPTURE(static_cast<int>(mode));
    SwarmNetwork net(3, *v.manifest, v.image, config());
    const std::size_t holder = net.add_holder({"dc1", "rack0", "host0"}, 40 * kMBps, mode);
    std::vector<std::size_t> remote;
    for (std::size_t i = 1; i <= 8; ++i) {
      remote.push_back(net.add_fetcher({"dc2", "rack" + std::to_string(i % 2), "host" + std::to_string(i)}, 40 * kMBps));
    }
    REQUIRE(net.run_until([&] { return net.count_finished() == remote.size(); }, 60s));
    for (const std::size_t f : remote) {
      CHECK(net.complete(f));
      CHECK(net.image_matches(f));
    }
    const double crossed = static_cast<double>(net.bytes_served(holder)) / static_cast<double>(v.image.size());
    MESSAGE("the WAN carried " << crossed << "x the version");
    CHECK(crossed >= 1.0);
    CHECK(crossed <= 1.05);
    CHECK(net.messages(holder, remote[0], swarm::MessageType::kDeferred) +
              net.messages(holder, remote[1], swarm::MessageType::kDeferred) + net.messages(holder, remote[2], swarm::MessageType::kDeferred) >
          0);
  }
}

TEST_CASE("swarm cluster: leeches (serve_fetched off) serve nothing, so every byte comes from the publisher") {
  // The central baseline's shape. Fetchers know each other here (and peer
  // exchange names them to each other), yet none may serve another.
  Version v;
  for (const bool leeches : {false, true}) {
    CAPTURE(leeches);
    swarm::SwarmConfig c = config();
    c.serve_fetched = !leeches;
    SwarmNetwork net(9, *v.manifest, v.image, c);
    const std::size_t publisher = net.add_holder(rack(0), 100 * kMBps);
    for (std::size_t i = 1; i <= 6; ++i) net.add_fetcher(rack(i), 100 * kMBps);
    REQUIRE(net.run_until([&] { return net.count_finished() == 6; }, 60s));
    std::uint64_t served_by_fetchers = 0;
    for (std::size_t i = 1; i <= 6; ++i) {
      CHECK(net.complete(i));
      CHECK(net.image_matches(i));
      served_by_fetchers += net.bytes_served(i);
    }
    if (leeches) {
      CHECK(served_by_fetchers == 0);
      CHECK(net.bytes_served(publisher) >= 6 * v.image.size());
    } else {
      CHECK(served_by_fetchers > 2 * v.image.size());  // the swarm, for contrast
    }
  }
}
