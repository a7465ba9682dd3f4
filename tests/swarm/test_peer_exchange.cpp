// Peer exchange: a holder tells a new requester of the others that fetch the
// version from it, nearest to the newcomer first, and a fetcher takes such
// peers as candidates only from a holder it fetches from and only when
// gossip knows them. Real SwarmCores, messages carried by hand.
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "support/swarm_core_fixture.hpp"
#include "swarm/swarm_core.hpp"

using namespace tensorhub;
using namespace tensorhub::swarm;
using namespace std::chrono_literals;

namespace {

PeerId peer_id(std::uint64_t n) { return testing::swarm_peer(800 + n); }

const ShardLayout kLayout = testing::kFourShards;

ManifestId version_id() { return testing::version_tagged(0x77); }

SwarmMessage interested() { return testing::interested_in(version_id(), kLayout); }

// The peer ids a kPeers message lists, in order.
std::vector<PeerId> listed(const SwarmMessage& m) {
  std::vector<PeerId> out;
  for (std::size_t at = 0; at + PeerId::kSize <= m.bytes.size(); at += PeerId::kSize) {
    PeerId id;
    std::copy_n(m.bytes.begin() + static_cast<std::ptrdiff_t>(at), PeerId::kSize, id.bytes.begin());
    out.push_back(id);
  }
  return out;
}

// The kPeers messages a core sent each peer.
std::vector<std::pair<PeerId, SwarmMessage>> peers_messages(SwarmCore& core) {
  std::vector<std::pair<PeerId, SwarmMessage>> out;
  while (auto action = core.poll()) {
    if (auto* send = std::get_if<SendMessage>(&*action); send && send->message.type == MessageType::kPeers) {
      out.emplace_back(send->peer, send->message);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("peer exchange: a holder tells a new requester of the others, nearest to it first") {
  const TimePoint now(1s);
  SwarmCore holder(SwarmConfig{}, Location{"dc1", "r1", "h0"}, peer_id(0), 1);
  holder.serve(now, version_id(), kLayout, core::Bitfield(kLayout.shard_count(), true));
  const PeerId far = peer_id(1), near = peer_id(2), newcomer = peer_id(3), unknown = peer_id(4);
  holder.set_location(far, Location{"dc1", "r9", "h9"});
  holder.set_location(near, Location{"dc1", "r2", "h2"});
  holder.set_location(newcomer, Location{"dc1", "r2", "h2"});  // the same host as `near`

  holder.on_message(now, far, interested());
  CHECK(peers_messages(holder).empty());  // nobody else to name
  holder.on_message(now, unknown, interested());
  holder.on_message(now, near, interested());
  holder.on_message(now, newcomer, interested());
  const auto sent = peers_messages(holder);
  auto to_newcomer = std::find_if(sent.begin(), sent.end(), [&](const auto& s) { return s.first == newcomer; });
  REQUIRE(to_newcomer != sent.end());
  // The one on its host first; the peer of unknown location is not named.
  CHECK(listed(to_newcomer->second) == std::vector<PeerId>{near, far});
}

TEST_CASE("peer exchange: a fetcher connects to peers its holder names, if gossip knows them") {
  TimePoint now(1s);
  SwarmConfig config;
  config.fetch.random_neighbours = 0;
  SwarmCore fetcher(config, Location{"dc1", "r1", "h1"}, peer_id(10), 2);
  const PeerId holder = peer_id(11), known = peer_id(12), stranger = peer_id(13), other_holder = peer_id(14);
  fetcher.set_location(holder, Location{"dc1", "r5", "h5"});
  fetcher.set_location(known, Location{"dc1", "r1", "h7"});
  fetcher.fetch(now, version_id(), kLayout, core::Bitfield(kLayout.shard_count()));
  fetcher.add_holder(now, version_id(), holder, /*complete=*/true);
  fetcher.handle_timeout(now);
  std::vector<PeerId> opened;
  auto drain = [&] {
    while (auto action = fetcher.poll()) {
      if (auto* open = std::get_if<OpenConnection>(&*action)) opened.push_back(open->peer);
    }
  };
  drain();
  REQUIRE(opened == std::vector<PeerId>{holder});
  fetcher.on_connected(now, holder);
  drain();

  SwarmMessage names{MessageType::kPeers, version_id(), {}, {}, {}, 0, 0, 0, {}};
  for (const PeerId& p : {known, stranger}) names.bytes.insert(names.bytes.end(), p.bytes.begin(), p.bytes.end());
  SUBCASE("from a holder it fetches from") {
    fetcher.on_message(now, holder, names);
    now += 1ms;
    fetcher.handle_timeout(now);  // candidates are connected at the end of a burst
    drain();
    CHECK(std::count(opened.begin(), opened.end(), known) == 1);
    CHECK(std::count(opened.begin(), opened.end(), stranger) == 0);  // no record: no address to reach it at
  }
  SUBCASE("from a peer it does not fetch from: ignored") {
    fetcher.on_message(now, other_holder, names);
    now += 1ms;
    fetcher.handle_timeout(now);
    drain();
    CHECK(std::count(opened.begin(), opened.end(), known) == 0);
  }
}
