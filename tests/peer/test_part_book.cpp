// The part book alone: what it asks for, what it keeps, and its bounds
// against a member that names fake parts or replays seals it cannot finish.
#include <doctest/doctest.h>

#include "peer/part_book.hpp"
#include "support/model_fixture.hpp"

using namespace tensorhub;
using namespace tensorhub::peer;
using namespace tensorhub::testing;
using namespace std::chrono_literals;

namespace {

constexpr Duration kRetry = 2s;

// Part `index` of `count` of "policy" v`version`: rows of a [count * 4, 16] U8 "w".
std::shared_ptr<const Manifest> part(std::uint32_t index, std::uint32_t count, std::uint64_t version = 1,
                                     std::uint8_t fill = 1) {
  std::vector<std::byte> image(64, std::byte{fill});
  ManifestBuildOptions o = small_options(version);
  o.part = PartOf{index, count};
  TensorEntry w{"w", DType::kU8, {4, 16}, 0, 64, {count * 4ull, 16}, {index * 4ull, 0}};
  if (count == 1) w = TensorEntry{"w", DType::kU8, {4, 16}, 0, 64};  // the whole tensor
  auto m = build_manifest(o, image, {w}, test_identity());
  REQUIRE_MESSAGE(m.is_ok(), m.status().to_string());
  return std::make_shared<const Manifest>(std::move(*m));
}

Seal seal_of(const std::vector<std::shared_ptr<const Manifest>>& parts, std::uint64_t version = 1) {
  SealBody b{"policy", version, {}, {}};
  for (const auto& p : parts) b.parts.push_back(p->id());
  auto s = make_seal(b, test_identity());
  REQUIRE(s.is_ok());
  return std::move(*s);
}

ManifestId fake_id(std::uint32_t n) {
  ManifestId id;
  for (int i = 0; i < 4; ++i) id.bytes[i] = static_cast<std::uint8_t>(n >> (8 * i));
  id.bytes[31] = 0xfa;
  return id;
}

PeerId member(std::uint8_t n) {
  PeerId id;
  id.bytes[0] = n;
  return id;
}

}  // namespace

TEST_CASE("part book: a publisher asks for the parts records name, seals once all are here, and a seal joins") {
  PartBook book({test_identity().public_key()}, kRetry);
  const TimePoint t0{std::chrono::seconds(10)};
  const auto p0 = part(0, 2), p1 = part(1, 2);
  REQUIRE(book.add_own(p0).is_ok());
  CHECK(book.missing("policy", VersionNumber{1}) == std::vector<std::uint32_t>{1});
  auto request = book.on_named(t0, member(1), "policy", VersionNumber{1}, p1->id());
  REQUIRE(request.has_value());
  CHECK(request->peer == member(1));
  // Asked again only after `retry`, then of the next namer.
  CHECK_FALSE(book.on_named(t0 + 1s, member(2), "policy", VersionNumber{1}, p1->id()).has_value());
  auto again = book.handle_timeout(t0 + kRetry);
  REQUIRE(again.size() == 1);
  CHECK(again[0].peer == member(2));
  REQUIRE(book.on_part(p1).is_ok());
  const auto ready = book.take_ready();
  REQUIRE(ready.size() == 1);
  CHECK(ready[0].parts == std::vector<ManifestId>{p0->id(), p1->id()});
  CHECK(book.take_ready().empty());  // each once

  // A watcher: the seal's parts are asked of its sender, then it joins.
  PartBook watcher({test_identity().public_key()}, kRetry);
  auto asks = watcher.on_seal(t0, member(3), seal_of({p0, p1}));
  CHECK(asks.size() == 2);
  REQUIRE(watcher.on_part(p0).is_ok());
  REQUIRE(watcher.on_part(p1).is_ok());
  auto joined = watcher.take_joined();
  REQUIRE(joined.size() == 1);
  REQUIRE(joined[0].version.is_ok());
  CHECK(joined[0].version.value()->total_size() == 128);
}

TEST_CASE("part book: one member's fake part ids are bounded, and parts nobody asked for are not kept") {
  PartBook book({test_identity().public_key()}, kRetry);
  const TimePoint t0{std::chrono::seconds(10)};
  REQUIRE(book.add_own(part(0, 2)).is_ok());
  for (std::uint32_t n = 0; n < 1000; ++n) book.on_named(t0, member(9), "policy", VersionNumber{1}, fake_id(n));
  CHECK(book.wanted() == PartBook::kMaxNamedPerPeer);
  // An honest holder's part is still asked for.
  const auto p1 = part(1, 2);
  CHECK(book.on_named(t0, member(1), "policy", VersionNumber{1}, p1->id()).has_value());
  // A part of another version, unasked, is dropped.
  PartBook watcher({test_identity().public_key()}, kRetry);
  REQUIRE(watcher.on_part(part(0, 2, 7)).is_ok());
  CHECK(watcher.versions() == 0);
  CHECK(watcher.manifest(part(0, 2, 7)->id()) == nullptr);
}

TEST_CASE("part book: seals that cannot finish are bounded: higher numbers take their room, and they expire") {
  PartBook book({test_identity().public_key()}, kRetry);
  const TimePoint t0{std::chrono::seconds(10)};
  // 16 replayed seals of low numbers whose parts never come.
  for (std::uint64_t v = 1; v <= PartBook::kMaxPendingSeals; ++v) book.on_seal(t0, member(9), seal_of({part(0, 1, v)}, v));
  CHECK(book.pending_seals() == PartBook::kMaxPendingSeals);
  // A lower number finds no room; a higher one takes the lowest's.
  book.on_seal(t0, member(9), seal_of({part(0, 1, 0)}, 0));
  const auto p = part(0, 1, 40);
  auto asks = book.on_seal(t0, member(1), seal_of({p}, 40));
  REQUIRE(asks.size() == 1);
  CHECK(asks[0].id == p->id());
  CHECK(book.pending_seals() == PartBook::kMaxPendingSeals);
  // A holder of the waiting seal's part in gossip is asked too.
  CHECK(book.on_named(t0 + kRetry, member(2), "policy", VersionNumber{40}, p->id()).has_value());
  // Unfinished seals go after kSealWait.
  book.handle_timeout(t0 + PartBook::kSealWait);
  CHECK(book.pending_seals() == 0);
  CHECK(book.take_joined().empty());
}

TEST_CASE("part book: a part that disagrees with the version's others is refused, and the publisher hears why") {
  PartBook book({test_identity().public_key()}, kRetry);
  const TimePoint t0{std::chrono::seconds(10)};
  REQUIRE(book.add_own(part(0, 2)).is_ok());
  const auto three = part(1, 3);  // says the version has 3 parts
  REQUIRE(book.on_named(t0, member(1), "policy", VersionNumber{1}, three->id()).has_value());
  const auto refused = book.on_part(three);
  CHECK(refused.status().code() == StatusCode::kInvalidArgument);
  const Status why = book.seal_failure("policy", VersionNumber{1});
  CHECK(why.code() == StatusCode::kVerifyFailed);
  CHECK_MESSAGE(why.message().find("says the version has 3 parts; its other parts say 2") != std::string::npos,
                why.message());
}
