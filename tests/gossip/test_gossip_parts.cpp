// Unit tests of the gossip core's parts: anti-replay, rate limiting,
// suspicion timing, the piggyback queue, version vectors and member merging.
#include <doctest/doctest.h>

#include "gossip/broadcast_queue.hpp"
#include "gossip/member_table.hpp"
#include "gossip/rate_limiter.hpp"
#include "gossip/replay_window.hpp"
#include "gossip/suspicion.hpp"
#include "gossip/version_vector.hpp"
#include "support/gossip_network.hpp"

using namespace tensorhub;
using namespace tensorhub::gossip;
using namespace std::chrono_literals;

namespace {

RecordPtr record(std::uint64_t key, std::uint64_t incarnation, std::uint64_t seq, bool leaving = false) {
  const Identity id = testing::GossipNetwork::identity_for(key);
  PeerRecord r;
  r.id = id.public_key();
  r.incarnation = incarnation;
  r.seq = seq;
  r.gossip_addr = "10.0.0." + std::to_string(key) + ":7946";
  r.leaving = leaving;
  auto signed_record = sign_record(r, id);
  REQUIRE(signed_record.is_ok());
  return *signed_record;
}

PeerId peer(std::uint64_t key) { return testing::GossipNetwork::identity_for(key).public_key(); }

const SuspicionTimeouts kTimeouts{2s, 8s, 3};
// A claim as the member table sees it (signatures are checked before it).
LivenessItem claim(Liveness state, std::uint64_t target, std::uint64_t incarnation, std::uint64_t from) {
  return LivenessItem{state, peer(target), incarnation, peer(from), {}};
}
const TimePoint kT0 = TimePoint(10s);

}  // namespace

TEST_CASE("replay window: fresh, duplicate, reordered, too old, another boot only when moved to it") {
  ReplayWindow w;
  CHECK(w.accept(5, 10));
  CHECK_FALSE(w.accept(5, 10));  // duplicate
  CHECK(w.accept(5, 12));
  CHECK(w.accept(5, 11));        // reordered within the window
  CHECK_FALSE(w.accept(5, 11));
  CHECK(w.accept(5, 100));
  CHECK(w.accept(5, 40));        // 60 behind: still inside
  CHECK_FALSE(w.accept(5, 36));  // 64 behind: too old
  CHECK_FALSE(w.accept(4, 1000));  // another boot: smaller
  CHECK_FALSE(w.accept(6, 1));     // or larger, alike
  CHECK(w.boot_id() == 5);
  w.restart(3);                    // the sender's signed record names boot 3
  CHECK(w.accept(3, 1));
  CHECK_FALSE(w.accept(3, 1));
  CHECK_FALSE(w.accept(5, 101));   // its past life's datagrams are replays now
}

TEST_CASE("rate limiter: one flooding address is cut, others are not") {
  RateLimiter limiter(100, 10, 3);
  TimePoint t = kT0;
  int allowed = 0;
  for (int i = 0; i < 50; ++i) allowed += limiter.allow("flood", t);
  CHECK(allowed == 10);  // the burst
  CHECK(limiter.allow("quiet", t));
  t += 100ms;            // 10 more tokens
  allowed = 0;
  for (int i = 0; i < 50; ++i) allowed += limiter.allow("flood", t);
  CHECK(allowed == 10);
  // The table stays bounded.
  for (int i = 0; i < 100; ++i) limiter.allow("a" + std::to_string(i), t);
  CHECK(limiter.tracked() == 3);
  // A host is one budget, whatever port it sends from.
  t += 1s;
  allowed = 0;
  for (int port = 1; port <= 50; ++port) allowed += limiter.allow("192.0.2.7:" + std::to_string(port), t);
  CHECK(allowed == 10);
  CHECK(RateLimiter::host_of("192.0.2.7:7946") == "192.0.2.7");
  CHECK(RateLimiter::host_of("[2001:db8::1]:7946") == "[2001:db8::1]");
  CHECK(RateLimiter::host_of("2001:db8::1") == "2001:db8::1");
  CHECK(RateLimiter::host_of("flood") == "flood");
}

TEST_CASE("suspicion: starts at max, reaches min after the expected confirmations") {
  Suspicion s(kT0, 2s, 8s, 3, peer(1));
  CHECK(s.deadline() == kT0 + 8s);
  CHECK(s.confirm(peer(2)));
  CHECK_FALSE(s.confirm(peer(2)));  // the same accuser again
  const TimePoint after_one = s.deadline();
  CHECK(after_one < kT0 + 8s);
  CHECK(after_one > kT0 + 2s);
  CHECK(s.confirm(peer(3)));
  CHECK(s.deadline() < after_one);
  CHECK(s.confirm(peer(4)));
  CHECK(s.deadline() == kT0 + 2s);
  CHECK(s.confirmations() == 3);
  Suspicion none(kT0, 2s, 8s, 0, peer(1));  // tiny clusters: straight to min
  CHECK(none.deadline() == kT0 + 2s);
}

TEST_CASE("broadcast queue: fewest transmissions first, limits, invalidation") {
  BroadcastQueue q;
  q.enqueue(record(1, 5, 0));
  q.enqueue(record(2, 5, 0));
  q.enqueue(claim(Liveness::kSuspect, 3, 7, 1));
  CHECK(q.size() == 3);
  // A newer record of peer 1 replaces the queued one.
  q.enqueue(record(1, 5, 1));
  CHECK(q.size() == 3);
  // A record of peer 3 at a higher incarnation retires the suspicion of it.
  q.enqueue(record(3, 8, 0));
  CHECK(q.size() == 3);
  auto first = q.take(4096, 2);
  CHECK(first.size() == 3);
  for (const auto& item : first) CHECK(std::holds_alternative<RecordPtr>(item));
  // The budget bounds what one datagram carries.
  q.enqueue(claim(Liveness::kDead, 9, 1, 1));
  auto small = q.take(encoded_item_size(claim(Liveness::kDead, 9, 1, 1)) + 1, 2);
  REQUIRE(small.size() == 1);
  CHECK(std::holds_alternative<LivenessItem>(small.front()));  // never sent: goes first
  q.take(4096, 2);
  CHECK(q.empty());  // everything reached its limit of 2
}

TEST_CASE("version vector: merge is commutative, associative and idempotent") {
  ManifestId a, b, c;
  a.bytes.fill(1);
  b.bytes.fill(2);
  c.bytes.fill(3);
  VersionVector x, y, z;
  x.merge(HeadEntry{"policy", 3, a});
  x.merge(HeadEntry{"critic", 1, a});
  y.merge(HeadEntry{"policy", 5, b});
  z.merge(HeadEntry{"critic", 4, c});
  z.merge(HeadEntry{"policy", 4, c});
  VersionVector xy = x, yx = y;
  xy.merge(y);
  yx.merge(x);
  CHECK(xy == yx);
  VersionVector left = xy, right = y;
  left.merge(z);
  right.merge(z);
  right.merge(x);
  CHECK(left == right);
  VersionVector again = left;
  again.merge(left);
  CHECK(again == left);
  CHECK(left.head("policy")->version == 5);
  CHECK(left.head("critic")->version == 4);
  CHECK_FALSE(left.merge(HeadEntry{"policy", 2, a}));
  CHECK(left.merge(HeadEntry{"value", 1, a}));
}

TEST_CASE("member table: records, refutation, death, leave, no resurrection") {
  MemberTable t(100);
  CHECK(t.apply_record(record(1, 5, 0), kT0) == RecordOutcome::kJoined);
  CHECK(t.apply_record(record(1, 5, 0), kT0) == RecordOutcome::kStale);
  CHECK(t.apply_record(record(1, 5, 1), kT0) == RecordOutcome::kUpdated);
  CHECK(t.apply_record(record(1, 4, 9), kT0) == RecordOutcome::kStale);
  CHECK(t.live_count() == 1);

  // Suspect at the current incarnation; a stale suspicion is ignored.
  CHECK(t.apply_liveness(claim(Liveness::kSuspect, 1, 4, 2), kT0, kTimeouts) == LivenessOutcome::kIgnored);
  CHECK(t.apply_liveness(claim(Liveness::kSuspect, 1, 5, 2), kT0, kTimeouts) == LivenessOutcome::kSuspected);
  CHECK(t.apply_liveness(claim(Liveness::kSuspect, 1, 5, 3), kT0, kTimeouts) == LivenessOutcome::kConfirmed);
  CHECK(t.apply_liveness(claim(Liveness::kSuspect, 1, 5, 3), kT0, kTimeouts) == LivenessOutcome::kIgnored);
  CHECK(t.suspects().count(peer(1)) == 1);
  // Newer content at the same incarnation does not clear the suspicion...
  CHECK(t.apply_record(record(1, 5, 2), kT0) == RecordOutcome::kUpdated);
  CHECK(t.find(peer(1))->liveness == Liveness::kSuspect);
  // ...a refutation (higher incarnation) does.
  CHECK(t.apply_record(record(1, 6, 0), kT0) == RecordOutcome::kAliveAgain);
  CHECK(t.find(peer(1))->liveness == Liveness::kAlive);
  CHECK(t.suspects().empty());

  // Another member's word of death starts a suspicion, or confirms one,
  // however many say so...
  CHECK(t.apply_liveness(claim(Liveness::kDead, 1, 6, 2), kT0, kTimeouts) == LivenessOutcome::kSuspected);
  CHECK(t.find(peer(1))->liveness == Liveness::kSuspect);
  CHECK(t.apply_liveness(claim(Liveness::kDead, 1, 6, 2), kT0, kTimeouts) == LivenessOutcome::kIgnored);
  for (std::uint64_t accuser = 3; accuser < 9; ++accuser) {
    CHECK(t.apply_liveness(claim(Liveness::kDead, 1, 6, accuser), kT0, kTimeouts) ==
          (accuser <= 5 ? LivenessOutcome::kConfirmed : LivenessOutcome::kIgnored));  // 3 confirmations: the floor
  }
  CHECK(t.find(peer(1))->liveness == Liveness::kSuspect);
  CHECK(t.find(peer(1))->claim->from == peer(2));
  // ...and only this peer's own timeout makes the death.
  const LivenessItem own = claim(Liveness::kDead, 1, 6, 99);
  CHECK(t.declare_dead(own, kT0 + 2s));
  CHECK(t.find(peer(1))->claim == own);
  // Death is final for its incarnation: same-incarnation records cannot revive.
  CHECK(t.live_count() == 0);
  CHECK_FALSE(t.is_news(RecordVersion{peer(1), 6, 99}));
  CHECK(t.apply_record(record(1, 6, 5), kT0) == RecordOutcome::kStale);
  CHECK(t.apply_liveness(claim(Liveness::kSuspect, 1, 6, 2), kT0, kTimeouts) == LivenessOutcome::kIgnored);
  // A restart with a higher incarnation comes back.
  CHECK(t.apply_record(record(1, 9, 0), kT0) == RecordOutcome::kAliveAgain);
  CHECK(t.live_count() == 1);

  // Leaving.
  CHECK(t.apply_record(record(2, 1, 0), kT0) == RecordOutcome::kJoined);
  CHECK(t.apply_record(record(2, 1, 1, true), kT0) == RecordOutcome::kLeft);
  CHECK(t.find(peer(2))->liveness == Liveness::kLeft);
  CHECK(t.apply_liveness(claim(Liveness::kDead, 2, 1, 3), kT0, kTimeouts) == LivenessOutcome::kIgnored);

  // Tombstones expire after their ttl, not before.
  CHECK(t.expire_tombstones(kT0 + 59min, 1h).empty());
  auto removed = t.expire_tombstones(kT0 + 61min, 1h);
  REQUIRE(removed.size() == 1);
  CHECK(removed.front() == peer(2));
  CHECK(t.size() == 1);
}

TEST_CASE("member table: bounded size and push-pull dominance") {
  MemberTable t(2);
  CHECK(t.apply_record(record(1, 1, 0), kT0) == RecordOutcome::kJoined);
  CHECK(t.apply_record(record(2, 1, 0), kT0) == RecordOutcome::kJoined);
  CHECK(t.apply_record(record(3, 1, 0), kT0) == RecordOutcome::kFull);
  CHECK_FALSE(t.is_news(RecordVersion{peer(3), 1, 0}));
  CHECK(t.digest().size() == 2);

  CHECK(liveness_dominates(Liveness::kSuspect, 5, Liveness::kAlive, 5));
  CHECK(liveness_dominates(Liveness::kDead, 5, Liveness::kSuspect, 5));
  CHECK(liveness_dominates(Liveness::kAlive, 6, Liveness::kDead, 5));
  CHECK_FALSE(liveness_dominates(Liveness::kAlive, 5, Liveness::kSuspect, 5));
  CHECK_FALSE(liveness_dominates(Liveness::kDead, 4, Liveness::kAlive, 5));
}
