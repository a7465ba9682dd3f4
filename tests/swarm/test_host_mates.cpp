// Peers that share a host (one per GPU) through real SwarmCores: a fetcher
// that begins a shard beyond its host tells the mates on its host that fetch
// from it (kFetching), and nobody else, and a mate that hears it leaves the
// shard to it; a holder serves its host mates outside its upload slots, and
// the peers on a host divide the host's slots. Messages carried by hand.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "support/swarm_core_fixture.hpp"
#include "swarm/location_book.hpp"
#include "swarm/swarm_core.hpp"

using namespace tensorhub;
using namespace tensorhub::swarm;
using namespace std::chrono_literals;

namespace {

using testing::drain;
using testing::kFourShards;
using testing::recipients;
using testing::Sent;

const ManifestId kVersion = testing::version_tagged(0x5c);

SwarmMessage bitfield(const core::Bitfield& bits) {
  return testing::bitfield_of(kVersion, bits);
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
  fetcher.on_message(now, holder, SwarmMessage::signal(MessageType::kUnchoke, kVersion));
  sent = drain(fetcher);
  // It asked the far holder for a shard, and told the mate so, once.
  REQUIRE(recipients(sent, MessageType::kRequest) == std::vector<PeerId>{holder});
  CHECK(recipients(sent, MessageType::kFetching) == std::vector<PeerId>{mate});

  SUBCASE("choked by the only holder serving the shard: the claim is withdrawn to the same mates") {
    fetcher.on_message(now, holder, SwarmMessage::signal(MessageType::kChoke, kVersion));
    sent = drain(fetcher);
    CHECK(recipients(sent, MessageType::kNotFetching) == std::vector<PeerId>{mate});
  }
  SUBCASE("a withdrawal naming a shard past the version's end is ignored") {
    fetcher.on_message(now, mate, SwarmMessage::about_shard(MessageType::kNotFetching, kVersion, ShardIndex{kFourShards.shard_count()}));
    fetcher.on_message(now, mate, SwarmMessage::about_shard(MessageType::kNotFetching, kVersion, ShardIndex{0xffffffffu}));
    sent = drain(fetcher);
    CHECK(sent.messages.empty());
  }
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
      fetcher.on_message(now, mate, SwarmMessage::about_shard(MessageType::kFetching, kVersion, ShardIndex{s}));
    }
    drain(fetcher);
    // Deliver the one block asked: the next request goes to the unclaimed shard.
    RequestId request_id;
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

TEST_CASE("host mates: served outside the upload slots, which the peers on a host divide") {
  // The slots share out a NIC: eight GPUs' peers each serving 8 requesters
  // would be 64 uploads over one NIC, each shard slow and passed on late.
  // Host mates' blocks never cross the NIC, so they wait for no slot.
  const TimePoint now(1s);
  SwarmConfig config;
  config.upload_slots = 4;
  const Location here{"dc1", "r1", "h1"};
  auto book = std::make_shared<LocationBook>();
  const PeerId self = testing::swarm_peer(950), other_gpu = testing::swarm_peer(951);
  book->set(self, here);
  book->set(other_gpu, here);  // two peers on this host: 2 slots each
  SwarmCore holder(config, here, self, 5, book);
  holder.serve(now, kVersion, kFourShards, core::Bitfield(kFourShards.shard_count(), true));
  std::vector<PeerId> far;
  for (std::uint64_t n = 0; n < 4; ++n) {
    far.push_back(testing::swarm_peer(960 + n));
    book->set(far.back(), Location{"dc1", "r2", "h" + std::to_string(n)});
    holder.on_message(now, far.back(), testing::interested_in(kVersion, kFourShards));
  }
  holder.on_message(now, other_gpu, testing::interested_in(kVersion, kFourShards));
  const Sent sent = drain(holder);
  const std::vector<PeerId> unchoked = recipients(sent, MessageType::kUnchoke);
  CHECK(std::count(unchoked.begin(), unchoked.end(), other_gpu) == 1);
  std::size_t far_unchoked = 0;
  for (const PeerId& p : far) far_unchoked += static_cast<std::size_t>(std::count(unchoked.begin(), unchoked.end(), p));
  CHECK(far_unchoked == 2);

  // The mate's requests are served; a far one still waiting is refused.
  const PeerId waiting = *std::find_if(far.begin(), far.end(), [&](const PeerId& p) {
    return std::count(unchoked.begin(), unchoked.end(), p) == 0;
  });
  auto ask = [&](const PeerId& who) {
    holder.on_message(now, who, SwarmMessage::request(kVersion, RequestId{1}, ShardIndex{0}, BlockIndex{0}, 0, kFourShards.block_size));
    bool served = false, refused = false;
    while (auto action = holder.poll()) {
      if (std::get_if<ServePiece>(&*action)) served = true;
      if (auto* send = std::get_if<SendMessage>(&*action); send && send->message.type == MessageType::kRefuse) refused = true;
    }
    return std::make_pair(served, refused);
  };
  CHECK(ask(other_gpu) == std::make_pair(true, false));
  CHECK(ask(waiting) == std::make_pair(false, true));
}

TEST_CASE("location book: peers per host follow every move") {
  LocationBook book;
  const PeerId a = testing::swarm_peer(970), b = testing::swarm_peer(971);
  const Location h1{"dc1", "r1", "h1"}, h2{"dc1", "r1", "h2"};
  CHECK(book.peers_on_host(h1) == 0);
  book.set(a, h1);
  book.set(b, h1);
  CHECK(book.peers_on_host(h1) == 2);
  book.set(b, h2);
  CHECK(book.peers_on_host(h1) == 1);
  CHECK(book.peers_on_host(h2) == 1);
  book.set(b, h2);  // the same again: no double count
  CHECK(book.peers_on_host(h2) == 1);
  CHECK(book.peers_on_host(Location{"dc1", "r2", "h1"}) == 0);  // another rack's h1
  CHECK(book.peers_on_host(Location{"dc1", "r1", ""}) == 0);    // no host label: no host
}
