#include <doctest/doctest.h>

#include "support/gossip_network.hpp"
#include "transport/secure_channel.hpp"

using namespace tensorhub;
using namespace tensorhub::transport;

namespace {
SwarmKey key(std::uint8_t fill) {
  std::array<std::uint8_t, 32> bytes{};
  bytes.fill(fill);
  return SwarmKey::from_bytes(bytes);
}
Identity id(std::uint64_t n) { return testing::GossipNetwork::identity_for(300 + n); }
}  // namespace

TEST_CASE("secure channel: both sides authenticate and agree on keys") {
  const Identity alice = id(1), bob = id(2);
  const SwarmKey swarm = key(7);
  HandshakeInitiator i(alice, swarm);
  HandshakeResponder r(bob, swarm);
  const auto hello = i.hello();
  CHECK(hello.size() == kHelloBytes);
  auto welcome = r.on_hello(hello);
  REQUIRE(welcome.is_ok());
  CHECK(welcome->size() == kWelcomeBytes);
  auto finish = i.on_welcome(*welcome);
  REQUIRE(finish.is_ok());
  REQUIRE(r.on_finish(*finish).is_ok());
  CHECK(i.keys().remote == bob.public_key());
  CHECK(r.keys().remote == alice.public_key());
  CHECK(i.keys().send == r.keys().receive);
  CHECK(i.keys().receive == r.keys().send);
  CHECK(i.keys().send != i.keys().receive);

  // Frames flow in order; tampering, replay and reordering are caught.
  FrameSealer to_bob(i.keys().send);
  FrameOpener at_bob(r.keys().receive);
  const std::vector<std::uint8_t> m1 = {1, 2, 3}, m2 = {4, 5};
  const auto f1 = to_bob.seal(m1), f2 = to_bob.seal(m2);
  std::vector<std::uint8_t> out;
  CHECK_FALSE(at_bob.open(f2, out));  // out of order
  REQUIRE(at_bob.open(f1, out));
  CHECK(out == m1);
  CHECK_FALSE(at_bob.open(f1, out));  // replay
  auto bad = f2;
  bad[0] ^= 1;
  CHECK_FALSE(at_bob.open(bad, out));
  REQUIRE(at_bob.open(f2, out));
  CHECK(out == m2);
}

TEST_CASE("secure channel: a wrong swarm key fails at the first message, either way") {
  const Identity alice = id(3), bob = id(4);
  // An outsider initiator: the member responder refuses its hello.
  HandshakeInitiator outsider(alice, key(1));
  HandshakeResponder member(bob, key(2));
  auto welcome = member.on_hello(outsider.hello());
  CHECK_FALSE(welcome.is_ok());
  CHECK(welcome.status().message().find("swarm's key") != std::string::npos);
  // An outsider responder: it refuses the member's hello, and a welcome it
  // makes with its own key does not satisfy the member initiator.
  HandshakeInitiator member_i(alice, key(2));
  const auto hello = member_i.hello();
  HandshakeResponder outsider_r(bob, key(1));
  CHECK_FALSE(outsider_r.on_hello(hello).is_ok());
  HandshakeInitiator outsider_i(alice, key(1));
  HandshakeResponder outsider_r2(bob, key(1));
  auto outsider_welcome = outsider_r2.on_hello(outsider_i.hello());
  REQUIRE(outsider_welcome.is_ok());
  auto finish = member_i.on_welcome(*outsider_welcome);
  CHECK_FALSE(finish.is_ok());
  CHECK(finish.status().message().find("swarm's key") != std::string::npos);
}

TEST_CASE("secure channel: impersonation, replay and tampering do not complete") {
  const Identity alice = id(5), bob = id(6), mallory = id(7);
  const SwarmKey swarm = key(9);
  HandshakeInitiator i(alice, swarm);
  const auto hello = i.hello();

  // Any flipped byte of any message breaks it.
  for (std::size_t at = 0; at < hello.size(); ++at) {
    auto copy = hello;
    copy[at] ^= 0x80;
    HandshakeResponder r(bob, swarm);
    CHECK_FALSE(r.on_hello(copy).is_ok());
  }
  HandshakeResponder r(bob, swarm);
  auto welcome = r.on_hello(hello);
  REQUIRE(welcome.is_ok());
  for (std::size_t at = 0; at < welcome->size(); ++at) {
    auto copy = *welcome;
    copy[at] ^= 0x80;
    HandshakeInitiator fresh(alice, swarm);
    (void)fresh.hello();
    CHECK_FALSE(fresh.on_welcome(copy).is_ok());
  }

  // A member that replays Alice's hello (it saw it on the wire) cannot
  // finish as Alice: it would need her signature over a new transcript.
  HandshakeResponder victim(bob, swarm);
  auto welcome2 = victim.on_hello(hello);
  REQUIRE(welcome2.is_ok());
  HandshakeInitiator as_mallory(mallory, swarm);
  (void)as_mallory.hello();
  auto mallory_finish = as_mallory.on_welcome(*welcome2);  // the mac covers another hello
  CHECK_FALSE(mallory_finish.is_ok());
  // Nor with Alice's old finish from another session.
  auto finish = i.on_welcome(*welcome);
  REQUIRE(finish.is_ok());
  CHECK_FALSE(victim.on_finish(*finish).is_ok());
  CHECK(r.on_finish(*finish).is_ok());
}

TEST_CASE("secure channel: the lane number travels, authenticated, and is bounded") {
  const Identity alice = id(7), bob = id(8);
  const SwarmKey swarm = key(9);
  HandshakeInitiator i(alice, swarm, 3);
  HandshakeResponder r(bob, swarm);
  const auto hello = i.hello();
  auto welcome = r.on_hello(hello);
  REQUIRE(welcome.is_ok());
  auto finish = i.on_welcome(*welcome);
  REQUIRE(finish.is_ok());
  REQUIRE(r.on_finish(*finish).is_ok());
  CHECK(i.keys().lane == 3);
  CHECK(r.keys().lane == 3);

  // Changing the lane byte breaks the hello's MAC.
  auto altered = hello;
  altered[3] = static_cast<std::uint8_t>(altered[3] + 1);
  HandshakeResponder r2(bob, swarm);
  CHECK_FALSE(r2.on_hello(altered).is_ok());
  // A lane past the last is not a data connection at all.
  altered[3] = static_cast<std::uint8_t>('1' + kMaxLanes);
  HandshakeResponder r3(bob, swarm);
  auto refused = r3.on_hello(altered);
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.status().message().find("not a TensorHub data connection") != std::string::npos);
}
