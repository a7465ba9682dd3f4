// The publisher's reveal policy: distinct shards to different requesters
// first, quotas topped up on HAVE, copies returned when a requester is
// choked or leaves.
#include <doctest/doctest.h>

#include <set>

#include "swarm/seed_scheduler.hpp"

using namespace tensorhub;
using namespace tensorhub::swarm;

namespace {

PeerId peer(std::uint8_t b) {
  PeerId id;
  id.bytes.fill(b);
  return id;
}

}  // namespace

TEST_CASE("seed scheduler: active requesters are shown distinct shards first") {
  SeedScheduler seeder(12, 2, 1);
  std::set<std::uint32_t> shown;
  for (std::uint8_t p = 1; p <= 6; ++p) {
    seeder.add_requester(peer(p), core::Bitfield(12));
    auto revealed = seeder.activate(peer(p));
    REQUIRE(revealed.size() == 2);
    for (ShardIndex s : revealed) CHECK(shown.insert(s.value).second);  // never shown to anyone before
    CHECK(seeder.pending(peer(p)) == 2);
  }
  CHECK(shown.size() == 12);
  for (std::uint32_t s = 0; s < 12; ++s) CHECK(seeder.copies(ShardIndex{s}) == 1);
}

TEST_CASE("seed scheduler: nothing for inactive requesters; a HAVE tops the quota up with the rarest shard") {
  SeedScheduler seeder(4, 1, 2);
  seeder.add_requester(peer(1), core::Bitfield(4));
  seeder.add_requester(peer(2), core::Bitfield(4));
  CHECK(seeder.pending(peer(1)) == 0);  // choked: shown nothing
  auto first = seeder.activate(peer(1));
  REQUIRE(first.size() == 1);
  auto second = seeder.activate(peer(2));
  REQUIRE(second.size() == 1);
  CHECK(first[0] != second[0]);
  // Requester 1 completes its shard: it is shown a shard with no copy yet.
  auto next = seeder.on_have(peer(1), first[0]);
  REQUIRE(next.size() == 1);
  CHECK(next[0] != second[0]);
  CHECK(seeder.copies(next[0]) == 1);
  // A shard it got from another peer also counts, and also tops it up.
  auto after_gift = seeder.on_have(peer(1), second[0]);
  CHECK(seeder.copies(second[0]) == 2);
  CHECK(after_gift.empty());  // still one pending: `next`
}

TEST_CASE("seed scheduler: what a requester holds is never shown; all it lacks is shown eventually") {
  SeedScheduler seeder(6, 2, 3);
  core::Bitfield has(6);
  has.set(0);
  has.set(1);
  seeder.add_requester(peer(1), has);  // e.g. unchanged since the parent version
  std::set<std::uint32_t> shown;
  auto take = [&](const std::vector<ShardIndex>& v) {
    for (ShardIndex s : v) {
      CHECK(s.value >= 2);
      shown.insert(s.value);
    }
  };
  auto revealed = seeder.activate(peer(1));
  take(revealed);
  for (int round = 0; round < 10 && shown.size() < 4; ++round) {
    const std::vector<std::uint32_t> pending(shown.begin(), shown.end());
    for (std::uint32_t s : pending) take(seeder.on_have(peer(1), ShardIndex{s}));
  }
  CHECK(shown.size() == 4);
  for (std::uint32_t s : shown) CHECK(seeder.on_have(peer(1), ShardIndex{s}).empty());  // nothing left to show
  CHECK(seeder.pending(peer(1)) == 0);
}

TEST_CASE("seed scheduler: choking or losing a requester gives its unfinished shards to others") {
  SeedScheduler seeder(2, 1, 4);
  core::Bitfield holds_first(2);
  holds_first.set(0);
  seeder.add_requester(peer(3), holds_first);  // shard 0 has a copy already
  seeder.add_requester(peer(1), core::Bitfield(2));
  seeder.add_requester(peer(2), core::Bitfield(2));
  auto one = seeder.activate(peer(1));
  REQUIRE(one.size() == 1);
  CHECK(one[0] == ShardIndex{1});  // the shard with no copy
  seeder.deactivate(peer(1));
  CHECK(seeder.copies(ShardIndex{1}) == 0);
  auto two = seeder.activate(peer(2));
  REQUIRE(two.size() == 1);
  CHECK(two[0] == ShardIndex{1});  // no copy again: shown to the next requester
  seeder.remove_requester(peer(2));
  CHECK(seeder.copies(ShardIndex{1}) == 0);
  seeder.remove_requester(peer(3));
  CHECK(seeder.copies(ShardIndex{0}) == 0);
}
