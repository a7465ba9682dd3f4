// A version's serving side on its own, with no SwarmCore: who is unchoked,
// which requests are answered, refused or deferred, and what a stop says.
#include <doctest/doctest.h>

#include <map>
#include <string>

#include "support/gossip_network.hpp"
#include "swarm/serve_session.hpp"

using namespace tensorhub;
using namespace tensorhub::swarm;
using namespace std::chrono_literals;

namespace {

PeerId peer(std::uint64_t n) { return testing::GossipNetwork::identity_for(300 + n).public_key(); }

struct Peers final : ServePeers {
  Location self{"dc1", "r1", "h0"};
  std::map<PeerId, Location> where;
  Proximity proximity_of(const PeerId& p) const override {
    auto it = where.find(p);
    return it == where.end() ? Proximity::kRemote : proximity(self, it->second);
  }
  const Location* location_of(const PeerId& p) const override {
    auto it = where.find(p);
    return it == where.end() ? nullptr : &it->second;
  }
  bool connection_open(const PeerId&) const override { return true; }
  std::optional<TimePoint> last_heard(const PeerId&) const override { return TimePoint{}; }
};

struct Fixture {
  explicit Fixture(bool offered = true, std::size_t slots = 1)
      : have(4),
        session(id, ShardLayout{4u << 16, 1u << 16, 1u << 16}, have, UploadSlots(slots, 2s, 7), offered,
                ServeConfig{2s, 2s}, peers, actions) {
    have.set(0);
    have.set(1);
    id.bytes[0] = 9;
  }
  // The messages sent, of one type, to whom.
  std::vector<PeerId> sent(MessageType type) {
    drain();
    std::vector<PeerId> out;
    for (const auto& [to, m] : messages) {
      if (m.type == type) out.push_back(to);
    }
    return out;
  }
  void drain() {
    while (auto a = actions.poll()) {
      if (auto* s = std::get_if<SendMessage>(&*a)) messages.emplace_back(s->peer, s->message);
      if (auto* p = std::get_if<ServePiece>(&*a)) pieces.push_back(p->peer);
      if (auto* d = std::get_if<DropQueuedPieces>(&*a)) dropped.push_back(d->peer);
    }
  }
  SwarmMessage interested() const { return SwarmMessage::with_bits(MessageType::kInterested, id, 4, {0}); }
  SwarmMessage request(std::uint32_t shard) const {
    return SwarmMessage::request(id, swarm::RequestId{1}, ShardIndex{shard}, BlockIndex{0}, std::uint64_t{shard} << 16, 1u << 16);
  }

  ManifestId id;
  core::Bitfield have;
  Peers peers;
  core::ActionQueue<SwarmAction> actions;
  ServeSession session;
  std::vector<std::pair<PeerId, SwarmMessage>> messages;
  std::vector<PeerId> pieces, dropped;
};

}  // namespace

TEST_CASE("serve session: one upload slot, a host mate served outside it, the choked refused") {
  Fixture f;
  const TimePoint t{1s};
  f.peers.where[peer(1)] = {"dc1", "r2", "h1"};
  f.peers.where[peer(2)] = {"dc1", "r3", "h2"};
  f.peers.where[peer(3)] = {"dc1", "r1", "h0"};  // our host
  for (std::uint64_t n : {1, 2, 3}) f.session.on_interested(t, peer(n), f.interested());
  CHECK(f.sent(MessageType::kBitfield).size() == 3);
  const auto unchoked = f.sent(MessageType::kUnchoke);
  REQUIRE(unchoked.size() == 2);  // the one slot, and the host mate
  CHECK(std::count(unchoked.begin(), unchoked.end(), peer(3)) == 1);
  const PeerId in_slot = unchoked[0] == peer(3) ? unchoked[1] : unchoked[0];
  const PeerId waiting = in_slot == peer(1) ? peer(2) : peer(1);
  f.session.on_request(t, in_slot, f.request(0));
  f.session.on_request(t, peer(3), f.request(1));
  f.session.on_request(t, waiting, f.request(0));
  f.session.on_request(t, in_slot, f.request(3));  // not held here
  f.drain();
  CHECK(f.pieces == std::vector<PeerId>{in_slot, peer(3)});
  CHECK(f.sent(MessageType::kRefuse) == std::vector<PeerId>{waiting, in_slot});
  // The slot rotates: the waiting one is unchoked, the other choked and its queue dropped.
  f.session.handle_timeout(f.session.slot_rotation_at());
  CHECK(f.sent(MessageType::kChoke) == std::vector<PeerId>{in_slot});
  CHECK(f.dropped == std::vector<PeerId>{in_slot});
  // Stopped: every requester hears the version is gone.
  f.session.stop();
  CHECK(f.sent(MessageType::kUnknownVersion).size() == 3);
}

TEST_CASE("serve session: a leech shows and serves nothing, and a shard goes into another datacenter once") {
  Fixture leech(/*offered=*/false);
  leech.session.on_interested(TimePoint{1s}, peer(1), leech.interested());
  leech.session.on_request(TimePoint{1s}, peer(1), leech.request(0));
  CHECK(leech.sent(MessageType::kUnchoke).empty());
  CHECK(leech.sent(MessageType::kRefuse) == std::vector<PeerId>{peer(1)});
  CHECK(leech.pieces.empty());

  Fixture f(/*offered=*/true, /*slots=*/2);
  const TimePoint t{1s};
  f.peers.where[peer(1)] = {"dc2", "r1", "h1"};
  f.peers.where[peer(2)] = {"dc2", "r2", "h2"};
  for (std::uint64_t n : {1, 2}) f.session.on_interested(t, peer(n), f.interested());
  f.session.on_request(t, peer(1), f.request(0));
  f.session.on_request(t + 1s, peer(2), f.request(0));  // its mate carries shard 0 across
  f.session.on_request(t + 1s, peer(2), f.request(1));
  f.drain();
  CHECK(f.pieces == std::vector<PeerId>{peer(1), peer(2)});
  CHECK(f.sent(MessageType::kDeferred) == std::vector<PeerId>{peer(2)});
  // The carrier's connection goes: the shard is another's to carry.
  f.session.on_gone(t + 2s, peer(1));
  f.session.on_request(t + 2s, peer(2), f.request(0));
  f.drain();
  CHECK(f.pieces.size() == 3);
}
