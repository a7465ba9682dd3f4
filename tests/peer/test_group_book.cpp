// Group commit's core alone: the rank's state on the wire (bounded, strict),
// who is which rank, when a commit succeeds, waits or fails, and what a
// member that claims a rank it is not, or lies about its size, can do.
#include <doctest/doctest.h>

#include <string>

#include "core/rng.hpp"
#include "peer/group_book.hpp"
#include "support/tagged_ids.hpp"

using namespace tensorhub;
using namespace tensorhub::peer;
using namespace std::chrono_literals;

namespace {

PeerId peer_id(std::uint8_t n) { return testing::peer_tagged(n); }
ManifestId version_id(std::uint8_t n) { return testing::version_tagged(n); }

GroupState sample_state() {
  GroupState s{"instance-0", 4, 2, {}};
  s.stages.push_back(StageEntry{"policy", 7, version_id(7), StageState::kCommitted, 1000, {}});
  s.stages.push_back(StageEntry{"policy", 8, version_id(8), StageState::kStaging, 420, {}});
  s.stages.push_back(StageEntry{"value", 3, version_id(3), StageState::kFailed, 0, "unavailable: no peer holds shard 3"});
  return s;
}

StageEntry stage(std::uint64_t version, StageState state, std::uint8_t id = 0) {
  return StageEntry{"policy", version, version_id(id ? id : static_cast<std::uint8_t>(version)), state,
                    static_cast<std::uint16_t>(state == StageState::kStaging ? 500 : 1000), {}};
}

// Rank `rank` of a 3-rank group "g" says `stages`.
GroupState said(std::uint32_t rank, std::vector<StageEntry> stages) { return GroupState{"g", 3, rank, std::move(stages)}; }

bool contains(const Status& s, const std::string& text) { return s.message().find(text) != std::string::npos; }

// Rank 0 of "g" (3 ranks), with peers 1 and 2 claiming ranks 1 and 2.
struct Trio {
  GroupBook book;
  TimePoint t0 = TimePoint{} + 100s;
  Trio() {
    REQUIRE(book.join(t0, "g", 3, 0).is_ok());
    book.on_record(t0, peer_id(1), {gossip::GroupEntry{"g", 3, 1}});
    book.on_record(t0, peer_id(2), {gossip::GroupEntry{"g", 3, 2}});
  }
  // This rank has staged v5; ranks 1 and 2 say where they are with it.
  void staged_and_heard(StageState rank1, StageState rank2) {
    book.set_stage("g", stage(5, StageState::kStaged));
    REQUIRE(book.on_state(t0, peer_id(1), said(1, {stage(5, rank1)})));
    REQUIRE(book.on_state(t0, peer_id(2), said(2, {stage(5, rank2)})));
  }
};

}  // namespace

TEST_CASE("group state: round trip, every truncation and seeded mutants are refused or re-encode exactly") {
  const GroupState s = sample_state();
  REQUIRE(validate_group_state(s).is_ok());
  const auto bytes = encode_group_state(s);
  auto back = decode_group_state(bytes);
  REQUIRE_MESSAGE(back.is_ok(), back.status().to_string());
  CHECK(*back == s);
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    auto cut = decode_group_state(std::span(bytes.data(), n));
    CHECK_FALSE(cut.is_ok());
    if (!cut.is_ok()) CHECK(cut.status().code() == StatusCode::kCorrupt);
  }
  core::SplitMix64 rng(17);
  std::size_t well_formed = 0;
  for (int i = 0; i < 4000; ++i) {
    auto m = bytes;
    const int flips = 1 + static_cast<int>(rng.next() % 3);
    for (int f = 0; f < flips; ++f) m[rng.next() % m.size()] = static_cast<std::uint8_t>(rng.next());
    auto d = decode_group_state(m);
    if (!d.is_ok()) {
      CHECK(d.status().message().find('\n') == std::string::npos);
      continue;
    }
    ++well_formed;
    CHECK(validate_group_state(*d).is_ok());
    CHECK(encode_group_state(*d) == m);  // canonical: one encoding per state
  }
  MESSAGE(well_formed << " of 4000 mutants well-formed");
}

TEST_CASE("group state: limits and rules are refused with a reason") {
  auto refused = [](auto change) {
    GroupState s = sample_state();
    change(s);
    return validate_group_state(s);
  };
  CHECK(contains(refused([](GroupState& s) { s.rank = 4; }), "rank 4 of 4"));
  CHECK_FALSE(refused([](GroupState& s) { s.size = 0; }).is_ok());
  CHECK_FALSE(refused([](GroupState& s) { s.group = "../x"; }).is_ok());
  CHECK_FALSE(refused([](GroupState& s) { s.group = std::string(65, 'g'); }).is_ok());
  CHECK(contains(refused([](GroupState& s) { std::swap(s.stages[0], s.stages[1]); }), "sorted"));
  CHECK(contains(refused([](GroupState& s) { s.stages[2].reason = "line\nbreak"; }), "printable"));
  CHECK_FALSE(refused([](GroupState& s) { s.stages[1].permille = 1001; }).is_ok());
  CHECK(contains(refused([](GroupState& s) {
                   for (std::uint64_t v = 10; s.stages.size() <= kMaxGroupStages; ++v) s.stages.push_back(stage(v, StageState::kStaged));
                 }),
                 "stages"));
  // The largest state there can be fits one message.
  GroupState big{std::string(gossip::kMaxGroupNameBytes, 'g'), gossip::kMaxGroupSize, gossip::kMaxGroupSize - 1, {}};
  for (std::size_t i = 0; i < kMaxGroupStages; ++i) {
    big.stages.push_back(StageEntry{std::string(120, 'm') + std::to_string(10 + i), ~0ull, version_id(1),
                                    StageState::kFailed, 1000, std::string(kMaxStageReasonBytes, 'r')});
  }
  REQUIRE(validate_group_state(big).is_ok());
  const auto bytes = encode_group_state(big);
  CHECK(bytes.size() <= kMaxGroupStateBytes);
  CHECK(decode_group_state(bytes).is_ok());
  CHECK(stage_reason("a\tb\xff") == "a?b?");
  CHECK(stage_reason(std::string(1000, 'x')).size() == kMaxStageReasonBytes);
}

TEST_CASE("group book: joining, claims, and what is refused") {
  GroupBook book;
  const TimePoint t = TimePoint{} + 1s;
  CHECK(book.join(t, "g", 3, 3).code() == StatusCode::kInvalidArgument);
  CHECK(book.join(t, "bad name\n", 3, 0).code() == StatusCode::kInvalidArgument);
  REQUIRE(book.join(t, "g", 3, 1).is_ok());
  CHECK(book.join(t, "g", 3, 1).is_ok());  // again: the same
  CHECK(book.join(t, "g", 3, 2).code() == StatusCode::kAlreadyExists);
  CHECK(book.join(t, "g", 4, 1).code() == StatusCode::kAlreadyExists);
  for (std::size_t i = 1; i < GroupBook::kMaxGroups; ++i) REQUIRE(book.join(t, "h" + std::to_string(i), 2, 0).is_ok());
  CHECK(book.join(t, "one-too-many", 2, 0).code() == StatusCode::kResourceExhausted);
  const auto claims = book.claims();
  REQUIRE(claims.size() == GroupBook::kMaxGroups);
  CHECK(claims[0] == gossip::GroupEntry{"g", 3, 1});
  CHECK(book.commit(t, "nope", 1).code() == StatusCode::kNotFound);
  CHECK(contains(book.commit(t, "g", 1), "stages no version 1"));
}

TEST_CASE("group book: commit waits naming each rank, then succeeds once every rank holds the version") {
  Trio trio;
  GroupBook& book = trio.book;
  TimePoint t = trio.t0;
  book.set_stage("g", stage(5, StageState::kStaging));
  Status s = book.commit(t, "g", 5);
  CHECK(s.code() == StatusCode::kUnavailable);
  CHECK(contains(s, "rank 0 (this one): staging (50%)"));
  CHECK(contains(s, "rank 1: not heard from yet"));
  CHECK(contains(s, "rank 2: not heard from yet"));

  t += 100ms;
  CHECK(book.on_state(t, peer_id(1), said(1, {stage(5, StageState::kCommitting)})));
  CHECK(book.on_state(t, peer_id(2), said(2, {stage(5, StageState::kStaging)})));
  book.set_stage("g", stage(5, StageState::kStaged));
  s = book.commit(t, "g", 5);
  CHECK(s.code() == StatusCode::kUnavailable);
  CHECK_FALSE(contains(s, "rank 1"));
  CHECK(contains(s, "rank 2: staging 'policy' v5 (50%)"));
  // Waiting in commit, this rank says it is committing.
  CHECK((*book.own_stages("g"))[0].state == StageState::kCommitting);
  t += 50ms;
  CHECK(book.on_state(t, peer_id(2), said(2, {stage(5, StageState::kStaged)})));
  CHECK(contains(book.commit(t, "g", 5), "rank 2: staged 'policy' v5, not committing yet"));
  // A rank that stops waiting withdraws: it is staged, not committing.
  book.withdraw("g", 5);
  CHECK((*book.own_stages("g"))[0].state == StageState::kStaged);
  CHECK(book.commit(t, "g", 5).code() == StatusCode::kUnavailable);

  t += 100ms;
  CHECK(book.on_state(t, peer_id(2), said(2, {stage(5, StageState::kCommitting)})));
  REQUIRE(book.commit(t, "g", 5).is_ok());
  CHECK((*book.own_stages("g"))[0].state == StageState::kCommitted);
  CHECK(book.committed("g", "policy") == 5u);
  // The commit is news to both other ranks at once.
  auto out = book.due(t);
  REQUIRE(out.size() == 2);
  auto sent = decode_group_state(out[0].bytes);
  REQUIRE(sent.is_ok());
  CHECK(sent->stages[0].state == StageState::kCommitted);
  CHECK(book.due(t + 10ms).empty());
  CHECK(book.due(t + GroupBook::kHeartbeat).size() == 2);  // the heartbeat
}

TEST_CASE("group book: a silent rank, a failed rank, another id and a rank of nobody") {
  Trio trio;
  GroupBook& book = trio.book;
  TimePoint t = trio.t0;
  trio.staged_and_heard(StageState::kCommitting, StageState::kStaging);

  SUBCASE("silent past kSilence: the commit fails naming it, and a timer says when") {
    CHECK(book.next_timeout() <= t + GroupBook::kSilence);
    t += 1s;
    REQUIRE(book.on_state(t, peer_id(1), said(1, {stage(5, StageState::kCommitting)})));
    CHECK(book.commit(t, "g", 5).code() == StatusCode::kUnavailable);
    t = trio.t0 + GroupBook::kSilence;
    CHECK(book.handle_timeout(t));
    CHECK_FALSE(book.handle_timeout(t));  // noted once
    const Status s = book.commit(t, "g", 5);
    CHECK(s.code() == StatusCode::kAborted);
    CHECK(contains(s, "rank 2: not heard from for 2.0 s"));
    CHECK_FALSE(contains(s, "rank 1"));
    // Heard again: no longer lost.
    REQUIRE(book.on_state(t, peer_id(2), said(2, {stage(5, StageState::kCommitting)})));
    CHECK(book.commit(t, "g", 5).is_ok());
  }
  SUBCASE("a rank that cannot stage it fails the commit with its reason") {
    StageEntry failed = stage(5, StageState::kFailed);
    failed.reason = "unavailable: no peer holds shard 3";
    REQUIRE(book.on_state(t, peer_id(2), said(2, {failed})));
    const Status s = book.commit(t, "g", 5);
    CHECK(s.code() == StatusCode::kAborted);
    CHECK(contains(s, "rank 2: cannot stage 'policy' v5: unavailable: no peer holds shard 3"));
  }
  SUBCASE("a rank that staged another version under the number") {
    REQUIRE(book.on_state(t, peer_id(2), said(2, {stage(5, StageState::kStaged, 99)})));
    CHECK(contains(book.commit(t, "g", 5), "rank 2: staged another 'policy' v5"));
  }
  SUBCASE("this rank's own failure") {
    StageEntry failed = stage(5, StageState::kFailed);
    failed.reason = "cancelled: released";
    book.set_stage("g", failed);
    CHECK(contains(book.commit(t, "g", 5), "rank 0 (this one): cancelled: released"));
  }
  SUBCASE("a rank whose peer leaves or dies fails the commit at once, until another peer joins as it") {
    book.on_gone(t, peer_id(2));
    const Status gone = book.commit(t, "g", 5);
    CHECK(gone.code() == StatusCode::kAborted);
    CHECK(contains(gone, "rank 2: its peer " + peer_id(2).short_hex() + " left or died"));
    CHECK_FALSE(book.on_state(t, peer_id(2), said(2, {stage(5, StageState::kCommitting)})));  // not its rank any more
    book.on_record(t, peer_id(9), {gossip::GroupEntry{"g", 3, 2}});  // a restarted rank
    CHECK(contains(book.commit(t, "g", 5), "rank 2: not heard from yet"));
    REQUIRE(book.on_state(t, peer_id(9), said(2, {stage(5, StageState::kCommitting)})));
    CHECK(book.commit(t, "g", 5).is_ok());
  }
}

TEST_CASE("group book: members cannot speak for a rank they are not, or fake a commit by claiming one") {
  Trio trio;
  GroupBook& book = trio.book;
  const TimePoint t = trio.t0;
  book.set_stage("g", stage(5, StageState::kStaged));
  // A state from a peer whose record claims nothing, or another rank, is ignored.
  CHECK_FALSE(book.on_state(t, peer_id(7), said(1, {stage(5, StageState::kCommitting)})));
  CHECK_FALSE(book.on_state(t, peer_id(1), said(2, {stage(5, StageState::kCommitting)})));
  CHECK_FALSE(book.on_state(t, peer_id(1), GroupState{"g", 4, 1, {stage(5, StageState::kStaged)}}));
  CHECK_FALSE(book.on_state(t, peer_id(1), said(0, {stage(5, StageState::kCommitting)})));  // our own rank
  REQUIRE(book.on_state(t, peer_id(1), said(1, {stage(5, StageState::kCommitting)})));

  SUBCASE("a second claimant of a rank: neither is believed and the commit fails naming both") {
    book.on_record(t, peer_id(7), {gossip::GroupEntry{"g", 3, 2}});
    CHECK_FALSE(book.on_state(t, peer_id(7), said(2, {stage(5, StageState::kCommitting)})));
    const Status s = book.commit(t, "g", 5);
    CHECK(s.code() == StatusCode::kAborted);
    CHECK(contains(s, "rank 2: claimed by 2 peers"));
    // The impostor's next record drops the claim: the rank is the real one's again.
    book.on_record(t, peer_id(7), {});
    REQUIRE(book.on_state(t, peer_id(2), said(2, {stage(5, StageState::kCommitting)})));
    CHECK(book.commit(t, "g", 5).is_ok());
  }
  SUBCASE("a claim of this peer's own rank") {
    book.on_record(t, peer_id(7), {gossip::GroupEntry{"g", 3, 0}});
    REQUIRE(book.on_state(t, peer_id(2), said(2, {stage(5, StageState::kCommitting)})));
    CHECK(contains(book.commit(t, "g", 5), "rank 0: claimed by another peer as well"));
  }
  SUBCASE("a member claiming the group at another size") {
    book.on_record(t, peer_id(7), {gossip::GroupEntry{"g", 5, 4}});
    REQUIRE(book.on_state(t, peer_id(2), said(2, {stage(5, StageState::kCommitting)})));
    CHECK(contains(book.commit(t, "g", 5), "claims a group 'g' of 5 ranks, not 3"));
  }
}

TEST_CASE("group book: a late rank catches up to the version the others committed, and stages are bounded") {
  GroupBook book;
  const TimePoint t = TimePoint{} + 5s;
  REQUIRE(book.join(t, "g", 3, 2).is_ok());
  book.on_record(t, peer_id(1), {gossip::GroupEntry{"g", 3, 0}});
  book.on_record(t, peer_id(2), {gossip::GroupEntry{"g", 3, 1}});
  CHECK_FALSE(book.committed("g", "policy").has_value());
  REQUIRE(book.on_state(t, peer_id(1), said(0, {stage(6, StageState::kCommitted), stage(7, StageState::kStaging)})));
  REQUIRE(book.on_state(t, peer_id(2), said(1, {stage(6, StageState::kCommitted), stage(7, StageState::kStaged)})));
  CHECK(book.committed("g", "policy") == 6u);
  CHECK_FALSE(book.committed("g", "value").has_value());
  book.set_stage("g", stage(6, StageState::kStaged));
  CHECK(book.commit(t, "g", 6).is_ok());  // the others committed it: they hold it

  for (std::uint64_t v = 10; v < 30; ++v) {
    StageEntry failed = stage(v, StageState::kFailed);
    failed.reason = "released";
    REQUIRE(book.set_stage("g", failed));
  }
  const auto* own = book.own_stages("g");
  REQUIRE(own->size() == kMaxGroupStages);
  CHECK(own->front().version == 6);  // its model's newest committed: kept
  CHECK(own->back().version == 29);
  CHECK(validate_group_state(GroupState{"g", 3, 2, *own}).is_ok());
  book.drop_stage("g", "policy", 29);
  CHECK(own->back().version == 28);
}

TEST_CASE("group book: two models over many versions keep their stages, and a full book refuses a new one") {
  GroupBook book;
  const TimePoint t = TimePoint{} + 5s;
  REQUIRE(book.join(t, "g", 1, 0).is_ok());  // one rank: commits need nobody else
  for (std::uint64_t v = 1; v <= 20; ++v) {
    for (const char* model : {"a", "p"}) {
      REQUIRE(book.set_stage("g", StageEntry{model, v, version_id(static_cast<std::uint8_t>(v)), StageState::kStaged,
                                             1000, {}}));
    }
    REQUIRE(book.commit(t, "g", v).is_ok());
    int a = 0, p = 0;
    for (const StageEntry& e : *book.own_stages("g")) {
      if (e.version == v) (e.model == "a" ? a : p) += 1;
    }
    CHECK_MESSAGE(a + p == 2, "v" << v << ": both models committed");  // neither was pushed out by the other
  }
  CHECK(book.committed("g", "a") == 20u);
  CHECK(book.committed("g", "p") == 20u);
  // Eight versions staging or staged: a ninth finds no room and changes nothing.
  GroupBook full;
  REQUIRE(full.join(t, "g", 2, 0).is_ok());
  for (std::uint64_t v = 1; v <= kMaxGroupStages; ++v) {
    REQUIRE(full.set_stage("g", stage(v, v % 2 ? StageState::kStaging : StageState::kStaged)));
  }
  CHECK_FALSE(full.set_stage("g", stage(99, StageState::kStaging)));
  CHECK(full.own_stages("g")->size() == kMaxGroupStages);
  CHECK(full.set_stage("g", stage(3, StageState::kStaged)));  // a replacement always fits
}

TEST_CASE("group book: a decided commit is never undone, ranks must stage the same models, a conflict's end is not silence") {
  Trio trio;
  GroupBook& book = trio.book;
  TimePoint t = trio.t0;
  trio.staged_and_heard(StageState::kCommitted, StageState::kStaged);
  // Rank 1 committed v5: this rank, holding it, commits at once, though
  // rank 2 withdrew and a member claims the group at another size.
  book.on_record(t, peer_id(7), {gossip::GroupEntry{"g", 5, 4}});
  CHECK(book.commit(t, "g", 5).is_ok());
  CHECK(book.commit(t + 10s, "g", 5).is_ok());  // again, later: still committed
  book.on_record(t, peer_id(7), {});

  // Rank 2 stages a second model at v6 that this rank does not: a fault, not a split.
  book.set_stage("g", stage(6, StageState::kStaged));
  REQUIRE(book.on_state(t, peer_id(1), said(1, {stage(6, StageState::kCommitting)})));
  REQUIRE(book.on_state(t, peer_id(2), said(2, {stage(6, StageState::kCommitting),
                                                StageEntry{"value", 6, version_id(60), StageState::kStaged, 1000, {}}})));
  const Status other_model = book.commit(t, "g", 6);
  CHECK(other_model.code() == StatusCode::kAborted);
  CHECK(contains(other_model, "rank 2: stages 'value' v6, which this rank does not"));

  // A second claimant of rank 2 for 5 s, then it goes: rank 2 is not "silent for 5 s".
  t += 1s;
  book.on_record(t, peer_id(8), {gossip::GroupEntry{"g", 3, 2}});
  t += 5s;
  REQUIRE(book.on_state(t, peer_id(1), said(1, {stage(6, StageState::kCommitting)})));
  book.on_record(t, peer_id(8), {});
  const Status after = book.commit(t, "g", 6);
  CHECK_FALSE(contains(after, "not heard from for"));
  CHECK(book.due(t).size() == 2);  // what it owes goes now; after that, no timer is due at once
  CHECK_FALSE(book.handle_timeout(t));
  CHECK(book.next_timeout() > t);
}
