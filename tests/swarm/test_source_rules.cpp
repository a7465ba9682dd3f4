#include <doctest/doctest.h>

#include "swarm/source_rules.hpp"
#include "support/tagged_ids.hpp"

using namespace tensorhub;
using namespace tensorhub::swarm;
using namespace std::chrono_literals;
using namespace tensorhub::testing;

namespace {

FetchConfig wan_budget_of_one() {
  FetchConfig config;
  config.max_wan_requests = 1;
  return config;
}

// A fetch of four one-block shards, its neighbourhood and request table.
struct Rules {
  ShardLayout layout{4u << 20, 1u << 20, 1u << 20};
  FetchConfig config = wan_budget_of_one();
  Neighbourhood hood{4, 16, 1};
  RequestTable requests{layout, config.request_timeout};
  RequestIds ids;
  SourceRules rules{peer_tagged(0), config, hood, requests};

  const Neighbour& add(std::uint8_t n, Proximity proximity, std::initializer_list<std::uint32_t> shards,
                       bool complete = false) {
    const PeerId id = peer_tagged(n);
    REQUIRE(hood.add_candidate(id, proximity, complete));
    hood.connect(id, kStart + 2s);
    hood.set_connected(id);
    core::Bitfield bits(4);
    for (auto s : shards) bits.set(s);
    hood.set_bits(id, bits);
    requests.add_holder(id, proximity == Proximity::kRemote);
    return *hood.find(id);
  }
};

}  // namespace

TEST_CASE("source rules: a host mate gives anything, and a link carries only what nobody on our side of it holds") {
  Rules r;
  const Neighbour& mate = r.add(1, Proximity::kSameHost, {0, 1});
  const Neighbour& rack = r.add(2, Proximity::kSameRack, {1, 2});
  const Neighbour& dc = r.add(3, Proximity::kSameDc, {1, 2, 3});
  const Neighbour& far = r.add(4, Proximity::kRemote, {2, 3}, /*complete=*/true);
  CHECK(r.rules.allowed(kStart, mate, ShardIndex{1}, false));
  CHECK_FALSE(r.rules.allowed(kStart, mate, ShardIndex{2}, false));  // not held
  // Over the NIC: not what a host mate holds.
  CHECK_FALSE(r.rules.allowed(kStart, rack, ShardIndex{1}, false));
  CHECK_FALSE(r.rules.allowed(kStart, dc, ShardIndex{1}, false));
  CHECK(r.rules.allowed(kStart, rack, ShardIndex{2}, false));
  CHECK(r.rules.allowed(kStart, dc, ShardIndex{2}, false));
  // Over the WAN: not what anyone in the datacenter holds.
  CHECK_FALSE(r.rules.allowed(kStart, far, ShardIndex{3}, false));
  r.hood.remove(peer_tagged(3), false);
  r.requests.remove_holder(peer_tagged(3));
  CHECK(r.rules.allowed(kStart, far, ShardIndex{3}, false));
}

TEST_CASE("source rules: a host mate's claim keeps a shard off our NIC until it lapses or is withdrawn") {
  Rules r;
  r.add(1, Proximity::kSameHost, {});
  const Neighbour& dc = r.add(3, Proximity::kSameDc, {0, 1});
  r.rules.claim(kStart, peer_tagged(1), ShardIndex{0});
  CHECK_FALSE(r.rules.allowed(kStart, dc, ShardIndex{0}, false));
  CHECK(r.rules.allowed(kStart, dc, ShardIndex{1}, false));
  // With nothing in flight here, the claim stops binding a request timeout on.
  CHECK(r.rules.allowed(kStart + r.config.request_timeout, dc, ShardIndex{0}, false));
  // With something in flight it binds until withdrawn.
  r.requests.add(kStart, peer_tagged(3), r.layout.block_range(ShardIndex{1}, BlockIndex{0}), r.ids);
  CHECK_FALSE(r.rules.allowed(kStart + 10s, dc, ShardIndex{0}, false));
  CHECK_FALSE(r.rules.unclaim(peer_tagged(3), ShardIndex{0}));  // only the claimant withdraws it
  CHECK(r.rules.unclaim(peer_tagged(1), ShardIndex{0}));
  CHECK(r.rules.allowed(kStart + 10s, dc, ShardIndex{0}, false));
  core::TimerTable<FetchTimer> timers;
  r.rules.set_timers(timers, kStart);
  CHECK(timers.at(FetchTimer::kMateClaim) == kTimeNever);
}

TEST_CASE("source rules: across the WAN, a deferred shard waits, and the WAN budget caps what is in flight") {
  Rules r;
  const Neighbour& far = r.add(5, Proximity::kRemote, {0, 1, 2, 3}, /*complete=*/true);
  CHECK(r.rules.allowed(kStart, far, ShardIndex{0}, false));
  r.rules.defer(ShardIndex{0}, kStart + 800ms);
  CHECK_FALSE(r.rules.allowed(kStart, far, ShardIndex{0}, false));
  core::TimerTable<FetchTimer> timers;
  r.rules.set_timers(timers, kStart);
  CHECK(timers.at(FetchTimer::kWanDeferral) == kStart + 800ms);
  r.rules.expire_deferrals(kStart + 800ms);
  CHECK(r.rules.allowed(kStart + 800ms, far, ShardIndex{0}, false));
  r.requests.add(kStart, peer_tagged(5), r.layout.block_range(ShardIndex{1}, BlockIndex{0}), r.ids);
  CHECK_FALSE(r.rules.allowed(kStart + 800ms, far, ShardIndex{0}, false));  // max_wan_requests = 1
}
