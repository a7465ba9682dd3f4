// A super-seed's upload slots rotate, but a requester whose turn is over
// first finishes the first copies revealed to it: choked at once, the blocks
// it has would be wasted and the shards go out again to someone else. One
// real SwarmCore as the publisher; the two requesters are played by hand.
#include <doctest/doctest.h>

#include <vector>

#include "support/gossip_network.hpp"
#include "swarm/swarm_core.hpp"

using namespace tensorhub;
using namespace tensorhub::swarm;
using namespace std::chrono_literals;

namespace {

PeerId peer_id(std::uint64_t n) { return testing::GossipNetwork::identity_for(800 + n).public_key(); }

class Publisher {
 public:
  explicit Publisher(std::uint64_t seed = 9, std::size_t slots = 1, Duration request_timeout = FetchConfig{}.request_timeout) {
    config.upload_slots = slots;
    config.fetch.request_timeout = request_timeout;  // a requester is silent after two
    config.slot_rotation = 1s;
    config.fetch.block_size = kBlock;
    config.fetch.pipeline_blocks = 1;  // two shards revealed ahead (the core's minimum) of 16
    version_id.bytes[0] = 0x5e;
    core = std::make_unique<SwarmCore>(config, Location{"dc1", "r1", "h0"}, peer_id(0), seed);
    for (std::uint64_t n = 1; n <= 3; ++n) core->set_location(peer_id(n), Location{"dc1", "r1", "h" + std::to_string(n)});
    core->serve(now, version_id, layout, core::Bitfield(layout.shard_count(), true), SwarmCore::ServeMode::kSuperSeed);
  }

  void say(const PeerId& from, MessageType type, ShardIndex shard = {}, RequestId request_id = {},
           const core::Bitfield* holds = nullptr) {
    SwarmMessage m{type, version_id, request_id, shard, {}, 0, 0, 0, {}};
    if (type == MessageType::kInterested) {
      m.shard_count = layout.shard_count();
      m.bytes = holds ? holds->to_bytes() : core::Bitfield(layout.shard_count()).to_bytes();
    }
    if (type == MessageType::kRequest) {
      m.offset = layout.shard_offset(shard);
      m.length = kBlock;
    }
    core->on_message(now, from, m);
    collect();
  }

  void advance(Duration d) {
    now += d;
    core->handle_timeout(now);
    collect();
  }

  void collect() {
    while (auto action = core->poll()) {
      if (auto* send = std::get_if<SendMessage>(&*action)) sent.push_back(*send);
      if (auto* serve = std::get_if<ServePiece>(&*action)) served.push_back(*serve);
    }
  }

  // What `to` was told since the last call, by type.
  std::vector<SwarmMessage> told(const PeerId& to, MessageType type) {
    std::vector<SwarmMessage> out;
    for (const SendMessage& s : sent) {
      if (s.peer == to && s.message.type == type) out.push_back(s.message);
    }
    return out;
  }

  static constexpr std::uint32_t kBlock = 64u << 10;
  SwarmConfig config;
  ShardLayout layout{16 * kBlock, kBlock, kBlock};  // 16 shards of one block
  ManifestId version_id;
  TimePoint now{std::chrono::seconds(1)};
  std::unique_ptr<SwarmCore> core;
  std::vector<SendMessage> sent;
  std::vector<ServePiece> served;
};

}  // namespace

TEST_CASE("super-seed: a requester whose turn is over finishes its revealed shards, then is choked") {
  Publisher p;
  const PeerId a = peer_id(1), b = peer_id(2);
  p.say(a, MessageType::kInterested);
  p.say(b, MessageType::kInterested);
  REQUIRE(p.told(a, MessageType::kUnchoke).size() == 1);
  CHECK(p.told(b, MessageType::kUnchoke).empty());
  const auto revealed = p.told(a, MessageType::kHave);
  REQUIRE(revealed.size() >= 2);
  p.sent.clear();

  // A's turn ends: B is served, but A is not choked while shards revealed
  // only to it are unfinished, and its requests for them are still served.
  p.advance(1s);
  CHECK(p.told(b, MessageType::kUnchoke).size() == 1);
  CHECK(p.told(a, MessageType::kChoke).empty());
  p.say(a, MessageType::kRequest, revealed[0].shard, RequestId{7});
  CHECK(p.told(a, MessageType::kRefuse).empty());
  REQUIRE(p.served.size() == 1);
  CHECK(p.served[0].peer == a);
  // Nothing new is revealed to it while it finishes.
  p.sent.clear();
  p.say(a, MessageType::kHave, revealed[0].shard);
  CHECK(p.told(a, MessageType::kHave).empty());
  CHECK(p.told(a, MessageType::kChoke).empty());
  // Its last revealed shard held, it is choked.
  for (std::size_t i = 1; i < revealed.size(); ++i) p.say(a, MessageType::kHave, revealed[i].shard);
  CHECK(p.told(a, MessageType::kChoke).size() == 1);
  p.sent.clear();
  p.say(a, MessageType::kRequest, ShardIndex{15}, RequestId{8});
  CHECK(p.told(a, MessageType::kRefuse).size() == 1);
}

TEST_CASE("super-seed: a finishing requester whose slot comes back was never choked and is shown more") {
  Publisher p;
  const PeerId a = peer_id(1), b = peer_id(2);
  p.say(a, MessageType::kInterested);
  p.say(b, MessageType::kInterested);
  const auto revealed = p.told(a, MessageType::kHave);
  REQUIRE(!revealed.empty());
  p.advance(1s);  // A's turn is over; B's starts
  p.say(a, MessageType::kHave, revealed[0].shard);  // A finishes one shard: no new one for it
  CHECK(p.told(a, MessageType::kHave).size() == revealed.size());
  p.sent.clear();
  p.advance(1s);  // B's turn is over; A, the only one waiting, gets the slot back
  CHECK(p.told(a, MessageType::kChoke).empty());
  CHECK(p.told(a, MessageType::kUnchoke).empty());  // it was never choked
  CHECK_FALSE(p.told(a, MessageType::kHave).empty());  // its quota is topped up again
}

TEST_CASE("super-seed: a requester that does not finish is choked after kFinishingRotations rotations") {
  // Three requesters for one slot: after A's turn, the next two turns are
  // drawn at random; find a seed where A is not drawn back before its
  // finishing time runs out.
  bool checked = false;
  for (std::uint64_t seed = 1; seed <= 32 && !checked; ++seed) {
    Publisher p(seed);
    const PeerId a = peer_id(1), b = peer_id(2), c = peer_id(3);
    p.say(a, MessageType::kInterested);
    p.say(b, MessageType::kInterested);
    p.say(c, MessageType::kInterested);
    REQUIRE(p.told(a, MessageType::kUnchoke).size() == 1);
    const auto revealed = p.told(a, MessageType::kHave);
    REQUIRE(revealed.size() == 2);
    p.advance(1s);  // A's turn is over; it finishes one of its two shards, and then nothing
    p.say(a, MessageType::kHave, revealed[0].shard);
    p.sent.clear();
    bool served_again = false;
    for (int step = 1; step < 1000 * kFinishingRotations; ++step) {
      p.advance(1ms);
      if (!p.told(a, MessageType::kHave).empty()) served_again = true;  // its slot came back: topped up
      REQUIRE(p.told(a, MessageType::kChoke).empty());
    }
    if (served_again) continue;
    p.advance(1ms);
    CHECK(p.told(a, MessageType::kChoke).size() == 1);
    checked = true;
  }
  CHECK(checked);
}

TEST_CASE("super-seed: the shards of a requester gone silent are shown to one waiting for them") {
  Publisher p(9, /*slots=*/2, /*request_timeout=*/200ms);
  const PeerId a = peer_id(1), b = peer_id(2);
  p.say(b, MessageType::kInterested);
  const auto to_b = p.told(b, MessageType::kHave);
  REQUIRE(to_b.size() >= 2);
  // A holds every shard but those shown to B: it waits, since a second copy
  // of a first copy in flight would only slow that copy down.
  core::Bitfield holds(p.layout.shard_count(), true);
  for (const SwarmMessage& m : to_b) holds.reset(m.shard.value);
  p.say(a, MessageType::kInterested, {}, RequestId{}, &holds);
  REQUIRE(p.told(a, MessageType::kUnchoke).size() == 1);
  CHECK(p.told(a, MessageType::kHave).empty());
  // B says nothing (stopped, or its link is down). Within 3 request
  // timeouts its shards have no copy, and A is shown them.
  p.sent.clear();
  p.advance(100ms);
  CHECK(p.told(a, MessageType::kHave).empty());  // not silent yet
  for (int i = 0; i < 6; ++i) p.advance(100ms);
  const auto to_a = p.told(a, MessageType::kHave);
  CHECK(to_a.size() == to_b.size());
  for (const SwarmMessage& m : to_a) CHECK_FALSE(holds.test(m.shard.value));
  // B speaks again: it is served as before (its request is answered).
  p.say(b, MessageType::kRequest, to_b[0].shard, RequestId{3});
  CHECK(p.told(b, MessageType::kRefuse).empty());
  CHECK(p.served.size() == 1);
}
