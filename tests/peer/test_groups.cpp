// Group commit between whole peers in virtual time: the ranks of one
// instance find each other through their records, stage a version, and
// commit it only when every rank holds it; a rank that dies fails the
// others' commit within two failure-detection periods, naming it, while
// another group commits; a late rank catches up to the committed version.
#include <doctest/doctest.h>

#include "support/model_fixture.hpp"
#include "support/peer_checks.hpp"
#include "support/peer_network.hpp"

using namespace tensorhub;
using namespace tensorhub::peer;
using namespace tensorhub::testing;
using namespace std::chrono_literals;

namespace {

// Peer `peer` joins group `name` as `rank` of `size`, fetches "policy"
// v`version` and stages it.
std::shared_ptr<LocalVersion> stage(PeerNetwork& net, std::size_t peer, const std::string& name, std::uint64_t version) {
  auto v = net.fetch(peer, "policy", version);
  REQUIRE_MESSAGE(v.is_ok(), v.status().to_string());
  const Status staged = net.core(peer).stage_for_group(net.now(), name, "policy", VersionNumber{version}, (*v)->id, {*v});
  REQUIRE_MESSAGE(staged.is_ok(), staged.to_string());
  return *v;
}

void join(PeerNetwork& net, std::size_t peer, const std::string& name, std::uint32_t size, std::uint32_t rank) {
  const Status joined = net.core(peer).join_group(net.now(), name, size, rank);
  REQUIRE_MESSAGE(joined.is_ok(), joined.to_string());
}

bool contains(const Status& s, const std::string& text) { return s.message().find(text) != std::string::npos; }

}  // namespace

TEST_CASE("groups: three ranks stage a version and commit it together, and a fourth peer's claims change nothing") {
  PeerNetwork net(71);
  add_peers(net, 5);  // peer 0 publishes; peers 1-3 are the group's ranks; peer 4 fetches alone
  const auto image = small_model(3, 4u << 20);
  REQUIRE(net.publish(0, "policy", image, tensors_of(image)).is_ok());
  REQUIRE(net.run_until([&] { return knows_head(net, 3, 1) && knows_head(net, 4, 1); }, 20s));
  for (std::uint32_t r = 0; r < 3; ++r) join(net, 1 + r, "inst", 3, r);
  CHECK(net.core(1).join_group(net.now(), "inst", 3, 0).code() == StatusCode::kAlreadyExists);
  // Before anything is staged: nothing to commit.
  CHECK(net.core(1).commit_group(net.now(), "inst", 1).code() == StatusCode::kInvalidArgument);

  // Ranks 0 and 1 stage; rank 2 has not begun: their commits wait, naming it.
  stage(net, 1, "inst", 1);
  stage(net, 2, "inst", 1);
  REQUIRE(net.run_until([&] { return net.core(1).find(net.core(1).latest("policy")->id)->finished(); }, 20s));
  net.run_for(1s);
  Status waiting = net.core(1).commit_group(net.now(), "inst", 1);
  CHECK(waiting.code() == StatusCode::kUnavailable);
  CHECK_MESSAGE(contains(waiting, "rank 2: has not begun staging 'policy' v1"), waiting.message());

  stage(net, 3, "inst", 1);
  std::vector<bool> committed(3, false);
  REQUIRE(net.run_until([&] {
    for (std::uint32_t r = 0; r < 3; ++r) {
      if (!committed[r]) committed[r] = net.core(1 + r).commit_group(net.now(), "inst", 1).is_ok();
    }
    return committed[0] && committed[1] && committed[2];
  }, 20s));
  for (std::uint32_t r = 0; r < 3; ++r) {
    net.run_for(100ms);
    CHECK(net.core(1 + r).groups().committed("inst", "policy") == 1u);
    CHECK(net.errors(1 + r).empty());
  }
  // Peer 4 knows the claims but is no rank: it cannot commit for the group.
  CHECK(net.core(4).commit_group(net.now(), "inst", 1).code() == StatusCode::kNotFound);
}

TEST_CASE("groups: a rank that dies mid-fetch fails its group's commit naming it within 3 s while the other group commits") {
  PeerNetwork net(72);
  add_peers(net, 7);  // peer 0 publishes; group "a" on peers 1-3, group "b" on peers 4-6
  const auto image = small_model(4, 8u << 20);
  REQUIRE(net.publish(0, "policy", image, tensors_of(image)).is_ok());
  REQUIRE(net.run_until([&] {
    for (std::size_t p = 1; p < 7; ++p) {
      if (!knows_head(net, p, 1)) return false;
    }
    return true;
  }, 20s));
  for (std::uint32_t r = 0; r < 3; ++r) {
    join(net, 1 + r, "a", 3, r);
    join(net, 4 + r, "b", 3, r);
  }
  net.run_for(2s);  // the claims spread
  for (std::size_t p = 1; p < 7; ++p) stage(net, p, p < 4 ? "a" : "b", 1);
  net.run_for(5ms);
  net.crash(3);  // rank 2 of "a", mid-fetch
  const TimePoint crashed = net.now();

  Status a0, a1;
  std::vector<bool> b(3, false);
  REQUIRE(net.run_until([&] {
    for (std::uint32_t r = 0; r < 3; ++r) {
      if (!b[r]) b[r] = net.core(4 + r).commit_group(net.now(), "b", 1).is_ok();
    }
    a0 = net.core(1).commit_group(net.now(), "a", 1);
    a1 = net.core(2).commit_group(net.now(), "a", 1);
    return a0.code() == StatusCode::kAborted && a1.code() == StatusCode::kAborted && b[0] && b[1] && b[2];
  }, 20s, 50ms));
  const Duration took = net.now() - crashed;
  MESSAGE("group a's commit failed " << std::chrono::duration<double>(took).count() << " s after its rank 2 died");
  CHECK(took <= 3s);
  for (const Status& s : {a0, a1}) {
    CHECK_MESSAGE(contains(s, "rank 2: not heard from for"), s.message());
    CHECK_FALSE(contains(s, "rank 0:"));
    CHECK_FALSE(contains(s, "rank 1:"));
  }
  // Nobody in "a" committed: the rank that died never said so.
  CHECK_FALSE(net.core(1).groups().committed("a", "policy").has_value());
  CHECK(net.core(4).groups().committed("b", "policy") == 1u);

  // A late rank: a new peer joins as rank 2 and stages v1; the group commits.
  const std::size_t late = net.add_peer(Location{"dc", "r1", "h-late"});
  REQUIRE(net.run_until([&] { return knows_head(net, late, 1); }, 20s));
  join(net, late, "a", 3, 2);
  stage(net, late, "a", 1);
  std::vector<bool> a(3, false);
  const std::size_t ranks[] = {1, 2, late};
  REQUIRE(net.run_until([&] {
    for (std::size_t i = 0; i < 3; ++i) {
      if (!a[i]) a[i] = net.core(ranks[i]).commit_group(net.now(), "a", 1).is_ok();
    }
    return a[0] && a[1] && a[2];
  }, 30s, 50ms));
}

TEST_CASE("groups: a late rank catches up to the version its group committed") {
  PeerNetwork net(73);
  add_peers(net, 3);  // peer 0 publishes; ranks on peers 1 and 2
  const auto image = small_model(5, 2u << 20);
  REQUIRE(net.publish(0, "policy", image, tensors_of(image)).is_ok());
  REQUIRE(net.run_until([&] { return knows_head(net, 1, 1) && knows_head(net, 2, 1); }, 20s));
  join(net, 1, "g", 2, 0);
  stage(net, 1, "g", 1);
  // Rank 1 is not there yet: rank 0 waits for it, and says so.
  net.run_for(3s);
  Status s = net.core(1).commit_group(net.now(), "g", 1);
  CHECK(s.code() == StatusCode::kUnavailable);
  CHECK_MESSAGE(contains(s, "rank 1: no peer has joined as it"), s.message());

  join(net, 2, "g", 2, 1);
  CHECK_FALSE(net.core(2).groups().committed("g", "policy").has_value());
  stage(net, 2, "g", 1);
  bool c0 = false, c1 = false;
  REQUIRE(net.run_until([&] {
    if (!c0) c0 = net.core(1).commit_group(net.now(), "g", 1).is_ok();
    if (!c1) c1 = net.core(2).commit_group(net.now(), "g", 1).is_ok();
    return c0 && c1;
  }, 20s));

  // Rank 1 restarts (a new peer): it reads the committed version from rank 0 and commits it.
  net.crash(2);
  const std::size_t restarted = net.add_peer(Location{"dc", "r0", "h-restarted"});
  REQUIRE(net.run_until([&] { return knows_head(net, restarted, 1); }, 20s));
  join(net, restarted, "g", 2, 1);
  REQUIRE(net.run_until([&] { return net.core(restarted).groups().committed("g", "policy") == 1u; }, 20s));
  stage(net, restarted, "g", 1);
  REQUIRE(net.run_until([&] { return net.core(restarted).commit_group(net.now(), "g", 1).is_ok(); }, 20s));
}
