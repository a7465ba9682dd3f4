// A fetcher holds at most as many of other holders' upload slots as it
// offers: an unchoke beyond that share is handed back (kNotInterested), and
// the holders handed back are asked again (kInterested) once the slots it
// holds give it nothing to ask for. One real SwarmCore; messages carried by
// hand.
#include <doctest/doctest.h>

#include <algorithm>
#include <initializer_list>
#include <string>
#include <vector>

#include "support/swarm_core_fixture.hpp"
#include "swarm/swarm_core.hpp"

using namespace tensorhub;
using namespace tensorhub::swarm;
using namespace std::chrono_literals;

namespace {

const ManifestId kVersion = testing::version_tagged(0x51);

SwarmMessage of_type(MessageType type) { return SwarmMessage::signal(type, kVersion); }

// Requests were sent, and only to `holder`.
bool requests_only_to(const testing::Sent& sent, const PeerId& holder) {
  const std::vector<PeerId> to = testing::recipients(sent, MessageType::kRequest);
  return !to.empty() && std::count(to.begin(), to.end(), holder) == static_cast<std::ptrdiff_t>(to.size());
}

// A fetcher with one upload slot of its own, connected to four holders on
// other hosts (in its datacenter, or across the WAN in `holders_dc`), none
// of which has unchoked it yet.
struct SlotShareDriver {
  TimePoint now{1s};
  SwarmCore fetcher;
  PeerId a = testing::swarm_peer(701), b = testing::swarm_peer(702), c = testing::swarm_peer(703),
         d = testing::swarm_peer(704);

  static SwarmConfig config() {
    SwarmConfig config;
    config.upload_slots = 1;
    config.fetch.random_neighbours = 0;
    return config;
  }

  explicit SlotShareDriver(const std::string& holders_dc = "dc1")
      : fetcher(config(), Location{"dc1", "r1", "h1"}, testing::swarm_peer(700), 5) {
    fetcher.set_location(a, Location{holders_dc, "r2", "h2"});
    fetcher.set_location(b, Location{holders_dc, "r3", "h3"});
    fetcher.set_location(c, Location{holders_dc, "r4", "h4"});
    fetcher.set_location(d, Location{holders_dc, "r5", "h5"});
    fetcher.fetch(now, kVersion, testing::kFourShards, core::Bitfield(testing::kFourShards.shard_count()));
    for (const PeerId& p : {a, b, c, d}) fetcher.add_holder(now, kVersion, p, /*complete=*/false);
    now += 1ms;
    fetcher.handle_timeout(now);
    const testing::Sent sent = testing::drain(fetcher);
    REQUIRE(sent.opened.size() == 4);
    for (const PeerId& p : sent.opened) fetcher.on_connected(now, p);
    REQUIRE(testing::recipients(testing::drain(fetcher), MessageType::kInterested).size() == 4);
  }

  testing::Sent shows_shards(const PeerId& holder, std::initializer_list<std::uint32_t> shards) {
    core::Bitfield bits(testing::kFourShards.shard_count());
    for (std::uint32_t shard : shards) bits.set(shard);
    fetcher.on_message(now, holder, testing::bitfield_of(kVersion, bits));
    return testing::drain(fetcher);
  }
  testing::Sent shows(const PeerId& holder, bool everything) {
    fetcher.on_message(now, holder, testing::bitfield_of(kVersion, core::Bitfield(testing::kFourShards.shard_count(), everything)));
    return testing::drain(fetcher);
  }
  testing::Sent says(const PeerId& holder, MessageType type) {
    fetcher.on_message(now, holder, of_type(type));
    return testing::drain(fetcher);
  }
};

}  // namespace

TEST_CASE("slot share: an unchoke beyond the fetcher's share is handed back, and asked again when its slots end") {
  SlotShareDriver s;
  for (const PeerId& p : {s.a, s.b, s.c}) s.shows(p, /*everything=*/true);

  testing::Sent sent = s.says(s.a, MessageType::kUnchoke);
  CHECK(requests_only_to(sent, s.a));

  // A second holder's slot would be one more than the fetcher offers.
  sent = s.says(s.b, MessageType::kUnchoke);
  CHECK(testing::recipients(sent, MessageType::kNotInterested) == std::vector<PeerId>{s.b});
  CHECK(testing::recipients(sent, MessageType::kRequest).empty());
  sent = s.says(s.c, MessageType::kUnchoke);
  CHECK(testing::recipients(sent, MessageType::kNotInterested) == std::vector<PeerId>{s.c});

  // The slot it held ends, and with it everything in flight: it waits in
  // the queues of both holders it handed back. The first slot it gets it
  // keeps; the second is again one too many.
  sent = s.says(s.a, MessageType::kChoke);
  CHECK(testing::recipients(sent, MessageType::kInterested) == std::vector<PeerId>{s.b, s.c});
  sent = s.says(s.c, MessageType::kUnchoke);
  CHECK(testing::recipients(sent, MessageType::kNotInterested).empty());
  CHECK(requests_only_to(sent, s.c));
  sent = s.says(s.b, MessageType::kUnchoke);
  CHECK(testing::recipients(sent, MessageType::kNotInterested) == std::vector<PeerId>{s.b});
  CHECK(testing::recipients(sent, MessageType::kRequest).empty());
}

TEST_CASE("slot share: a fetcher whose slots give it nothing to ask for asks a holder it handed back at once") {
  SlotShareDriver s;
  s.shows(s.a, /*everything=*/false);  // unchokes, but holds nothing yet
  s.shows(s.b, /*everything=*/true);
  testing::Sent sent = s.says(s.a, MessageType::kUnchoke);
  CHECK(testing::recipients(sent, MessageType::kRequest).empty());

  // Declined, since the slot held counts; but with nothing in flight the
  // fetcher is starved, and asks again straight away.
  sent = s.says(s.b, MessageType::kUnchoke);
  CHECK(testing::recipients(sent, MessageType::kNotInterested) == std::vector<PeerId>{s.b});
  CHECK(testing::recipients(sent, MessageType::kInterested) == std::vector<PeerId>{s.b});
  sent = s.says(s.b, MessageType::kUnchoke);
  CHECK(requests_only_to(sent, s.b));
  // Two slots now, one more than the share: the one with nothing in
  // flight (a, which has nothing to give) is handed back.
  CHECK(testing::recipients(sent, MessageType::kNotInterested) == std::vector<PeerId>{s.a});
}

TEST_CASE("slot share: a starved fetcher that pulls across the WAN takes the slot") {
  // As above, with the holders across the WAN: handing the slot back and
  // asking again would leave it idle for a WAN round trip. (Across the WAN
  // the fetch keeps both: the WAN paces it, not slots.)
  SlotShareDriver s("dc2");
  s.shows(s.a, /*everything=*/false);
  s.shows(s.b, /*everything=*/true);
  testing::Sent sent = s.says(s.a, MessageType::kUnchoke);
  CHECK(testing::recipients(sent, MessageType::kRequest).empty());

  sent = s.says(s.b, MessageType::kUnchoke);
  CHECK(requests_only_to(sent, s.b));
  CHECK(testing::recipients(sent, MessageType::kInterested).empty());
  CHECK(testing::recipients(sent, MessageType::kNotInterested).empty());
}

TEST_CASE("slot share: with requests still in flight elsewhere, one holder handed back is asked again per slot that ends") {
  SlotShareDriver s;
  // c is a super-seed: its unchoke is no slot of the share, and the shard it
  // reveals keeps a request in flight through what follows.
  s.says(s.c, MessageType::kSuperSeed);
  s.shows_shards(s.c, {});
  s.says(s.c, MessageType::kUnchoke);
  s.fetcher.on_message(s.now, s.c, SwarmMessage::about_shard(MessageType::kHave, kVersion, ShardIndex{3}));
  REQUIRE(requests_only_to(testing::drain(s.fetcher), s.c));
  for (const PeerId& p : {s.a, s.b, s.d}) s.shows_shards(p, {0, 1, 2});

  CHECK(requests_only_to(s.says(s.a, MessageType::kUnchoke), s.a));
  CHECK(testing::recipients(s.says(s.b, MessageType::kUnchoke), MessageType::kNotInterested) == std::vector<PeerId>{s.b});
  CHECK(testing::recipients(s.says(s.d, MessageType::kUnchoke), MessageType::kNotInterested) == std::vector<PeerId>{s.d});

  // Not starved (c's request is in flight): the slot that ended is replaced
  // by one holder, the first handed back, not by both.
  testing::Sent sent = s.says(s.a, MessageType::kChoke);
  CHECK(testing::recipients(sent, MessageType::kInterested) == std::vector<PeerId>{s.b});
  sent = s.says(s.b, MessageType::kUnchoke);
  CHECK(testing::recipients(sent, MessageType::kNotInterested).empty());
  CHECK(requests_only_to(sent, s.b));
}

TEST_CASE("slot share: holders handed back are asked again once each, in order, and count as held until they answer") {
  tensorhub::swarm::SlotShare slots;
  const PeerId a = tensorhub::testing::GossipNetwork::identity_for(201).public_key();
  const PeerId b = tensorhub::testing::GossipNetwork::identity_for(202).public_key();
  const PeerId c = tensorhub::testing::GossipNetwork::identity_for(203).public_key();
  slots.set_share(2);
  CHECK_FALSE(slots.holds_its_share(1));
  CHECK(slots.holds_its_share(2));
  for (const PeerId& p : {a, b, a, c}) slots.handed_back(p);  // a once
  std::vector<PeerId> asked;
  slots.ask_again([&] { return !slots.holds_its_share(1); }, [&](const PeerId& p) { return !(p == b); }, asked);
  CHECK(asked == std::vector<PeerId>{a});  // one asked again reaches the share with one held
  CHECK(slots.holds_its_share(1));
  CHECK(slots.answered(a));
  CHECK_FALSE(slots.answered(a));
  CHECK_FALSE(slots.holds_its_share(1));
  asked.clear();
  slots.ask_again([] { return true; }, [&](const PeerId& p) { return !(p == b); }, asked);
  CHECK(asked == std::vector<PeerId>{c});  // b, not connected, is let go
  slots.ended(c);
  CHECK_FALSE(slots.any_handed_back());
  CHECK_FALSE(slots.holds_its_share(1));
}
