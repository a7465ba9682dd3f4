#include <doctest/doctest.h>

#include <map>
#include <set>
#include <vector>

#include "core/rng.hpp"
#include "swarm/request_table.hpp"
#include "support/tagged_ids.hpp"

using namespace tensorhub;
using namespace tensorhub::swarm;
using namespace std::chrono_literals;
using namespace tensorhub::testing;

namespace {

// Four shards of 4 MiB in blocks of 1 MiB; the last shard is 2.5 MiB.
ShardLayout four_shards() { return ShardLayout{4 * 4 * (1u << 20) - 3 * (1u << 19), 4u << 20, 1u << 20}; }

struct Freed {
  std::vector<std::pair<std::uint32_t, std::uint32_t>> blocks;
  auto callback() {
    return [this](ShardIndex s, BlockIndex b) { blocks.emplace_back(s.value, b.value); };
  }
};

}  // namespace

TEST_CASE("request table: a request over a range is filed on every block it touches and leaves them all at once") {
  RequestTable table(four_shards(), 800ms);
  RequestIds ids(40);
  const PeerId a = peer_tagged(1), b = peer_tagged(2);
  table.add_holder(a, /*remote=*/false);
  table.add_holder(b, /*remote=*/false);
  // Bytes 0.5 MiB .. 2.5 MiB of shard 1 touch blocks 0, 1 and 2.
  const ShardRange range{ShardIndex{1}, 1u << 19, 2u << 20};
  const RequestId id = table.add(kStart, a, range, ids);
  CHECK(id == RequestId{41});
  for (std::uint32_t block = 0; block < 4; ++block) CHECK(table.asked(ShardIndex{1}, BlockIndex{block}) == (block < 3));
  CHECK(table.asked(ShardIndex{1}));
  CHECK_FALSE(table.asked(ShardIndex{0}));
  CHECK(table.in_flight(a) == 1);  // one request, whatever its length
  CHECK(table.in_flight_total() == 1);
  const RequestTable::Request* found = table.find(a, id);
  REQUIRE(found != nullptr);
  CHECK(found->range.offset == range.offset);
  CHECK(found->range.length == range.length);
  CHECK(table.find(b, id) == nullptr);  // another holder's id is not this one
  // Another holder asked for block 2 alone shares it.
  table.add(kStart, b, ShardRange{ShardIndex{1}, 2u << 20, 1u << 20}, ids);
  int on_block_2 = 0;
  table.for_each_on(ShardIndex{1}, BlockIndex{2}, [&](const RequestTable::Request&) { ++on_block_2; });
  CHECK(on_block_2 == 2);
  // Dropped through any block it touches, it leaves all three; the blocks
  // left with no request are named once each.
  Freed freed;
  table.drop(a, ShardIndex{1}, BlockIndex{1}, freed.callback());
  CHECK(freed.blocks == std::vector<std::pair<std::uint32_t, std::uint32_t>>{{1, 0}, {1, 1}});
  CHECK(table.asked(ShardIndex{1}, BlockIndex{2}));  // b's
  CHECK_FALSE(table.asked(ShardIndex{1}, BlockIndex{0}));
  CHECK(table.find(a, id) == nullptr);
  CHECK(table.in_flight(a) == 0);
  CHECK(table.in_flight_total() == 1);
  // A walk over every request visits a multi-block request once.
  table.add(kStart, a, range, ids);
  int visited = 0;
  table.end([&](const RequestTable::Request&) { ++visited; });
  CHECK(visited == 2);
}

TEST_CASE("request table: a block that arrives settles every request on it, cancelling the other holders'") {
  RequestTable table(four_shards(), 800ms);
  RequestIds ids;
  const PeerId a = peer_tagged(1), b = peer_tagged(2), c = peer_tagged(3);
  for (const PeerId& p : {a, b, c}) table.add_holder(p, false);
  const ShardRange block0 = ShardLayout(four_shards()).block_range(ShardIndex{0}, BlockIndex{0});
  table.add(kStart, a, block0, ids);
  table.add(kStart + 10ms, b, block0, ids);
  const RequestId from_c = table.add(kStart + 20ms, c, block0, ids);
  CHECK_FALSE(table.may_duplicate(kStart + 30ms, peer_tagged(4), ShardIndex{0}, BlockIndex{0}, /*duplicates=*/3));
  std::vector<PeerId> cancelled;
  Freed freed;
  table.settle(kStart + 50ms, b, ShardIndex{0}, BlockIndex{0},
               [&](const RequestTable::Request& r) { cancelled.push_back(r.peer); }, freed.callback());
  CHECK(cancelled == std::vector<PeerId>{a, c});  // oldest first, not the sender
  CHECK(freed.blocks.size() == 1);
  CHECK_FALSE(table.asked(ShardIndex{0}, BlockIndex{0}));
  CHECK(table.in_flight_total() == 0);
  CHECK(table.find(c, from_c) == nullptr);
  table.close(ShardIndex{0});
  CHECK_FALSE(table.asked(ShardIndex{0}));
}

TEST_CASE("request table: a request let go stays findable until answered or its connection closes") {
  RequestTable table(four_shards(), 800ms);
  RequestIds ids;
  const PeerId a = peer_tagged(1);
  table.add_holder(a, false);
  const ShardLayout layout = four_shards();
  const RequestId first = table.add(kStart, a, layout.block_range(ShardIndex{0}, BlockIndex{0}), ids);
  const RequestId second = table.add(kStart, a, layout.block_range(ShardIndex{2}, BlockIndex{3}), ids);
  Freed freed;
  table.release_all_of(a, /*still_answered=*/true, freed.callback());
  CHECK(freed.blocks.size() == 2);
  CHECK(table.in_flight(a) == 0);
  CHECK_FALSE(table.asked(ShardIndex{2}));
  table.mark_superseded(a, first);
  REQUIRE(table.find(a, first) != nullptr);
  CHECK(table.find(a, first)->superseded);
  CHECK(table.find(a, second) != nullptr);
  table.answered(a, first);
  CHECK(table.find(a, first) == nullptr);
  table.connection_closed(a);
  CHECK(table.find(a, second) == nullptr);
  table.remove_holder(a);
  CHECK(table.in_flight(a) == 0);
}

TEST_CASE("request table: deadlines follow the holder's silence, not the request's age, and skip landing payloads") {
  const Duration timeout = 800ms;
  RequestTable table(four_shards(), timeout);
  RequestIds ids;
  const PeerId near = peer_tagged(1), far = peer_tagged(2);
  table.add_holder(near, false);
  table.add_holder(far, /*remote=*/true);
  const ShardLayout layout = four_shards();
  CHECK(table.next_deadline() == kTimeNever);
  table.add(kStart, near, layout.block_range(ShardIndex{0}, BlockIndex{0}), ids);
  table.add(kStart + 100ms, near, layout.block_range(ShardIndex{0}, BlockIndex{1}), ids);
  table.add(kStart, far, layout.block_range(ShardIndex{1}, BlockIndex{0}), ids);
  CHECK(table.in_flight_remote() == 1);
  CHECK(table.next_deadline() == kStart + timeout);  // across the WAN it would be 4x
  // A delivery restarts the holder's clock for what it still owes.
  table.note_delivery(kStart + 500ms, near);
  table.refresh_deadlines();
  std::vector<RequestTable::Request> expired;
  table.expired(kStart + timeout, expired);
  CHECK(expired.empty());
  table.expired(kStart + 500ms + timeout, expired);
  CHECK(expired.size() == 2);
  // A payload landing has no deadline.
  table.mark_landing(near, ShardIndex{0}, BlockIndex{0});
  expired.clear();
  table.expired(kStart + 500ms + timeout, expired);
  REQUIRE(expired.size() == 1);
  CHECK(expired[0].range.offset == 1u << 20);
  expired.clear();
  table.expired(kStart + timeout * 4, expired);
  CHECK(expired.size() == 2);  // the far one too, at four timeouts
  // A landing payload's block gets no second holder, however overdue.
  CHECK_FALSE(table.may_duplicate(kStart + 10s, far, ShardIndex{0}, BlockIndex{0}, 4));
  CHECK(table.may_duplicate(kStart + 10s, far, ShardIndex{0}, BlockIndex{1}, 4));
  CHECK_FALSE(table.may_duplicate(kStart + 10s, near, ShardIndex{0}, BlockIndex{1}, 4));  // asked of it already
  CHECK_FALSE(table.may_duplicate(kStart + 10s, far, ShardIndex{0}, BlockIndex{1}, 1));   // duplicates used up
}

TEST_CASE("request table: random operations keep the counts of a simple model") {
  const ShardLayout layout = four_shards();
  RequestTable table(layout, 800ms);
  RequestIds ids;
  core::SplitMix64 rng(11);
  std::vector<PeerId> holders;
  for (std::uint8_t i = 1; i <= 5; ++i) {
    holders.push_back(peer_tagged(i));
    table.add_holder(holders.back(), i == 5);
  }
  // The model: per (shard, block), the holders asked, oldest first.
  std::map<std::pair<std::uint32_t, std::uint32_t>, std::vector<PeerId>> model;
  std::map<PeerId, std::size_t> in_flight;
  std::size_t freed_count = 0;
  auto freed = [&](ShardIndex, BlockIndex) { ++freed_count; };
  TimePoint now = kStart;
  for (int step = 0; step < 4000; ++step) {
    now += 1ms;
    const std::uint32_t shard = static_cast<std::uint32_t>(rng.next() % layout.shard_count());
    const std::uint32_t block = static_cast<std::uint32_t>(rng.next() % layout.block_count(ShardIndex{shard}));
    const PeerId& peer = holders[rng.next() % holders.size()];
    auto& asked = model[{shard, block}];
    const bool has = std::find(asked.begin(), asked.end(), peer) != asked.end();
    switch (rng.next() % 4) {
      case 0:
      case 1:
        if (!has && asked.size() < RequestTable::kMaxRequestsPerBlock) {
          table.add(now, peer, layout.block_range(ShardIndex{shard}, BlockIndex{block}), ids);
          asked.push_back(peer);
          ++in_flight[peer];
        }
        break;
      case 2: {
        const std::size_t before = freed_count;
        table.drop(peer, ShardIndex{shard}, BlockIndex{block}, freed);
        if (has) {
          std::erase(asked, peer);
          --in_flight[peer];
          CHECK(freed_count - before == (asked.empty() ? 1u : 0u));
        } else {
          CHECK(freed_count == before);
        }
        break;
      }
      case 3: {
        std::vector<PeerId> cancelled;
        table.settle(now, peer, ShardIndex{shard}, BlockIndex{block},
                     [&](const RequestTable::Request& r) { cancelled.push_back(r.peer); }, freed);
        std::vector<PeerId> expected;
        for (const PeerId& p : asked) {
          --in_flight[p];
          if (!(p == peer)) expected.push_back(p);
        }
        CHECK(cancelled == expected);
        asked.clear();
        break;
      }
    }
    CHECK(table.asked(ShardIndex{shard}, BlockIndex{block}) == !asked.empty());
    if (step % 97 == 0) {
      std::size_t total = 0, remote = 0;
      for (const PeerId& p : holders) {
        CHECK(table.in_flight(p) == in_flight[p]);
        total += in_flight[p];
        if (p == holders.back()) remote += in_flight[p];
      }
      CHECK(table.in_flight_total() == total);
      CHECK(table.in_flight_remote() == remote);
      (void)table.next_deadline();  // checks the table's invariants in debug builds
    }
  }
}
