// Host mates' claims through real SwarmCores: a fetcher that begins a shard
// beyond its host tells the mates on its host that fetch from it (kFetching),
// and nobody else; a mate that hears it leaves the shard to it. Messages are
// carried by hand.
#include <doctest/doctest.h>

#include <vector>

#include "support/swarm_core_fixture.hpp"
#include "swarm/swarm_core.hpp"

using namespace tensorhub;
using namespace tensorhub::swarm;
using namespace std::chrono_literals;

namespace {

using testing::kFourShards;

const ManifestId kVersion = testing::version_tagged(0x5c);

SwarmMessage bitfield(const core::Bitfield& bits) {
  return SwarmMessage{MessageType::kBitfield, kVersion, 0, {}, {}, 0, 0, kFourShards.shard_count(), bits.to_bytes()};
}

struct Sent {
  std::vector<std::pair<PeerId, SwarmMessage>> messages;
  std::vector<PeerId> opened;
};

Sent drain(SwarmCore& core) {
  Sent out;
  while (auto action = core.poll()) {
    if (auto* send = std::get_if<SendMessage>(&*action)) out.messages.emplace_back(send->peer, send->message);
    if (auto* open = std::get_if<OpenConnection>(&*action)) out.opened.push_back(open->peer);
  }
  return out;
}

std::vector<PeerId> recipients(const Sent& sent, MessageType type) {
  std::vector<PeerId> out;
  for (const auto& [to, m] : sent.messages) {
    if (m.type == type) out.push_back(to);
  }
  return out;
}

}  // namespace

TEST_CASE("host mate claims: a shard begun beyond the host is claimed to the host mates that fetch from us, only") {
  TimePoint now(1s);
  SwarmConfig config;
  config.fetch.random_neighbours = 0;
  config.fetch.pipeline_blocks = 1;
  const Location here{"dc1", "r1", "h1"};
  SwarmCore fetcher(config, here, testing::swarm_peer(900), 3);
  const PeerId holder = testing::swarm_peer(901), mate = testing::swarm_peer(902), rack_peer = testing::swarm_peer(903);
  fetcher.set_location(holder, Location{"dc1", "r5", "h5"});
  fetcher.set_location(mate, here);
  fetcher.set_location(rack_peer, Location{"dc1", "r1", "h2"});
  fetcher.fetch(now, kVersion, kFourShards, core::Bitfield(kFourShards.shard_count()));
  // The mate and the rack peer fetch from us.
  fetcher.on_message(now, mate, testing::interested_in(kVersion, kFourShards));
  fetcher.on_message(now, rack_peer, testing::interested_in(kVersion, kFourShards));
  fetcher.add_holder(now, kVersion, holder, /*complete=*/true);
  now += 1ms;
  fetcher.handle_timeout(now);
  Sent sent = drain(fetcher);
  for (const PeerId& p : sent.opened) fetcher.on_connected(now, p);
  drain(fetcher);
  fetcher.on_message(now, holder, bitfield(core::Bitfield(kFourShards.shard_count(), true)));
  fetcher.on_message(now, holder, SwarmMessage{MessageType::kUnchoke, kVersion, 0, {}, {}, 0, 0, 0, {}});
  sent = drain(fetcher);
  // It asked the far holder for a shard, and told the mate so, once.
  REQUIRE(recipients(sent, MessageType::kRequest) == std::vector<PeerId>{holder});
  CHECK(recipients(sent, MessageType::kFetching) == std::vector<PeerId>{mate});

  SUBCASE("the mate's claim keeps the other shards it names off the NIC here") {
    // The mate claims every shard but one: once the first arrives, that one
    // is all that is asked of the far holder.
    ShardIndex asked{0};
    for (const auto& [to, m] : sent.messages) {
      if (m.type == MessageType::kRequest) asked = m.shard;
    }
    // The mate serves nothing yet, and says so.
    fetcher.on_connected(now, mate);
    fetcher.on_message(now, mate, bitfield(core::Bitfield(kFourShards.shard_count())));
    drain(fetcher);
    std::uint32_t unclaimed = kFourShards.shard_count();
    for (std::uint32_t s = 0; s < kFourShards.shard_count(); ++s) {
      if (s == asked.value) continue;
      if (unclaimed == kFourShards.shard_count()) {
        unclaimed = s;
        continue;
      }
      fetcher.on_message(now, mate, SwarmMessage{MessageType::kFetching, kVersion, 0, ShardIndex{s}, {}, 0, 0, 0, {}});
    }
    drain(fetcher);
    // Deliver the one block asked: the next request goes to the unclaimed shard.
    std::uint32_t request_id = 0;
    for (const auto& [to, m] : sent.messages) {
      if (m.type == MessageType::kRequest) request_id = m.request_id;
    }
    SwarmMessage piece{MessageType::kPiece, kVersion, request_id, {}, {}, 0, kFourShards.block_size, 0, {}};
    REQUIRE(fetcher.begin_piece(now, holder, piece).has_value());
    fetcher.on_piece(now, holder, piece, true);
    sent = drain(fetcher);
    std::vector<std::uint32_t> next;
    for (const auto& [to, m] : sent.messages) {
      if (m.type == MessageType::kRequest) next.push_back(m.shard.value);
    }
    CHECK(next == std::vector<std::uint32_t>{unclaimed});
  }
}
