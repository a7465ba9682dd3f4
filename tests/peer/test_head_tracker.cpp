// Head tracking without sockets: which manifests are believed, which are
// asked for and of whom, and what equivocation does.
#include <doctest/doctest.h>

#include <array>

#include "peer/head_tracker.hpp"
#include "support/gossip_network.hpp"
#include "support/model_fixture.hpp"

using namespace tensorhub;
using namespace tensorhub::peer;
using namespace tensorhub::testing;
using namespace std::chrono_literals;

namespace {

constexpr Duration kRetry = 2s;

std::shared_ptr<const Manifest> manifest_of(std::uint64_t seed, const Identity& key, std::uint64_t version,
                                            ManifestId parent = {}) {
  const auto image = small_model(seed, 256u << 10);
  return std::make_shared<const Manifest>(build_small(image, key, small_options(version, parent)));
}

// v1, v2 and v3 of "policy", each the parent of the next.
std::array<std::shared_ptr<const Manifest>, 3> chain_of_three(const Identity& key) {
  auto v1 = manifest_of(1, key, 1);
  auto v2 = manifest_of(2, key, 2, v1->id());
  auto v3 = manifest_of(3, key, 3, v2->id());
  return {v1, v2, v3};
}

PeerId peer_id(std::uint64_t n) { return GossipNetwork::identity_for(n).public_key(); }

ManifestId fake_id(std::uint64_t n) {
  ManifestId id;
  for (std::size_t i = 0; i < 8; ++i) id.bytes[i] = static_cast<std::uint8_t>(n >> (8 * i));
  id.bytes[31] = 0xfa;
  return id;
}

TimePoint at(Duration d) { return TimePoint(1s) + d; }

}  // namespace

TEST_CASE("head tracker: a trusted manifest becomes the head, an untrusted one never does") {
  const Identity trainer = test_identity(1), rogue = test_identity(2);
  HeadTracker heads({trainer.public_key()}, kRetry);
  auto good = manifest_of(1, trainer, 1);
  auto bad = manifest_of(2, rogue, 2);
  auto accepted = heads.accept(good);
  REQUIRE(accepted.is_ok());
  CHECK(*accepted);
  CHECK(heads.head("policy")->id == good->id());
  auto refused = heads.accept(bad);
  CHECK(refused.status().code() == StatusCode::kVerifyFailed);
  CHECK(heads.head("policy")->version == 1);
  CHECK(heads.manifest(bad->id()) == nullptr);
  // The same manifest twice is no news.
  CHECK_FALSE(*heads.accept(good));
}

TEST_CASE("head tracker: one part of a version published in parts is never a head on its own") {
  const Identity trainer = test_identity(1);
  HeadTracker heads({trainer.public_key()}, kRetry);
  const auto image = small_model(5, 256u << 10);
  ManifestBuildOptions options = small_options(1);
  options.part = PartOf{0, 2};
  auto part = std::make_shared<const Manifest>(build_small(image, trainer, options));
  REQUIRE(part->part().has_value());
  auto refused = heads.accept(part);
  CHECK(refused.status().code() == StatusCode::kInvalidArgument);
  CHECK(refused.status().message().find("one part of a version published in parts") != std::string::npos);
  CHECK_FALSE(heads.head("policy").has_value());
  CHECK(heads.manifest(part->id()) == nullptr);
  // A whole manifest of the same number is still believed: the part proved nothing.
  REQUIRE(heads.accept(manifest_of(1, trainer, 1)).is_ok());
  CHECK(heads.head("policy")->version == 1);
}

TEST_CASE("head tracker: a manifest that does not extend its known parent is refused") {
  const Identity trainer = test_identity(1);
  HeadTracker heads({trainer.public_key()}, kRetry);
  auto v1 = manifest_of(1, trainer, 1);
  REQUIRE(heads.accept(v1).is_ok());
  // A manifest of another model that names v1 as its parent breaks the chain.
  auto options = small_options(2, v1->id());
  options.model = "other";
  auto stranger = std::make_shared<const Manifest>(build_small(small_model(2, 256u << 10), trainer, options));
  CHECK(heads.accept(stranger).status().code() == StatusCode::kVerifyFailed);
  CHECK_FALSE(heads.head("other").has_value());
  auto v2 = manifest_of(3, trainer, 2, v1->id());
  CHECK(*heads.accept(v2));
  CHECK(heads.next_version("policy").version == VersionNumber{3});
  CHECK(heads.next_version("policy").parent == v2->id());
}

TEST_CASE("head tracker: equivocation keeps both manifests as proof and believes neither") {
  const Identity trainer = test_identity(1);
  HeadTracker heads({trainer.public_key()}, kRetry);
  auto v1 = manifest_of(1, trainer, 1);
  REQUIRE(heads.accept(v1).is_ok());
  auto v2a = manifest_of(2, trainer, 2, v1->id());
  auto v2b = manifest_of(3, trainer, 2, v1->id());
  REQUIRE(*heads.accept(v2a));
  CHECK(heads.head("policy")->id == v2a->id());
  auto second = heads.accept(v2b);
  CHECK(second.status().code() == StatusCode::kVerifyFailed);
  CHECK(second.status().message().find("equivocation") != std::string::npos);
  // Neither is the head; the head falls back to v1, and v2 is never reused.
  CHECK(heads.head("policy")->id == v1->id());
  CHECK(heads.equivocated("policy", VersionNumber{2}));
  REQUIRE(heads.equivocations().size() == 1);
  CHECK(heads.equivocations()[0].first.id() == v2a->id());
  CHECK(heads.equivocations()[0].second.id() == v2b->id());
  CHECK(heads.find("policy", VersionNumber{2}) == nullptr);
  CHECK(heads.next_version("policy").version == VersionNumber{3});
  // Either manifest offered again is refused.
  CHECK_FALSE(heads.accept(v2a).is_ok());
  // And nobody is asked for a manifest of v2 any more.
  CHECK_FALSE(heads.on_head_named(at(0s), peer_id(1), "policy", VersionNumber{2}, v2a->id()).has_value());
}

TEST_CASE("head tracker: a named head is asked once, then of the next namer when the answer is overdue") {
  const Identity trainer = test_identity(1);
  HeadTracker heads({trainer.public_key()}, kRetry);
  auto v1 = manifest_of(1, trainer, 1);
  auto first = heads.on_head_named(at(0s), peer_id(1), "policy", VersionNumber{1}, v1->id());
  REQUIRE(first.has_value());
  CHECK(first->peer == peer_id(1));
  // Others name it within the retry: not asked again.
  CHECK_FALSE(heads.on_head_named(at(100ms), peer_id(2), "policy", VersionNumber{1}, v1->id()).has_value());
  CHECK_FALSE(heads.on_head_named(at(200ms), peer_id(3), "policy", VersionNumber{1}, v1->id()).has_value());
  CHECK(heads.next_timeout() == at(2s));
  CHECK(heads.handle_timeout(at(1s)).empty());
  // Overdue: the next namer, without waiting for another record.
  auto retried = heads.handle_timeout(at(2s));
  REQUIRE(retried.size() == 1);
  CHECK(retried[0].peer == peer_id(2));
  retried = heads.handle_timeout(at(4s));
  REQUIRE(retried.size() == 1);
  CHECK(retried[0].peer == peer_id(3));
  // A namer that has gone is skipped; one that has not got it is passed over at once.
  heads.forget_peer(peer_id(1));
  auto no = heads.on_no_manifest(at(4500ms), peer_id(3), v1->id());
  REQUIRE(no.has_value());
  CHECK(no->peer == peer_id(2));
  // Once accepted it is wanted no more.
  REQUIRE(heads.accept(v1).is_ok());
  CHECK(heads.wanted() == 0);
  CHECK(heads.next_timeout() == kTimeNever);
  CHECK(heads.handle_timeout(at(10s)).empty());
}

TEST_CASE("head tracker: heads no newer than ours are not asked for, and a lie about an id is not remembered") {
  const Identity trainer = test_identity(1);
  HeadTracker heads({trainer.public_key()}, kRetry);
  auto v1 = manifest_of(1, trainer, 1);
  auto v2 = manifest_of(2, trainer, 2, v1->id());
  REQUIRE(heads.accept(v2).is_ok());
  CHECK_FALSE(heads.on_head_named(at(0s), peer_id(1), "policy", VersionNumber{1}, v1->id()).has_value());
  CHECK_FALSE(heads.on_head_named(at(0s), peer_id(1), "policy", VersionNumber{2}, v2->id()).has_value());
  ManifestId fake;
  fake.bytes[0] = 7;
  REQUIRE(heads.on_head_named(at(0s), peer_id(1), "policy", VersionNumber{3}, fake).has_value());
  // Another peer names the same id as another version: not believed, not asked.
  CHECK_FALSE(heads.on_head_named(at(5s), peer_id(2), "policy", VersionNumber{9}, fake).has_value());
  auto retried = heads.handle_timeout(at(5s));
  REQUIRE(retried.size() == 1);
  CHECK(retried[0].peer == peer_id(1));
}

TEST_CASE("head tracker: wanted manifests and kept versions are bounded") {
  const Identity trainer = test_identity(1);
  HeadTracker heads({trainer.public_key()}, kRetry);
  // Members naming endless fake heads fill at most kMaxWanted entries
  // (one member at most kMaxNamedPerPeer); newer ones win.
  for (std::uint64_t v = 1; v <= 3 * HeadTracker::kMaxWanted; ++v) {
    (void)heads.on_head_named(at(0s), peer_id(1), "policy", VersionNumber{v}, fake_id(v));
  }
  CHECK(heads.wanted() == HeadTracker::kMaxNamedPerPeer);
  for (std::uint64_t v = 1; v <= 3 * HeadTracker::kMaxWanted; ++v) {
    (void)heads.on_head_named(at(0s), peer_id(2 + v % 8), "policy", VersionNumber{1000 + v}, fake_id(1000 + v));
  }
  CHECK(heads.wanted() == HeadTracker::kMaxWanted);
  // Verified versions beyond kKeptVersions are forgotten, oldest first.
  ManifestId parent;
  std::shared_ptr<const Manifest> first;
  for (std::uint64_t v = 1; v <= HeadTracker::kKeptVersions + 4; ++v) {
    auto m = manifest_of(100 + v, trainer, v, parent);
    if (v == 1) first = m;
    REQUIRE(heads.accept(m).is_ok());
    parent = m->id();
  }
  CHECK(heads.manifest(first->id()) == nullptr);
  CHECK(heads.find("policy", VersionNumber{HeadTracker::kKeptVersions + 4}) != nullptr);
  CHECK(heads.find("policy", VersionNumber{4}) == nullptr);
  CHECK(heads.find("policy", VersionNumber{5}) != nullptr);
}

TEST_CASE("head tracker: a head whose parent is unknown waits while its chain is fetched back, then extends it") {
  const Identity trainer = test_identity(1);
  HeadTracker heads({trainer.public_key()}, kRetry);
  const auto [v1, v2, v3] = chain_of_three(trainer);
  REQUIRE(heads.accept(v1).is_ok());
  REQUIRE(heads.on_head_named(at(0s), peer_id(4), "policy", VersionNumber{3}, v3->id()).has_value());
  // v3 arrives; v2 is unknown: v3 waits, and v2 is asked of v3's namer.
  auto waited = heads.accept(v3);
  REQUIRE(waited.is_ok());
  CHECK_FALSE(*waited);
  CHECK(heads.head("policy")->id == v1->id());
  CHECK(heads.waiting() == 1);
  auto asked = heads.parent_requests(at(100ms));
  REQUIRE(asked.size() == 1);
  CHECK(asked[0].id == v2->id());
  CHECK(asked[0].peer == peer_id(4));
  CHECK(heads.parent_requests(at(200ms)).empty());  // asked once
  // v2 comes: the chain v1 -> v2 -> v3 holds, and v3 is the head.
  auto extended = heads.accept(v2);
  REQUIRE(extended.is_ok());
  CHECK(*extended);
  CHECK(heads.head("policy")->id == v3->id());
  CHECK(heads.waiting() == 0);
}

TEST_CASE("head tracker: a chain fetched back that forks from ours shows the version signed twice, and its head is never believed") {
  // We hold v1 -> v2. A v3 named by a peer extends v2', another manifest of
  // v2 by the same key: fetching v3's parent finds the equivocation at v2,
  // and v3, which waited for v2', is dropped.
  const Identity trainer = test_identity(1);
  HeadTracker heads({trainer.public_key()}, kRetry);
  auto v1 = manifest_of(1, trainer, 1);
  auto v2 = manifest_of(2, trainer, 2, v1->id());
  auto v2_fork = manifest_of(5, trainer, 2, v1->id());
  auto v3 = manifest_of(3, trainer, 3, v2_fork->id());
  REQUIRE(heads.accept(v1).is_ok());
  REQUIRE(heads.accept(v2).is_ok());
  REQUIRE(heads.on_head_named(at(0s), peer_id(5), "policy", VersionNumber{3}, v3->id()).has_value());
  CHECK_FALSE(*heads.accept(v3));
  REQUIRE(heads.parent_requests(at(100ms)).size() == 1);
  CHECK(heads.accept(v2_fork).status().code() == StatusCode::kVerifyFailed);
  CHECK(heads.equivocated("policy", VersionNumber{2}));
  CHECK(heads.waiting() == 0);
  // Long after, v3 is still not believed.
  heads.handle_timeout(at(60s));
  CHECK(heads.head("policy")->id == v1->id());
  CHECK(heads.manifest(v3->id()) == nullptr);
}

TEST_CASE("head tracker: a head whose parent never comes is believed after the wait") {
  const Identity trainer = test_identity(1);
  HeadTracker heads({trainer.public_key()}, kRetry);
  const auto [v1, v2, v3] = chain_of_three(trainer);
  REQUIRE(heads.accept(v1).is_ok());
  REQUIRE(heads.on_head_named(at(0s), peer_id(6), "policy", VersionNumber{3}, v3->id()).has_value());
  CHECK_FALSE(*heads.accept(v3));
  REQUIRE(heads.parent_requests(at(1s)).size() == 1);
  CHECK(heads.next_timeout() <= at(1s) + HeadTracker::kChainWait);
  heads.handle_timeout(at(1s) + HeadTracker::kChainWait - 1ms);
  CHECK(heads.head("policy")->id == v1->id());
  heads.handle_timeout(at(1s) + HeadTracker::kChainWait);
  CHECK(heads.head("policy")->id == v3->id());
  CHECK(heads.waiting() == 0);
  // A head far ahead (more than kMaxChainBack versions) is not fetched back.
  auto far = manifest_of(9, trainer, 3 + HeadTracker::kMaxChainBack + 1, v2->id());
  REQUIRE(heads.on_head_named(at(20s), peer_id(6), "policy", VersionNumber{far->version()}, far->id()).has_value());
  CHECK(*heads.accept(far));
}

TEST_CASE("head tracker: one member's fake heads at the highest versions never crowd out the real head") {
  const Identity trainer = test_identity(1);
  HeadTracker heads({trainer.public_key()}, kRetry);
  // A hostile member names fake heads far above any real version, and never answers.
  for (std::uint64_t i = 0; i < 4 * HeadTracker::kMaxWanted; ++i) {
    (void)heads.on_head_named(at(0s), peer_id(9), "policy", VersionNumber{UINT64_MAX - i}, fake_id(i));
  }
  auto v1 = manifest_of(1, trainer, 1);
  auto asked = heads.on_head_named(at(1s), peer_id(1), "policy", VersionNumber{1}, v1->id());
  REQUIRE(asked.has_value());
  CHECK(asked->peer == peer_id(1));
  REQUIRE(heads.accept(v1).is_ok());
  CHECK(heads.head("policy")->version == 1);
}

TEST_CASE("head tracker: a namer that answers its own head with nothing or garbage names nothing for a while") {
  const Identity trainer = test_identity(1);
  HeadTracker heads({trainer.public_key()}, kRetry);
  for (std::uint64_t i = 0; i < 8; ++i) (void)heads.on_head_named(at(0s), peer_id(9), "policy", VersionNumber{100 + i}, fake_id(i));
  auto v1 = manifest_of(1, trainer, 1);
  REQUIRE(heads.on_head_named(at(0s), peer_id(9), "policy", VersionNumber{1}, v1->id()).has_value());
  (void)heads.on_head_named(at(0s), peer_id(2), "policy", VersionNumber{1}, v1->id());
  CHECK(heads.wanted() == 9);
  // It says it has not got the head its own record names: a lie. What only
  // it named is dropped; the real head is asked of the other namer at once.
  auto next = heads.on_no_manifest(at(1s), peer_id(9), v1->id());
  REQUIRE(next.has_value());
  CHECK(next->peer == peer_id(2));
  CHECK(heads.wanted() == 1);
  CHECK(heads.discredited(at(1s), peer_id(9)));
  // Meanwhile its names are ignored, for a minute, then twice as long after the next lie.
  CHECK_FALSE(heads.on_head_named(at(30s), peer_id(9), "policy", VersionNumber{200}, fake_id(200)).has_value());
  CHECK(heads.wanted() == 1);
  CHECK_FALSE(heads.discredited(at(61s), peer_id(9)));
  REQUIRE(heads.on_head_named(at(61s), peer_id(9), "policy", VersionNumber{201}, fake_id(201)).has_value());
  CHECK_FALSE(heads.on_bad_manifest(at(62s), peer_id(9), fake_id(201)).has_value());  // garbage: a lie too
  CHECK(heads.discredited(at(62s) + 119s, peer_id(9)));
  CHECK_FALSE(heads.discredited(at(62s) + 120s, peer_id(9)));
  // A manifest signed by a key we do not trust is no lie (peers may trust
  // other keys): that namer is only passed over for that id.
  auto v2 = manifest_of(2, trainer, 2, v1->id());
  REQUIRE(heads.on_head_named(at(200s), peer_id(3), "policy", VersionNumber{2}, v2->id()).has_value());
  (void)heads.on_head_named(at(200s), peer_id(4), "policy", VersionNumber{2}, v2->id());
  auto other = heads.on_foreign_manifest(at(201s), peer_id(3), v2->id());
  REQUIRE(other.has_value());
  CHECK(other->peer == peer_id(4));
  CHECK_FALSE(heads.discredited(at(201s), peer_id(3)));
}

TEST_CASE("head tracker: a namer without the parent of its head is passed over, not discredited") {
  const Identity trainer = test_identity(1);
  HeadTracker heads({trainer.public_key()}, kRetry);
  const auto [v1, v2, v3] = chain_of_three(trainer);
  REQUIRE(heads.accept(v1).is_ok());
  REQUIRE(heads.on_head_named(at(0s), peer_id(2), "policy", VersionNumber{3}, v3->id()).has_value());
  (void)heads.on_head_named(at(0s), peer_id(3), "policy", VersionNumber{3}, v3->id());
  REQUIRE_FALSE(heads.accept(v3).value());  // waits for v2
  auto parents = heads.parent_requests(at(1s));
  REQUIRE(parents.size() == 1);
  const PeerId asked = parents[0].peer;
  auto next = heads.on_no_manifest(at(1s), asked, v2->id());
  REQUIRE(next.has_value());
  CHECK(next->peer != asked);
  CHECK_FALSE(heads.discredited(at(1s), asked));
}
