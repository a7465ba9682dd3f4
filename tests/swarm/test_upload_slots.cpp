#include <doctest/doctest.h>

#include "support/gossip_network.hpp"
#include "swarm/upload_slots.hpp"

#include <set>

using namespace tensorhub;
using namespace tensorhub::swarm;
using namespace std::chrono_literals;

namespace {
PeerId peer(std::uint64_t n) { return testing::GossipNetwork::identity_for(200 + n).public_key(); }
std::vector<SlotAction> drain(UploadSlots& s) {
  std::vector<SlotAction> out;
  while (auto a = s.poll()) out.push_back(*a);
  return out;
}
}  // namespace

TEST_CASE("upload slots: bounded, first come first served, rotated fairly") {
  UploadSlots slots(2, 1s);
  TimePoint t = TimePoint(10s);
  for (int i = 0; i < 5; ++i) slots.on_interested(t, peer(i));
  auto actions = drain(slots);
  REQUIRE(actions.size() == 2);
  CHECK(std::get<UnchokeAction>(actions[0]).peer == peer(0));
  CHECK(std::get<UnchokeAction>(actions[1]).peer == peer(1));
  CHECK(slots.serving() == 2);
  CHECK(slots.waiting() == 3);
  slots.on_interested(t, peer(0));  // already served: no change
  CHECK(drain(slots).empty());

  // Every rotation period, the longest-served yields to the next in line.
  CHECK(slots.next_timeout() == t + 1s);
  t += 1s;
  slots.handle_timeout(t);
  actions = drain(slots);
  REQUIRE(actions.size() == 4);
  CHECK(std::get<ChokeAction>(actions[0]).peer == peer(0));
  CHECK(std::get<UnchokeAction>(actions[1]).peer == peer(2));
  CHECK(std::get<ChokeAction>(actions[2]).peer == peer(1));
  CHECK(std::get<UnchokeAction>(actions[3]).peer == peer(3));

  // Over enough rotations everyone is served.
  std::set<PeerId> served;
  for (int round = 0; round < 6; ++round) {
    t += 1s;
    slots.handle_timeout(t);
    for (const auto& a : drain(slots)) {
      if (const auto* u = std::get_if<UnchokeAction>(&a)) served.insert(u->peer);
    }
  }
  CHECK(served.size() == 5);
  CHECK(slots.serving() == 2);
}

TEST_CASE("upload slots: a departing peer frees its slot at once; no rotation without a queue") {
  UploadSlots slots(1, 1s);
  TimePoint t = TimePoint(1s);
  slots.on_interested(t, peer(1));
  slots.on_interested(t, peer(2));
  drain(slots);
  slots.on_gone(t, peer(1));
  auto actions = drain(slots);
  REQUIRE(actions.size() == 1);
  CHECK(std::get<UnchokeAction>(actions[0]).peer == peer(2));
  CHECK(slots.next_timeout() == kTimeNever);  // nobody waits
  slots.on_gone(t, peer(3));                   // unknown: nothing happens
  CHECK(drain(slots).empty());
}
