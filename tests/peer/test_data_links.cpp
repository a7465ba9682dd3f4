// The data links table without sockets: the duplicate-connection tie-break,
// lanes, messages waiting for a connection, and what a close takes with it.
#include <doctest/doctest.h>

#include "transport/data_links.hpp"
#include "support/gossip_network.hpp"

using namespace tensorhub;
using namespace tensorhub::peer;
using namespace tensorhub::testing;

namespace {

struct FakeConnection {
  PeerId peer;
  std::uint8_t lane_index = 0;
  bool is_established = true;
  bool is_closed = false;
  Status closed_why;
  std::vector<swarm::SwarmMessage> sent;

  bool established() const { return is_established; }
  bool closed() const { return is_closed; }
  void close(Status why) {
    is_closed = true;
    closed_why = std::move(why);
  }
  void send(const swarm::SwarmMessage& m) { sent.push_back(m); }
  const PeerId& remote() const { return peer; }
  std::uint8_t lane() const { return lane_index; }
};

using Links = DataLinks<FakeConnection>;

std::shared_ptr<FakeConnection> connection_to(const PeerId& peer, std::uint8_t lane = 0) {
  auto c = std::make_shared<FakeConnection>();
  c->peer = peer;
  c->lane_index = lane;
  return c;
}

swarm::SwarmMessage message(swarm::MessageType type, swarm::RequestId request_id = {}) {
  swarm::SwarmMessage m;
  m.type = type;
  m.request_id = request_id;
  return m;
}

// Two ids, ordered.
std::pair<PeerId, PeerId> small_and_large() {
  PeerId a = GossipNetwork::identity_for(1).public_key(), b = GossipNetwork::identity_for(2).public_key();
  return a < b ? std::pair{a, b} : std::pair{b, a};
}

}  // namespace

TEST_CASE("data links: when both sides connect at once, each keeps the connection the smaller id opened") {
  const auto [small, large] = small_and_large();
  CHECK(replaces_existing_link(small, large, /*opened_by_self=*/true));
  CHECK_FALSE(replaces_existing_link(small, large, /*opened_by_self=*/false));
  CHECK_FALSE(replaces_existing_link(large, small, /*opened_by_self=*/true));
  CHECK(replaces_existing_link(large, small, /*opened_by_self=*/false));

  // Both ends, each with its own table, end with the same connection: the one `small` opened.
  Links at_small(small), at_large(large);
  auto small_out = connection_to(large), large_in = connection_to(small);   // opened by small
  auto large_out = connection_to(small), small_in = connection_to(large);   // opened by large
  at_small.add_outbound(large, small_out);
  at_large.add_outbound(small, large_out);
  at_small.add_inbound(small_in);
  at_large.add_inbound(large_in);
  // At small: its inbound (opened by large) completes first, then its outbound replaces it.
  auto first = at_small.on_established(*small_in);
  CHECK(first.kind == Links::Established::kLinked);
  auto second = at_small.on_established(*small_out);
  CHECK(second.kind == Links::Established::kLinked);
  REQUIRE(second.replaced.size() == 1);
  CHECK(second.replaced[0] == small_in);
  CHECK(&at_small.link(large)->primary() == small_out.get());
  // At large: its outbound completes first, then the inbound from small replaces it.
  CHECK(at_large.on_established(*large_out).kind == Links::Established::kLinked);
  auto replaced = at_large.on_established(*large_in);
  CHECK(replaced.kind == Links::Established::kLinked);
  REQUIRE(replaced.replaced.size() == 1);
  CHECK(replaced.replaced[0] == large_out);
  CHECK(&at_large.link(small)->primary() == large_in.get());

  // In the other order, the loser is refused outright.
  Links again(small);
  auto kept = connection_to(large), loser = connection_to(large);
  again.add_outbound(large, kept);
  again.add_inbound(loser);
  REQUIRE(again.on_established(*kept).kind == Links::Established::kLinked);
  auto refused = again.on_established(*loser);
  CHECK(refused.kind == Links::Established::kRejected);
  CHECK(loser->is_closed);
  CHECK(loser->closed_why.message() == "a duplicate connection");
  CHECK(&again.link(large)->primary() == kept.get());
}

TEST_CASE("data links: an outbound connection answered by another peer than gossip named is closed") {
  const auto [small, large] = small_and_large();
  Links links(small);
  const PeerId impostor = GossipNetwork::identity_for(3).public_key();
  auto c = connection_to(impostor);
  links.add_outbound(large, c);
  CHECK(links.send(large, message(swarm::MessageType::kInterested)));  // kept: one is opening
  auto e = links.on_established(*c);
  CHECK(e.kind == Links::Established::kRejected);
  CHECK(c->is_closed);
  CHECK(links.link(large) == nullptr);
  CHECK(links.link(impostor) == nullptr);
}

TEST_CASE("data links: messages wait for the connection, requests spread over lanes, control stays on the primary") {
  const auto [small, large] = small_and_large();
  Links links(small);
  CHECK_FALSE(links.send(large, message(swarm::MessageType::kInterested)));  // nothing opening: caller connects
  auto primary = connection_to(large);
  links.add_outbound(large, primary);
  CHECK(links.send(large, message(swarm::MessageType::kHave)));
  REQUIRE(links.on_established(*primary).kind == Links::Established::kLinked);
  REQUIRE(primary->sent.size() == 2);  // both, in order
  CHECK(primary->sent[0].type == swarm::MessageType::kInterested);
  CHECK(primary->sent[1].type == swarm::MessageType::kHave);
  auto lane1 = connection_to(large, 1);
  links.add_extra_lanes(large, {lane1});
  CHECK(links.on_established(*lane1).kind == Links::Established::kLane);
  links.send(large, message(swarm::MessageType::kRequest, swarm::RequestId{1}));  // 1 % 2 lanes: lane 1
  links.send(large, message(swarm::MessageType::kRequest, swarm::RequestId{2}));  // lane 0
  links.send(large, message(swarm::MessageType::kCancel, swarm::RequestId{1}));   // control: the primary
  REQUIRE(lane1->sent.size() == 1);
  CHECK(lane1->sent[0].request_id == swarm::RequestId{1});
  CHECK(primary->sent.size() == 4);
  // A lane not yet open falls back to the primary.
  lane1->is_established = false;
  links.send(large, message(swarm::MessageType::kRequest, swarm::RequestId{3}));
  CHECK(primary->sent.size() == 5);
}

TEST_CASE("data links: a closed lane takes the whole link, a lane that never opened does not") {
  const auto [small, large] = small_and_large();
  Links links(small);
  auto primary = connection_to(large);
  links.add_outbound(large, primary);
  REQUIRE(links.on_established(*primary).kind == Links::Established::kLinked);
  auto lane1 = connection_to(large, 1), lane2 = connection_to(large, 2);
  lane1->is_established = false;
  links.add_extra_lanes(large, {lane1, lane2});
  CHECK(links.on_closed(*lane1).kind == Links::Closed::kNothing);
  REQUIRE(links.link(large) != nullptr);
  auto lost = links.on_closed(*lane2);
  CHECK(lost.kind == Links::Closed::kLinkLost);
  CHECK(lost.peer == large);
  REQUIRE(lost.others.size() == 1);
  CHECK(lost.others[0] == primary);
  CHECK(links.link(large) == nullptr);

  // A failed handshake drops the messages that waited for it.
  auto failing = connection_to(large);
  links.add_outbound(large, failing);
  links.send(large, message(swarm::MessageType::kInterested));
  auto failed = links.on_closed(*failing);
  CHECK(failed.kind == Links::Closed::kConnectFailed);
  auto next = connection_to(large);
  links.add_outbound(large, next);
  REQUIRE(links.on_established(*next).kind == Links::Established::kLinked);
  CHECK(next->sent.empty());
}

TEST_CASE("data links: an extra lane without its primary, or a second copy of a lane, is refused") {
  const auto [small, large] = small_and_large();
  Links links(small);
  auto orphan = connection_to(large, 1);
  links.add_inbound(orphan);
  CHECK(links.on_established(*orphan).kind == Links::Established::kRejected);
  CHECK(orphan->closed_why.message() == "an extra lane without its primary connection");
  auto primary = connection_to(large);
  links.add_inbound(primary);
  REQUIRE(links.on_established(*primary).kind == Links::Established::kLinked);
  auto lane = connection_to(large, 1), twin = connection_to(large, 1);
  links.add_inbound(lane);
  links.add_inbound(twin);
  CHECK(links.on_established(*lane).kind == Links::Established::kLane);
  CHECK(links.on_established(*twin).kind == Links::Established::kRejected);
  CHECK(twin->closed_why.message() == "a duplicate lane");
  CHECK(links.take_all().size() == 2);
  CHECK(links.links().empty());
}
