#include <doctest/doctest.h>

#include <vector>

#include "core/rng.hpp"
#include "swarm/neighbourhood.hpp"
#include "support/tagged_ids.hpp"

using namespace tensorhub;
using namespace tensorhub::swarm;
using namespace std::chrono_literals;
using namespace tensorhub::testing;

namespace {

core::Bitfield bits(std::uint32_t n, std::initializer_list<std::uint32_t> set) {
  core::Bitfield b(n);
  for (auto i : set) b.set(i);
  return b;
}

}  // namespace

TEST_CASE("neighbourhood: candidates become neighbours, and banned peers and neighbours are not candidates") {
  Neighbourhood hood(4, 16, 1);
  const PeerId mate = peer_tagged(1), far = peer_tagged(2);
  CHECK(hood.add_candidate(mate, Proximity::kSameHost, false));
  CHECK(hood.add_candidate(far, Proximity::kRemote, true));
  CHECK(hood.nearest_candidate(/*complete_only=*/true, false) == far);
  CHECK(hood.nearest_candidate(/*complete_only=*/false, false) == mate);
  hood.connect(mate, kStart + 2s);
  CHECK_FALSE(hood.candidates().contains(mate));
  CHECK_FALSE(hood.add_candidate(mate, Proximity::kSameHost, false));  // a neighbour already
  CHECK(hood.host_mates() == 1);
  CHECK(hood.connecting_count() == 1);
  CHECK(hood.may_yet_show_count() == 1);
  REQUIRE(hood.find(mate) != nullptr);
  CHECK(hood.find(mate)->connect_deadline == kStart + 2s);
  hood.connect(far, kStart + 2s);
  const Neighbour gone = hood.remove(far, /*ban=*/true);
  CHECK(gone.complete_source);
  CHECK(hood.banned(far));
  CHECK_FALSE(hood.add_candidate(far, Proximity::kRemote, true));
  CHECK(hood.size() == 1);
  CHECK(hood.connecting_count() == 1);
}

TEST_CASE("neighbourhood: holder counts per proximity follow bitfields, HAVEs, refusals and departures") {
  Neighbourhood hood(4, 16, 2);
  const PeerId mate = peer_tagged(1), rack = peer_tagged(2), far = peer_tagged(3);
  hood.add_candidate(mate, Proximity::kSameHost, false);
  hood.add_candidate(rack, Proximity::kSameRack, false);
  hood.add_candidate(far, Proximity::kRemote, false);
  for (const PeerId& p : {mate, rack, far}) {
    hood.connect(p, kStart + 2s);
    hood.set_connected(p);
  }
  CHECK(hood.connecting_count() == 0);
  CHECK(hood.may_yet_show_count() == 3);  // connected, bits not shown yet
  hood.set_bits(rack, bits(4, {0, 1}));
  hood.set_bits(far, bits(4, {0, 1, 2, 3}));
  CHECK(hood.find(far)->holds_all);
  CHECK(hood.may_yet_show_count() == 1);
  CHECK(hood.holders_at(ShardIndex{0}, Proximity::kSameRack) == 1);
  CHECK(hood.holders_at(ShardIndex{3}, Proximity::kRemote) == 1);
  CHECK(hood.held_within(ShardIndex{1}, Proximity::kSameDc));        // the rack mate
  CHECK_FALSE(hood.held_within(ShardIndex{3}, Proximity::kRemote));  // only across the WAN
  // A HAVE is news once; its bits begin empty when none were shown.
  CHECK(hood.add_have(mate, ShardIndex{3}));
  CHECK_FALSE(hood.add_have(mate, ShardIndex{3}));
  CHECK(hood.may_yet_show_count() == 0);
  CHECK(hood.held_within(ShardIndex{3}, Proximity::kSameRack));
  // A refusal takes the shard out of its count.
  CHECK(hood.drop_have(rack, ShardIndex{1}));
  CHECK_FALSE(hood.drop_have(rack, ShardIndex{1}));
  CHECK(hood.holders_at(ShardIndex{1}, Proximity::kSameRack) == 0);
  // A new bitfield replaces the old one in the counts.
  hood.set_bits(rack, bits(4, {2}));
  CHECK(hood.holders_at(ShardIndex{0}, Proximity::kSameRack) == 0);
  CHECK(hood.holders_at(ShardIndex{2}, Proximity::kSameRack) == 1);
  hood.remove(far, false);
  CHECK(hood.holders_at(ShardIndex{3}, Proximity::kRemote) == 0);
  // A super-seed shows as it goes: it may yet show more.
  hood.set_super_seed(rack);
  CHECK(hood.may_yet_show_count() == 1);
}

TEST_CASE("neighbourhood: a holder lost again and again is retried after a doubling back-off") {
  Neighbourhood hood(2, 16, 3);
  const PeerId holder = peer_tagged(9);
  auto connect = [&] {
    REQUIRE(hood.add_candidate(holder, Proximity::kSameDc, true));
    hood.connect(holder, kStart + 2s);
    hood.set_connected(holder);
  };
  connect();
  auto again = hood.lost_connection(kStart, holder);  // the first loss: back at once
  REQUIRE(again.has_value());
  CHECK(again->proximity == Proximity::kSameDc);
  CHECK(again->complete);
  hood.remove(holder, false);
  connect();
  CHECK_FALSE(hood.lost_connection(kStart, holder).has_value());  // nothing delivered: wait
  hood.remove(holder, false);
  CHECK(hood.next_retry() == kStart + 100ms);
  std::vector<std::pair<PeerId, CandidateList::Entry>> due;
  hood.retry_due(kStart + 99ms, due);
  CHECK(due.empty());
  hood.retry_due(kStart + 100ms, due);
  REQUIRE(due.size() == 1);
  CHECK(due[0].first == holder);
  CHECK(hood.next_retry() == kTimeNever);
  connect();
  CHECK_FALSE(hood.lost_connection(kStart + 1s, holder).has_value());
  hood.remove(holder, false);
  CHECK(hood.next_retry() == kStart + 1s + 200ms);  // doubled
  due.clear();
  hood.retry_due(kStart + 2s, due);
  connect();
  hood.note_bytes(holder, 1);  // it delivered: retried at once again
  CHECK(hood.lost_connection(kStart + 3s, holder).has_value());
  hood.remove(holder, false);
  // Gossip says it left: no retry waits for it.
  hood.forget(holder);
  CHECK(hood.next_retry() == kTimeNever);
}
