// Deterministic multi-peer tests of the gossip core over the in-process
// network. Each names its seed; the run is a function of it.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "core/key_derivation.hpp"
#include "sim/hostile_member.hpp"
#include "support/gossip_network.hpp"

using namespace tensorhub;
using namespace tensorhub::gossip;
using namespace tensorhub::testing;
using namespace std::chrono_literals;

namespace {

// Starts n peers; each joins through peer 0. Runs until all see each other.
void start(GossipNetwork& net, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    net.add_peer(Topology{"dc1", "rack" + std::to_string(i % 4), "h" + std::to_string(i)});
  }
  for (std::size_t i = 1; i < n; ++i) net.join(i, {0});
  REQUIRE(net.run_until([&] { return net.converged(); }, 60s));
}

// Every live peer except `except` sees `subject` as `state`.
bool all_see(const GossipNetwork& net, std::size_t subject, Liveness state, std::set<std::size_t> except = {}) {
  for (std::size_t i = 0; i < net.size(); ++i) {
    if (i == subject || except.count(i) || !net.is_up(i)) continue;
    if (net.view(i, subject) != state) return false;
  }
  return true;
}

// Every peer's version vector has `model` at `version`.
bool all_know_head(GossipNetwork& net, const std::string& model, std::uint64_t version) {
  for (std::size_t i = 0; i < net.size(); ++i) {
    auto head = net.core(i).known_heads().head(model);
    if (!head || head->version != version) return false;
  }
  return true;
}

ManifestId id_of(std::uint8_t b) {
  ManifestId id;
  id.bytes.fill(b);
  return id;
}

// Counts "dead" events about peers that are in fact alive.
struct FalseDeathCounter {
  explicit FalseDeathCounter(GossipNetwork& network) : net(network) {
    net.on_event([this](std::size_t, const MemberEvent& e) {
      if (e.kind != MemberEventKind::kDead) return;
      auto subject = this->net.index_of(e.id);
      if (subject && this->net.is_up(*subject) && !crashed.count(*subject)) ++false_deaths;
    });
  }
  GossipNetwork& net;
  std::set<std::size_t> crashed;
  int false_deaths = 0;
};

}  // namespace

TEST_CASE("gossip cluster: 50 peers join through one seed and converge") {
  GossipNetwork net(101, GossipConfig{});
  start(net, 50);
  MESSAGE("converged at t=" << to_seconds(net.now()) << " s");
  for (std::size_t i = 0; i < net.size(); ++i) CHECK(net.core(i).live_members() == 49);
}

TEST_CASE("gossip cluster: a new record reaches every peer") {
  GossipNetwork net(102, GossipConfig{});
  start(net, 50);
  const TimePoint published = net.now();
  net.core(7).set_head(HeadEntry{"policy", 3, id_of(3)});
  auto everyone_knows = [&] { return all_know_head(net, "policy", 3); };
  REQUIRE(net.run_until(everyone_knows, 10s, 10ms));
  const double seconds = to_seconds(net.now() - published);
  MESSAGE("head reached all 50 peers in " << seconds << " s");
  CHECK(seconds < 3.0);
  // It travelled as peer 7's signed record, unchanged.
  for (std::size_t i = 0; i < net.size(); ++i) {
    if (i == 7) continue;
    const auto& theirs = net.core(i).member(net.id(7))->record->record;
    const auto& ours = net.core(7).self_record()->record;
    CHECK_MESSAGE(net.core(i).member(net.id(7))->record->encoded == net.core(7).self_record()->encoded,
                  "peer " << i << " has (" << theirs.incarnation << "," << theirs.seq << "), peer 7 has ("
                          << ours.incarnation << "," << ours.seq << ")");
  }
}

TEST_CASE("gossip cluster: a new head is pushed at once, so it crosses the swarm within a gossip interval") {
  // Each peer that first sees a newer head re-signs (if it is its own) and
  // sends a round at once, instead of waiting up to min_resign_interval and
  // gossip_interval per hop.
  for (const std::uint64_t seed : {102u, 103u, 104u}) {
    CAPTURE(seed);
    GossipNetwork net(seed, GossipConfig{});
    start(net, 50);
    const TimePoint published = net.now();
    net.core(7).set_head(HeadEntry{"policy", 3, id_of(3)});
    net.pump(7);
    auto everyone_knows = [&] { return all_know_head(net, "policy", 3); };
    REQUIRE(net.run_until(everyone_knows, 10s, 1ms));
    const double seconds = to_seconds(net.now() - published);
    MESSAGE("head reached all 50 peers in " << seconds << " s");
    CHECK(seconds < to_seconds(GossipConfig{}.gossip_interval) / 2);
  }
}

TEST_CASE("gossip cluster: a new head's push reaches every host mate, not only random peers") {
  // With the push to 2 x fanout random peers alone, about e^-6 of a swarm
  // hears a head a gossip round late; a host's mates fetch from each other
  // over NVLink, so each mate it misses is a worker late by a round.
  // Nine mates each: more than the random push (6) and a probe could reach.
  GossipNetwork net(105, GossipConfig{});
  constexpr std::size_t kPeers = 40, kPerHost = 10;
  for (std::size_t i = 0; i < kPeers; ++i) {
    net.add_peer(Topology{"dc1", "rack1", "h" + std::to_string(i / kPerHost)});
  }
  for (std::size_t i = 1; i < kPeers; ++i) net.join(i, {0});
  REQUIRE(net.run_until([&] { return net.converged(); }, 60s));
  constexpr std::size_t kPublisher = 17;
  std::set<std::size_t> reached;
  net.on_datagram([&](std::size_t from, std::size_t to, const std::vector<std::uint8_t>&) {
    if (from == kPublisher) reached.insert(to);
  });
  net.core(kPublisher).set_head(HeadEntry{"policy", 3, id_of(3)});
  net.pump(kPublisher);
  net.run_for(1us);  // the push goes out at once; no datagram arrives before 500 us
  for (std::size_t mate = 10; mate < 20; ++mate) {
    if (mate != kPublisher) CHECK_MESSAGE(reached.count(mate), "host mate " << mate << " was not pushed the head");
  }
  const std::size_t others = static_cast<std::size_t>(
      std::count_if(reached.begin(), reached.end(), [](std::size_t p) { return p < 10 || p >= 20; }));
  CHECK(others >= 1);  // the random part still goes beyond the host
}

TEST_CASE("gossip cluster: every peer detects a crashed peer") {
  GossipNetwork net(103, GossipConfig{});
  start(net, 50);
  FalseDeathCounter deaths(net);
  deaths.crashed.insert(13);
  const TimePoint crashed = net.now();
  net.crash(13);
  REQUIRE(net.run_until([&] { return all_see(net, 13, Liveness::kDead); }, 60s, 100ms));
  const double seconds = to_seconds(net.now() - crashed);
  MESSAGE("crash known to all in " << seconds << " s");
  CHECK(seconds < 10.0);
  CHECK(deaths.false_deaths == 0);
}

TEST_CASE("gossip cluster: no false death under 10% loss, the TCP fallback probe prevents false suspicion") {
  // Runs the same seed with and without the fallback: UDP loss alone raises
  // suspicions (and refutation traffic) without it, none with it.
  auto run = [](bool tcp_fallback) {
    GossipConfig config;
    config.tcp_fallback_probe = tcp_fallback;
    GossipNetwork net(104, config);
    start(net, 50);
    FalseDeathCounter deaths(net);
    net.set_conditions(NetworkConditions{0.10, 0.02, 1ms, 2ms});
    net.run_for(180s);
    CHECK(deaths.false_deaths == 0);
    net.set_conditions(NetworkConditions{});
    CHECK(net.run_until([&] { return net.converged(); }, 30s));
    std::uint64_t suspicions = 0, refutations = 0;
    for (std::size_t i = 0; i < net.size(); ++i) {
      suspicions += net.core(i).stats().suspicions;
      refutations += net.core(i).stats().refutations;
    }
    MESSAGE("180 s at 10% loss, TCP fallback " << std::string(tcp_fallback ? "on" : "off") << ": " << suspicions
                                                << " suspicions raised, " << refutations << " refutations, "
                                                << deaths.false_deaths << " false deaths");
    return suspicions;
  };
  const std::uint64_t without = run(false);
  const std::uint64_t with = run(true);
  CHECK(without > 0);
  CHECK(with == 0);
}

TEST_CASE("gossip cluster: no false death when peers pause (GC-like stalls) under 10% loss") {
  GossipNetwork net(115, GossipConfig{});
  start(net, 50);
  FalseDeathCounter deaths(net);
  net.set_conditions(NetworkConditions{0.10, 0.0, 1ms, 2ms});
  core::SplitMix64 rng(115);
  int stalls = 0;
  // Each second each peer pauses for 2 s with probability 2.5%: about 5% of
  // the swarm is paused at any moment, accusers and suspects alike.
  for (int second = 0; second < 240; ++second) {
    for (std::size_t i = 0; i < net.size(); ++i) {
      if (rng.unit() < 0.025) {
        net.stall(i, 2s);
        ++stalls;
      }
    }
    net.run_for(1s);
  }
  MESSAGE(stalls << " pauses of 2 s over 240 s: " << deaths.false_deaths << " false deaths");
  CHECK(deaths.false_deaths == 0);
  net.set_conditions(NetworkConditions{});
  CHECK(net.run_until([&] { return net.converged(); }, 30s));
}

TEST_CASE("gossip cluster: a falsely suspected peer refutes") {
  GossipNetwork net(105, GossipConfig{});
  start(net, 10);
  FalseDeathCounter deaths(net);
  const std::uint64_t before = net.core(3).self_record()->record.incarnation;
  std::vector<std::size_t> others;
  for (std::size_t i = 0; i < 10; ++i) {
    if (i != 3) others.push_back(i);
  }
  // Cut peer 3 off just long enough to be suspected, not declared dead.
  net.partition({{3}, others});
  CHECK(net.run_until([&] {
    for (std::size_t i : others) {
      if (net.view(i, 3) == Liveness::kSuspect) return true;
    }
    return false;
  }, 5s, 10ms));
  net.heal();
  REQUIRE(net.run_until([&] { return all_see(net, 3, Liveness::kAlive); }, 20s, 10ms));
  CHECK(net.core(3).stats().refutations >= 1);
  CHECK(net.core(3).self_record()->record.incarnation > before);
  CHECK(deaths.false_deaths == 0);
}

TEST_CASE("gossip cluster: both sides of a healed partition merge again") {
  GossipNetwork net(106, GossipConfig{});
  start(net, 30);
  std::vector<std::size_t> left, right;
  for (std::size_t i = 0; i < 30; ++i) (i < 15 ? left : right).push_back(i);
  net.partition({left, right});
  // Long enough that each side declares the other dead.
  REQUIRE(net.run_until([&] { return all_see(net, 20, Liveness::kDead, {right.begin(), right.end()}); }, 120s, 500ms));
  net.run_for(10s);
  net.heal();
  REQUIRE(net.run_until([&] { return net.converged(); }, 120s, 500ms));
  MESSAGE("merged " << to_seconds(net.now()) << " s into the run");
}

TEST_CASE("gossip cluster: a restarted peer with the same key comes back at once") {
  GossipNetwork net(107, GossipConfig{});
  start(net, 20);
  net.crash(5);
  REQUIRE(net.run_until([&] { return all_see(net, 5, Liveness::kDead); }, 60s, 100ms));
  const std::uint64_t old_incarnation = net.core(0).member(net.id(5))->incarnation;
  const TimePoint restarted = net.now();
  net.restart(5, {0});
  REQUIRE(net.run_until([&] { return all_see(net, 5, Liveness::kAlive); }, 20s, 10ms));
  const double seconds = to_seconds(net.now() - restarted);
  MESSAGE("restarted peer alive for all in " << seconds << " s");
  CHECK(seconds < 5.0);
  CHECK(net.core(0).member(net.id(5))->incarnation > old_incarnation);
  CHECK(net.core(5).live_members() == 19);
}

TEST_CASE("gossip cluster: a peer restarted after its clock stepped back is heard at once, not dropped as a replay") {
  GossipNetwork net(109, GossipConfig{});
  start(net, 20);
  net.run_for(5s);
  // A quick restart (before anyone notices the crash) whose clock went back:
  // it starts at an incarnation far below its past life's.
  net.crash(5);
  net.run_for(200ms);
  net.restart(5, {0}, /*incarnation=*/1000);
  REQUIRE(net.run_until([&] { return all_see(net, 5, Liveness::kAlive) && net.core(5).live_members() == 19; }, 20s,
                        10ms));
  const auto before = net.total_stats();
  net.run_for(60s);
  const auto after = net.total_stats();
  // Its datagrams are believed: nobody suspects it, and it stops refuting.
  CHECK(all_see(net, 5, Liveness::kAlive));
  CHECK(after.suspicions - before.suspicions == 0);
  CHECK(net.core(5).stats().refutations <= 2);
  CHECK(after.dropped_replayed - before.dropped_replayed < 10);
  MESSAGE("replays dropped in the minute after: " << after.dropped_replayed - before.dropped_replayed);
}

TEST_CASE("gossip cluster: two live processes with one identity are reported by both, and others keep working") {
  GossipNetwork net(110, GossipConfig{});
  start(net, 10);
  std::set<std::size_t> reporting;
  net.on_event([&](std::size_t peer, const gossip::MemberEvent& e) {
    if (e.kind == gossip::MemberEventKind::kIdentityConflict && e.id == net.id(3)) reporting.insert(peer);
  });
  const std::size_t twin = net.add_peer(Topology{"dc1", "rack9", "h-twin"}, /*key_index=*/3);
  const TimePoint joined = net.now();
  net.join(twin, {0});
  REQUIRE(net.run_until([&] { return reporting.size() == 2; }, 30s, 100ms));
  MESSAGE("both twins report the conflict " << to_seconds(net.now() - joined) << " s after the second joined");
  CHECK(reporting == std::set<std::size_t>{3, twin});
  CHECK(net.core(3).stats().identity_conflicts >= 1);
  // The other members still see each other alive.
  for (std::size_t i = 0; i < 10; ++i) {
    if (i != 3) CHECK(net.core(i).live_members() >= 9);
  }
}

TEST_CASE("gossip cluster: with an admission list, a key holder off the list never becomes a member, and one taken off is removed") {
  GossipNetwork net(111, GossipConfig{});
  for (std::size_t i = 0; i < 10; ++i) net.add_peer(Topology{"dc1", "rack" + std::to_string(i % 4), "h" + std::to_string(i)});
  auto listed = std::make_shared<gossip::GossipCore::AdmissionList>();
  for (std::size_t i = 0; i < 9; ++i) listed->insert(net.id(i));
  for (std::size_t i = 0; i < 10; ++i) net.core(i).set_admitted(listed);
  for (std::size_t i = 1; i < 10; ++i) net.join(i, {0});
  net.run_for(30s);
  // Peer 9 holds the swarm key but is not listed: nobody lists it as a member.
  for (std::size_t i = 0; i < 9; ++i) {
    CHECK(net.core(i).live_members() == 8);
    CHECK_FALSE(net.core(i).member(net.id(9)).has_value());
  }
  CHECK(net.total_stats().not_admitted > 0);
  // Peer 4 is taken off the list everywhere but itself: removed at once, and
  // its datagrams, streams and records, which go on, bring it back nowhere.
  auto fewer = std::make_shared<gossip::GossipCore::AdmissionList>(*listed);
  fewer->erase(net.id(4));
  std::size_t removed = 0;
  net.on_event([&](std::size_t, const gossip::MemberEvent& e) {
    if (e.kind == gossip::MemberEventKind::kRemoved && e.id == net.id(4)) ++removed;
  });
  for (std::size_t i = 0; i < 10; ++i) {
    if (i == 4) continue;
    net.core(i).set_admitted(fewer);
    net.pump(i);
  }
  CHECK(removed == 8);
  const auto before = net.total_stats().not_admitted;
  net.run_for(60s);
  for (std::size_t i = 0; i < 9; ++i) {
    if (i == 4) continue;
    CHECK_FALSE(net.core(i).member(net.id(4)).has_value());
    CHECK(net.core(i).live_members() == 7);
  }
  CHECK(net.total_stats().not_admitted > before);
}

TEST_CASE("gossip cluster: stale push-pull state does not resurrect the dead") {
  GossipNetwork net(108, GossipConfig{});
  start(net, 10);
  // Peer 9 is cut off and still believes peer 4 alive when 4 dies.
  std::vector<std::size_t> rest;
  for (std::size_t i = 0; i < 9; ++i) rest.push_back(i);
  net.partition({{9}, rest});
  net.crash(4);
  REQUIRE(net.run_until([&] { return all_see(net, 4, Liveness::kDead, {9}); }, 60s, 100ms));
  bool revived = false;
  net.on_event([&](std::size_t, const MemberEvent& e) {
    if (e.id == net.id(4) && (e.kind == MemberEventKind::kAlive || e.kind == MemberEventKind::kJoined)) revived = true;
  });
  net.heal();
  // Peer 9 pushes its stale view through push-pull and gossip for minutes.
  net.run_for(240s);
  CHECK_FALSE(revived);
  CHECK(all_see(net, 4, Liveness::kDead));
  CHECK(net.converged());
}

TEST_CASE("gossip cluster: a peer that leaves is seen as left, not dead") {
  GossipNetwork net(109, GossipConfig{});
  start(net, 20);
  FalseDeathCounter deaths(net);
  net.leave(11);
  REQUIRE(net.run_until([&] { return net.core(11).leave_settled(); }, 5s, 10ms));
  net.crash(11);  // the process exits after its leave settled
  REQUIRE(net.run_until([&] { return all_see(net, 11, Liveness::kLeft); }, 10s, 10ms));
  net.run_for(30s);
  CHECK(all_see(net, 11, Liveness::kLeft));
  CHECK(deaths.false_deaths == 0);
}

TEST_CASE("gossip cluster: forged, foreign and replayed messages change nothing") {
  GossipNetwork net(110, GossipConfig{});
  start(net, 8);
  std::vector<std::uint8_t> captured;
  net.on_datagram([&](std::size_t from, std::size_t to, const std::vector<std::uint8_t>& bytes) {
    if (from == 1 && to == 2 && captured.empty()) captured = bytes;
  });
  net.run_for(5s);
  REQUIRE_FALSE(captured.empty());

  // An insider (it holds the swarm key) forges a record in peer 5's name,
  // with a higher incarnation, signed with its own key.
  DatagramForger forger(1000, 1ull << 50);  // holds the swarm key, is no member
  const Identity& insider = forger.identity();
  PeerRecord forged = net.core(5).self_record()->record;
  forged.incarnation += 100;
  forged.heads = {HeadEntry{"policy", 99, id_of(9)}};
  forged.id = insider.public_key();
  auto signed_by_insider = sign_record(forged, insider);
  REQUIRE(signed_by_insider.is_ok());
  auto bytes = (*signed_by_insider)->encoded;
  // Put the victim's id back in the body: the signature no longer matches.
  std::copy(net.id(5).bytes.begin(), net.id(5).bytes.end(), bytes.begin() + 4);
  REQUIRE(peek_record_version(bytes)->id == net.id(5));
  auto forged_record = std::make_shared<SignedRecord>();
  forged_record->encoded = bytes;
  forged_record->record = forged;
  forged_record->record.id = net.id(5);
  Packet packet;
  packet.sender = insider.public_key();
  packet.kind = PacketKind::kGossip;
  const std::uint64_t rejected_before = net.core(2).stats().records_rejected;
  net.inject_datagram(2, net.address(1), forger.seal(net.id(2), packet, std::vector<OutgoingItem>{RecordPtr(forged_record)}));

  // A replayed old record of peer 3: peer 3 has moved on since.
  const RecordPtr old_record = net.core(3).self_record();
  net.core(3).set_head(HeadEntry{"policy", 4, id_of(4)});
  net.run_for(3s);
  const std::uint64_t stale_before = net.core(2).stats().records_stale;
  net.inject_datagram(2, net.address(1), forger.seal(net.id(2), packet, std::vector<OutgoingItem>{old_record}));

  // A captured datagram, replayed verbatim.
  const std::uint64_t replayed_before = net.core(2).stats().dropped_replayed;
  net.inject_datagram(2, net.address(1), captured);

  // A datagram sealed under another swarm key, and plain garbage.
  auto foreign_key = SwarmKey::generate();
  Sealer outsider(core::derive_subkey(foreign_key, "gossip"), insider.public_key(), 7);
  const std::uint64_t unauthenticated_before = net.core(2).stats().dropped_unauthenticated;
  const auto foreign_pair = derive_pair_key(insider, net.id(2), core::derive_subkey(foreign_key, "gossip"));
  REQUIRE(foreign_pair);
  net.inject_datagram(2, "192.0.2.1:1", outsider.seal_packet(*foreign_pair, packet, {}));
  net.inject_datagram(2, "192.0.2.1:1", std::vector<std::uint8_t>(200, 0x41));
  net.run_for(2s);

  const auto& stats = net.core(2).stats();
  CHECK(stats.records_rejected == rejected_before + 1);
  CHECK(stats.records_stale > stale_before);
  CHECK(stats.dropped_replayed == replayed_before + 1);
  CHECK(stats.dropped_unauthenticated >= unauthenticated_before + 2);
  CHECK(net.core(2).member(net.id(5))->record->record.heads.empty());
  CHECK(net.core(2).member(net.id(3))->record->record.heads.size() == 1);
  CHECK(net.core(2).known_heads().head("policy")->version == 4);
  CHECK(net.converged());
}

TEST_CASE("gossip cluster: a peer without the swarm key never becomes a member") {
  GossipNetwork net(111, GossipConfig{});
  start(net, 10);
  const std::size_t outsider = net.add_outsider();
  net.join(outsider, {0, 1});
  net.run_for(60s);
  for (std::size_t i = 0; i < 10; ++i) {
    CHECK_FALSE(net.core(i).member(net.id(outsider)).has_value());
    CHECK(net.core(i).live_members() == 9);
  }
  CHECK(net.core(outsider).live_members() == 0);
  CHECK(net.core(0).stats().streams_failed + net.core(1).stats().streams_failed > 0);
}

TEST_CASE("gossip cluster: version vectors merge to the highest head per model") {
  GossipNetwork net(112, GossipConfig{});
  start(net, 30);
  net.core(3).set_head(HeadEntry{"policy", 5, id_of(5)});
  net.core(8).set_head(HeadEntry{"policy", 7, id_of(7)});
  net.core(8).set_head(HeadEntry{"critic", 2, id_of(2)});
  net.core(21).set_head(HeadEntry{"critic", 1, id_of(1)});
  auto merged = [&] {
    for (std::size_t i = 0; i < net.size(); ++i) {
      const VersionVector vv = net.core(i).known_heads();
      auto policy = vv.head("policy");
      auto critic = vv.head("critic");
      if (!policy || policy->version != 7 || policy->manifest_id != id_of(7)) return false;
      if (!critic || critic->version != 2) return false;
    }
    return true;
  };
  CHECK(net.run_until(merged, 10s, 10ms));
}

TEST_CASE("gossip cluster: the same seed gives the same run") {
  auto run = [](std::uint64_t seed) {
    GossipNetwork net(seed, GossipConfig{}, NetworkConditions{0.05, 0.01, 1ms, 3ms});
    for (std::size_t i = 0; i < 20; ++i) net.add_peer();
    for (std::size_t i = 1; i < 20; ++i) net.join(i, {0});
    net.run_for(30s);
    net.crash(4);
    net.run_for(20s);
    std::vector<std::uint64_t> fingerprint;
    for (std::size_t i = 0; i < net.size(); ++i) {
      if (!net.is_up(i)) continue;
      fingerprint.push_back(net.core(i).stats().datagrams_out);
      fingerprint.push_back(net.core(i).stats().bytes_in);
      fingerprint.push_back(net.core(i).self_record()->record.incarnation);
    }
    fingerprint.push_back(net.datagrams_sent());
    return fingerprint;
  };
  CHECK(run(7) == run(7));
  CHECK(run(7) != run(8));
}

TEST_CASE("gossip cluster: floods, oversized and truncated datagrams are dropped and counted") {
  GossipNetwork net(113, GossipConfig{});
  start(net, 6);
  const auto before = net.core(2).stats();
  // A flood from one address: far beyond the per-address rate.
  for (int i = 0; i < 5000; ++i) net.inject_datagram(2, "192.0.2.9:4000", std::vector<std::uint8_t>(100, 0x55));
  net.inject_datagram(2, "192.0.2.10:4000", std::vector<std::uint8_t>(2000, 0x55));  // oversized
  // A real datagram cut short.
  std::vector<std::uint8_t> real;
  net.on_datagram([&](std::size_t from, std::size_t, const std::vector<std::uint8_t>& bytes) {
    if (from == 1 && real.empty()) real = bytes;
  });
  net.run_for(3s);
  REQUIRE_FALSE(real.empty());
  net.inject_datagram(2, "192.0.2.11:4000", std::vector<std::uint8_t>(real.begin(), real.begin() + 30));
  net.run_for(2s);
  const auto& after = net.core(2).stats();
  CHECK(after.dropped_rate_limited - before.dropped_rate_limited >= 5000 - 2000);
  CHECK(after.dropped_oversized - before.dropped_oversized == 1);
  CHECK(after.dropped_unauthenticated - before.dropped_unauthenticated >= 1);
  // Everyone else's traffic still gets through.
  net.run_for(10s);
  CHECK(net.converged());
}

TEST_CASE("gossip cluster: record changes are coalesced, not signed one by one") {
  GossipNetwork net(114, GossipConfig{});
  start(net, 5);
  const std::uint64_t signed_before = net.core(1).stats().records_signed;
  ManifestId id;
  id.bytes[0] = 9;
  for (int step = 0; step < 100; ++step) {  // one holding's progress
    net.core(1).set_holding(HoldingEntry{"policy", 9, id, static_cast<std::uint16_t>(step * 10)});
    net.run_for(10ms);  // 100 updates in 1 s
  }
  net.run_for(1s);
  const std::uint64_t signatures = net.core(1).stats().records_signed - signed_before;
  MESSAGE("100 holding updates in 1 s produced " << signatures << " signed records");
  CHECK(signatures <= 6);  // one per min_resign_interval (250 ms), plus the last
  CHECK(net.core(0).member(net.id(1))->record->record.holdings.front().progress_permille == 990);
}

TEST_CASE("gossip cluster: a peer started before its seed keeps trying and joins") {
  GossipNetwork net(116, GossipConfig{});
  start(net, 5);
  net.crash(0);  // the seed is not up yet when peer 5 starts
  const std::size_t late = net.add_peer();
  net.join(late, {0});
  net.run_for(3s);
  CHECK(net.core(late).live_members() == 0);
  net.restart(0, {1});
  REQUIRE(net.run_until([&] { return net.core(late).live_members() == 5; }, 30s, 100ms));
  MESSAGE("joined " << to_seconds(net.now()) << " s into the run, after the seed came up");
}

TEST_CASE("gossip cluster: a member's forged deaths at incarnations nobody signed remove nobody") {
  // A member (it holds the swarm key) claims three peers dead at UINT64_MAX
  // and at their incarnation + 1, sends bytes that merely peek as a victim's
  // own record at UINT64_MAX to that victim, and repeats it for a while.
  GossipNetwork net(112, GossipConfig{});
  start(net, 12);
  FalseDeathCounter deaths(net);
  DatagramForger forger(1001, 1ull << 50);
  const Identity& insider = forger.identity();
  Packet packet;
  packet.sender = insider.public_key();
  packet.kind = PacketKind::kGossip;
  const std::vector<std::size_t> victims = {0, 4, 7};
  std::map<std::size_t, std::uint64_t> incarnation_before;
  for (std::size_t v : victims) incarnation_before[v] = net.core(v).self_record()->record.incarnation;
  const std::uint64_t refutations_before = net.core(4).stats().refutations;
  for (int round = 0; round < 20; ++round) {
    std::vector<OutgoingItem> claims;
    for (std::size_t v : victims) {
      claims.push_back(forger.claim(Liveness::kDead, net.id(v), UINT64_MAX));
      claims.push_back(forger.claim(Liveness::kSuspect, net.id(v), incarnation_before[v] + 1, net.id(9)));
    }
    for (std::size_t to : {2, 4, 5, 11}) net.inject_datagram(to, net.address(1), forger.seal(net.id(to), packet, claims));
    // Bytes that peek as peer 4's own record at UINT64_MAX (not signed by it).
    PeerRecord fake = net.core(4).self_record()->record;
    fake.id = insider.public_key();
    fake.incarnation = UINT64_MAX;
    auto signed_fake = sign_record(fake, insider);
    REQUIRE(signed_fake.is_ok());
    auto posing = std::make_shared<SignedRecord>(**signed_fake);
    std::copy(net.id(4).bytes.begin(), net.id(4).bytes.end(), posing->encoded.begin() + 4);
    REQUIRE(peek_record_version(posing->encoded)->id == net.id(4));
    posing->record.id = net.id(4);
    net.inject_datagram(4, net.address(1), forger.seal(net.id(4), packet, std::vector<OutgoingItem>{RecordPtr(posing)}));
    net.run_for(3s);
  }
  net.run_for(30s);
  for (std::size_t v : victims) {
    CHECK(all_see(net, v, Liveness::kAlive));
    const std::uint64_t now_inc = net.core(v).self_record()->record.incarnation;
    CHECK(now_inc >= incarnation_before[v]);  // never wrapped
    CHECK(now_inc < UINT64_MAX);
  }
  CHECK(net.core(4).stats().refutations == refutations_before);  // the posing record proved nothing
  CHECK(net.core(2).stats().liveness_forged > 0);
  CHECK(deaths.false_deaths == 0);

  // A real crash is still detected within the usual bound.
  deaths.crashed.insert(7);
  const TimePoint crashed = net.now();
  net.crash(7);
  REQUIRE(net.run_until([&] { return all_see(net, 7, Liveness::kDead); }, 60s, 100ms));
  CHECK(to_seconds(net.now() - crashed) < 10.0);
  CHECK(deaths.false_deaths == 0);
}

TEST_CASE("gossip cluster: a peer whose only other member crashes goes on, never spinning") {
  GossipNetwork net(113, GossipConfig{});
  start(net, 2);
  net.crash(0);
  CHECK_NOTHROW(net.run_for(120s));
  CHECK(net.view(1, 0) == Liveness::kDead);
}

TEST_CASE("gossip cluster: a hostile member's forgeries silence, remove and impersonate nobody") {
  // One member runs every forgery of the threat model (sim/hostile_member.hpp)
  // against 5 random peers a second for 2 minutes, then keeps acking for a
  // crashed peer in its name and its own.
  GossipNetwork net(117, GossipConfig{});
  start(net, 30);
  FalseDeathCounter deaths(net);
  const std::size_t hostile_index = 29;
  sim::HostileMember hostile(net, hostile_index, 7);
  hostile.sniff();
  const std::uint64_t replayed_before = net.total_stats().dropped_replayed;
  for (int second = 0; second < 120; ++second) {
    hostile.round(5);
    net.run_for(1s);
  }
  CHECK(deaths.false_deaths == 0);
  CHECK(net.converged());
  const GossipStats total = net.total_stats();
  MESSAGE(hostile.datagrams_sent() << " forged datagrams: " << total.dropped_forged_sender << " posing senders, "
          << total.liveness_unsigned << " claims in others' names, " << total.liveness_forged
          << " claims above signed incarnations, " << total.records_rejected << " posing records refused; " << total.refutations << " refutations");
  CHECK(total.dropped_forged_sender >= 600);  // every posing datagram (4 a receiver a round) refused...
  CHECK(total.dropped_replayed == replayed_before);  // ...before it could touch a replay window
  CHECK(total.liveness_unsigned > 0);
  CHECK(total.liveness_forged > 0);
  CHECK(total.records_rejected >= 500);

  // A real crash is detected within the usual bound, whatever it acks.
  const std::size_t crashed = 11;
  deaths.crashed.insert(crashed);
  const TimePoint crash_at = net.now();
  net.crash(crashed);
  bool all_dead = false;
  for (int tick = 0; tick < 200 && !all_dead; ++tick) {
    hostile.ack_for(crashed, 4);
    net.run_for(100ms);
    all_dead = all_see(net, crashed, Liveness::kDead);
  }
  REQUIRE(all_dead);
  MESSAGE("crash known by all in " << to_seconds(net.now() - crash_at) << " s under forged acks");
  CHECK(to_seconds(net.now() - crash_at) < 10.0);
  CHECK(deaths.false_deaths == 0);
  CHECK(net.total_stats().acks_unasked > 0);  // sniffed probe numbers, acked in its own name: refused
}

TEST_CASE("gossip cluster: a push-pull request replayed 200 times is answered at the host's rate, not on demand") {
  // Someone who captured a member's SyncRequest replays it on new
  // connections from one host: each answer would carry the whole member
  // table. The peer answers the burst, then its rate, and closes the rest.
  GossipNetwork net(118, GossipConfig{});
  start(net, 8);
  DatagramForger forger(1002, 5);
  Sealer sealer(core::derive_subkey(GossipNetwork::members_key(), "gossip"), forger.id(), 5);
  const auto frame = sealer.seal_stream(StreamKind::kSyncRequest, encode_sync_request({}));
  GossipCore& core = net.core(3);
  int answered = 0;
  const TimePoint at = net.now();
  for (StreamId n = 0; n < 200; ++n) {
    const StreamId id = kInboundStreamBit | (1u << 20) | n;
    core.handle_stream_accepted(at, id, "192.0.2.9:" + std::to_string(40000 + n));
    core.handle_stream_frame(at, id, frame);
    while (auto action = core.poll_stream()) {
      if (action->id == id && action->kind == StreamAction::Kind::kSend) ++answered;
    }
  }
  MESSAGE(answered << " of 200 replays answered, " << core.stats().syncs_refused << " refused");
  CHECK(answered == static_cast<int>(GossipConfig{}.sync_answers_burst));
  CHECK(core.stats().syncs_refused == 200 - static_cast<std::uint64_t>(answered));
  net.run_for(10s);
  CHECK(net.converged());  // members' own push-pull goes on
}

TEST_CASE("gossip core: its timers are named in one table, and its next timeout is their earliest") {
  GossipNetwork net(119, GossipConfig{});
  start(net, 4);
  GossipCore& core = net.core(0);
  auto consistent = [&] { return core.timers().next() == core.next_timeout(); };
  CHECK(consistent());
  CHECK(core.timers().at(GossipTimer::kProbe) != kTimeNever);
  CHECK(core.timers().at(GossipTimer::kGossip) != kTimeNever);
  CHECK(core.timers().at(GossipTimer::kJoin) == kTimeNever);  // members are known
  // A crashed member: a probe stage, then a suspicion stands, each in its place.
  net.crash(3);
  bool saw_probe_stage = false, saw_suspicion = false;
  for (int i = 0; i < 400 && !(saw_probe_stage && saw_suspicion); ++i) {
    net.run_for(25ms);
    CHECK(consistent());
    saw_probe_stage = saw_probe_stage || core.timers().at(GossipTimer::kProbeStage) != kTimeNever;
    saw_suspicion = saw_suspicion || core.timers().at(GossipTimer::kSuspicion) != kTimeNever;
  }
  CHECK(saw_probe_stage);
  CHECK(saw_suspicion);
  // A leaving core probes no more.
  core.leave(net.now());
  CHECK(core.timers().at(GossipTimer::kProbe) == kTimeNever);
}
