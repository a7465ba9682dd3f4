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
// A wall-clock time, in microseconds since the epoch.
constexpr std::uint64_t kNow = 1'795'000'000'000'000;
constexpr std::uint64_t kSecond = 1'000'000;
}  // namespace

TEST_CASE("secure channel: both sides authenticate and agree on keys") {
  const Identity alice = id(1), bob = id(2);
  const SwarmKey swarm = key(7);
  HelloReplayCache bobs_replays;
  HandshakeInitiator i(alice, swarm, bob.public_key());
  HandshakeResponder r(bob, swarm, bobs_replays);
  const auto hello = i.hello(kNow);
  CHECK(hello.size() == kHelloBytes);
  auto welcome = r.on_hello(hello, kNow + 2000);
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
  HelloReplayCache replays;
  // An outsider initiator: the member responder refuses its hello.
  HandshakeInitiator outsider(alice, key(1), bob.public_key());
  HandshakeResponder member(bob, key(2), replays);
  auto welcome = member.on_hello(outsider.hello(kNow), kNow);
  CHECK_FALSE(welcome.is_ok());
  CHECK(welcome.status().message().find("swarm's key") != std::string::npos);
  // An outsider responder: it refuses the member's hello, and a welcome it
  // makes with its own key does not satisfy the member initiator.
  HandshakeInitiator member_i(alice, key(2), bob.public_key());
  const auto hello = member_i.hello(kNow);
  HandshakeResponder outsider_r(bob, key(1), replays);
  CHECK_FALSE(outsider_r.on_hello(hello, kNow).is_ok());
  HandshakeInitiator outsider_i(alice, key(1), bob.public_key());
  HandshakeResponder outsider_r2(bob, key(1), replays);
  auto outsider_welcome = outsider_r2.on_hello(outsider_i.hello(kNow), kNow);
  REQUIRE(outsider_welcome.is_ok());
  auto finish = member_i.on_welcome(*outsider_welcome);
  CHECK_FALSE(finish.is_ok());
  CHECK(finish.status().message().find("swarm's key") != std::string::npos);
}

TEST_CASE("secure channel: impersonation, replay and tampering do not complete") {
  const Identity alice = id(5), bob = id(6), mallory = id(7);
  const SwarmKey swarm = key(9);
  HandshakeInitiator i(alice, swarm, bob.public_key());
  const auto hello = i.hello(kNow);

  // Any flipped byte of any message breaks it.
  for (std::size_t at = 0; at < hello.size(); ++at) {
    auto copy = hello;
    copy[at] ^= 0x80;
    HelloReplayCache replays;
    HandshakeResponder r(bob, swarm, replays);
    CHECK_FALSE(r.on_hello(copy, kNow).is_ok());
  }
  HelloReplayCache bobs_replays;
  HandshakeResponder r(bob, swarm, bobs_replays);
  auto welcome = r.on_hello(hello, kNow);
  REQUIRE(welcome.is_ok());
  for (std::size_t at = 0; at < welcome->size(); ++at) {
    auto copy = *welcome;
    copy[at] ^= 0x80;
    HandshakeInitiator fresh(alice, swarm, bob.public_key());
    (void)fresh.hello(kNow);
    CHECK_FALSE(fresh.on_welcome(copy).is_ok());
  }

  // A member that replays Alice's hello to a Bob that forgot it (restarted,
  // within the freshness window) cannot finish as Alice: it would need her
  // signature over a new transcript.
  HelloReplayCache restarted;
  HandshakeResponder victim(bob, swarm, restarted);
  auto welcome2 = victim.on_hello(hello, kNow);
  REQUIRE(welcome2.is_ok());
  HandshakeInitiator as_mallory(mallory, swarm, bob.public_key());
  (void)as_mallory.hello(kNow);
  auto mallory_finish = as_mallory.on_welcome(*welcome2);  // the mac covers another hello
  CHECK_FALSE(mallory_finish.is_ok());
  // Nor with Alice's old finish from another session.
  auto finish = i.on_welcome(*welcome);
  REQUIRE(finish.is_ok());
  CHECK_FALSE(victim.on_finish(*finish).is_ok());
  CHECK(r.on_finish(*finish).is_ok());
}

TEST_CASE("secure channel: a hello is good for one responder, within 30 s of its clock, once") {
  // An outsider who saw Alice's hello to Bob on the wire replays it: to
  // Carol, to Bob again, and to Bob a minute later (after a restart). Each
  // is refused before any public-key work.
  const Identity alice = id(10), bob = id(11), carol = id(12);
  const SwarmKey swarm = key(4);
  HelloReplayCache bobs_replays, carols_replays;
  HandshakeInitiator i(alice, swarm, bob.public_key());
  const auto hello = i.hello(kNow);
  HandshakeResponder first(bob, swarm, bobs_replays);
  REQUIRE(first.on_hello(hello, kNow + kSecond / 10).is_ok());

  HandshakeResponder at_carol(carol, swarm, carols_replays);
  auto to_carol = at_carol.on_hello(hello, kNow + kSecond);
  REQUIRE_FALSE(to_carol.is_ok());
  CHECK(to_carol.status().message().find("meant another peer") != std::string::npos);

  HandshakeResponder again(bob, swarm, bobs_replays);
  auto replayed = again.on_hello(hello, kNow + 2 * kSecond);
  REQUIRE_FALSE(replayed.is_ok());
  CHECK(replayed.status().message().find("replayed") != std::string::npos);

  HelloReplayCache after_restart;
  HandshakeResponder later(bob, swarm, after_restart);
  auto stale = later.on_hello(hello, kNow + 61 * kSecond);
  REQUIRE_FALSE(stale.is_ok());
  CHECK(stale.status().message().find("61 s from this clock") != std::string::npos);

  // Clocks up to 30 s apart, either way, are fine; further is not.
  for (std::int64_t skew : {-29, 29}) {
    HandshakeInitiator skewed(alice, swarm, bob.public_key());
    HandshakeResponder r(bob, swarm, bobs_replays);
    CHECK(r.on_hello(skewed.hello(kNow), kNow + static_cast<std::uint64_t>(skew * 1'000'000)).is_ok());
  }
  HandshakeInitiator ahead(alice, swarm, bob.public_key());
  HandshakeResponder r(bob, swarm, bobs_replays);
  CHECK_FALSE(r.on_hello(ahead.hello(kNow + 31 * kSecond), kNow).is_ok());

  // The cache forgets what is stale anyway, and holds at most its capacity.
  HelloReplayCache small(4);
  HelloMac mac{};
  for (std::uint8_t n = 0; n < 10; ++n) {
    mac[0] = n;
    CHECK(small.admit(mac, kNow));
  }
  CHECK(small.size() == 4);
  CHECK_FALSE(small.admit(mac, kNow));  // the newest is still there
  mac[0] = 42;
  CHECK(small.admit(mac, kNow + 61 * kSecond));
  CHECK(small.size() == 1);  // the rest were older than twice the window
}

TEST_CASE("secure channel: a responder refuses an initiator with its own identity") {
  // A second process started with a copy of the key file, or a hello
  // reflected back: either way not a neighbour.
  const Identity bob = id(16), bobs_twin = id(16);
  const SwarmKey swarm = key(6);
  HelloReplayCache replays;
  HandshakeInitiator twin(bobs_twin, swarm, bob.public_key());
  HandshakeResponder r(bob, swarm, replays);
  auto refused = r.on_hello(twin.hello(kNow), kNow);
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.status().message().find("own identity") != std::string::npos);
}

TEST_CASE("secure channel: an initiator refuses a responder other than the peer it meant") {
  const Identity alice = id(13), bob = id(14), mallory = id(15);
  const SwarmKey swarm = key(5);
  HelloReplayCache replays;
  // Alice means Bob; Mallory (a member, at Bob's old address) answers.
  HandshakeInitiator i(alice, swarm, bob.public_key());
  HandshakeInitiator to_mallory(alice, swarm, mallory.public_key());
  HandshakeResponder r(mallory, swarm, replays);
  CHECK_FALSE(r.on_hello(i.hello(kNow), kNow).is_ok());  // the hello was not for it
  auto welcome = r.on_hello(to_mallory.hello(kNow), kNow);
  REQUIRE(welcome.is_ok());
  (void)i.hello(kNow);
  auto finish = i.on_welcome(*welcome);
  REQUIRE_FALSE(finish.is_ok());
}

TEST_CASE("secure channel: the lane number travels, authenticated, and is bounded") {
  const Identity alice = id(7), bob = id(8);
  const SwarmKey swarm = key(9);
  HelloReplayCache replays;
  HandshakeInitiator i(alice, swarm, bob.public_key(), 3);
  HandshakeResponder r(bob, swarm, replays);
  const auto hello = i.hello(kNow);
  auto welcome = r.on_hello(hello, kNow);
  REQUIRE(welcome.is_ok());
  auto finish = i.on_welcome(*welcome);
  REQUIRE(finish.is_ok());
  REQUIRE(r.on_finish(*finish).is_ok());
  CHECK(i.keys().lane == 3);
  CHECK(r.keys().lane == 3);

  // Changing the lane byte breaks the hello's MAC.
  auto altered = hello;
  altered[3] = static_cast<std::uint8_t>(altered[3] + 1);
  HandshakeResponder r2(bob, swarm, replays);
  CHECK_FALSE(r2.on_hello(altered, kNow).is_ok());
  // A lane past the last is not a data connection at all.
  altered[3] = static_cast<std::uint8_t>('1' + kMaxLanes);
  HandshakeResponder r3(bob, swarm, replays);
  auto refused = r3.on_hello(altered, kNow);
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.status().message().find("not a TensorHub data connection") != std::string::npos);
}
