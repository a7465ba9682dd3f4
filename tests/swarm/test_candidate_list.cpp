#include <doctest/doctest.h>

#include <map>
#include <set>

#include "swarm/candidate_list.hpp"

using namespace tensorhub;
using namespace tensorhub::swarm;

namespace {
PeerId peer(std::uint64_t n) {
  PeerId id;
  core::SplitMix64 r(n * 7919 + 1);
  for (std::size_t i = 0; i < id.bytes.size(); i += 8) {
    const std::uint64_t v = r.next();
    for (std::size_t b = 0; b < 8; ++b) id.bytes[i + b] = static_cast<std::uint8_t>(v >> (8 * b));
  }
  return id;
}
CandidateList::Entry at(Proximity p, bool complete = false) { return CandidateList::Entry{p, complete}; }
}  // namespace

TEST_CASE("candidate list: under its capacity it keeps every holder") {
  core::SplitMix64 rng(1);
  CandidateList list(64);
  for (std::uint64_t n = 0; n < 40; ++n) list.add(peer(n), at(Proximity::kSameDc), rng);
  list.add(peer(100), at(Proximity::kSameHost), rng);
  list.add(peer(101), at(Proximity::kRemote, /*complete=*/true), rng);
  CHECK(list.size() == 42);
  CHECK(list.complete_count() == 1);
  for (std::uint64_t n = 0; n < 40; ++n) CHECK(list.contains(peer(n)));
  CHECK(list.nearest(false) == peer(100));
  CHECK(list.nearest(true) == peer(101));

  // A holder named again keeps its place and takes the new state.
  list.add(peer(5), at(Proximity::kSameDc, /*complete=*/true), rng);
  CHECK(list.size() == 42);
  CHECK(list.complete_count() == 2);
  const auto taken = list.take(peer(5));
  REQUIRE(taken);
  CHECK(taken->complete);
  CHECK(taken->proximity == Proximity::kSameDc);
  CHECK_FALSE(list.contains(peer(5)));
  CHECK_FALSE(list.take(peer(5)));
  CHECK(list.complete_count() == 1);
  CHECK(list.nearest(true) == peer(101));
}

TEST_CASE("candidate list: bounded, nearer holders displace farther ones, and a sample of the rest stays") {
  core::SplitMix64 rng(2);
  CandidateList list(64);  // 48 near, 16 sample
  // The rack's 40 mates are named last, after thousands of remote holders.
  for (std::uint64_t n = 0; n < 5000; ++n) list.add(peer(n), at(Proximity::kRemote), rng);
  for (std::uint64_t n = 10000; n < 10040; ++n) list.add(peer(n), at(Proximity::kSameRack), rng);
  CHECK(list.size() == 64);
  for (std::uint64_t n = 10000; n < 10040; ++n) CHECK(list.contains(peer(n)));
  std::size_t remote = 0;
  for (std::uint64_t n = 0; n < 5000; ++n) remote += list.contains(peer(n));
  CHECK(remote == 24);  // 8 left in the near part, and the whole sample part
  // Nearest is the first rack mate in id order, and the next once it is taken.
  std::set<PeerId> mates;
  for (std::uint64_t n = 10000; n < 10040; ++n) mates.insert(peer(n));
  for (const PeerId& mate : mates) {
    const auto chosen = list.nearest(false);
    REQUIRE(chosen);
    CHECK(*chosen == mate);
    CHECK(list.take(*chosen));
  }
  const auto after = list.nearest(false);
  REQUIRE(after);
  CHECK_FALSE(mates.count(*after));
}

TEST_CASE("candidate list: among equals it keeps a uniform sample, not the first or last named") {
  // 1,000 equally near holders into 8 places, over many runs: those kept
  // come from the first and the second half of the naming order alike.
  std::size_t from_first_half = 0, kept = 0;
  std::map<std::uint64_t, std::size_t> by_decile;
  for (std::uint64_t run = 0; run < 300; ++run) {
    core::SplitMix64 rng(run + 10);
    CandidateList list(8);
    for (std::uint64_t n = 0; n < 1000; ++n) list.add(peer(n), at(Proximity::kSameDc), rng);
    REQUIRE(list.size() == 8);
    for (std::uint64_t n = 0; n < 1000; ++n) {
      if (!list.contains(peer(n))) continue;
      ++kept;
      from_first_half += n < 500;
      ++by_decile[n / 100];
    }
  }
  CHECK(kept == 300 * 8);
  const double share = static_cast<double>(from_first_half) / static_cast<double>(kept);
  CHECK(share > 0.45);
  CHECK(share < 0.55);
  for (const auto& [decile, count] : by_decile) CHECK(count > 150);  // 240 expected in each
}

TEST_CASE("candidate list: complete holders are preferred to equally near fetchers") {
  core::SplitMix64 rng(3);
  CandidateList list(8);  // 6 near, 2 sample
  for (std::uint64_t n = 0; n < 100; ++n) list.add(peer(n), at(Proximity::kSameDc), rng);
  for (std::uint64_t n = 200; n < 206; ++n) list.add(peer(n), at(Proximity::kSameDc, /*complete=*/true), rng);
  for (std::uint64_t n = 200; n < 206; ++n) CHECK(list.contains(peer(n)));
  CHECK(list.complete_count() == 6);
  CHECK(list.size() == 8);
}

TEST_CASE("candidate list: random adds and takes keep it consistent with what was named") {
  core::SplitMix64 rng(4), script(5);
  CandidateList list(16);
  std::map<std::uint64_t, CandidateList::Entry> named;  // added and not taken since
  for (int step = 0; step < 20000; ++step) {
    const std::uint64_t n = script.below(64);
    if (script.below(3) == 0) {
      const auto taken = list.take(peer(n));
      if (taken) {
        REQUIRE(named.count(n));
        CHECK(taken->proximity == named[n].proximity);
        CHECK(taken->complete == named[n].complete);
      }
      named.erase(n);
    } else {
      const auto e = at(static_cast<Proximity>(script.below(4)), script.below(4) == 0);
      list.add(peer(n), e, rng);
      named[n] = e;
    }
    CHECK(list.size() <= 16);
    std::size_t listed = 0, complete = 0;
    for (std::uint64_t m = 0; m < 64; ++m) {
      if (!list.contains(peer(m))) continue;
      REQUIRE(named.count(m));  // nothing listed that was not named, or was taken
      ++listed;
      complete += named[m].complete;
    }
    REQUIRE(listed == list.size());
    REQUIRE(complete == list.complete_count());
    if (!list.empty()) CHECK(list.contains(list.any(rng)));
  }
}

TEST_CASE("candidate list: a drawn nearest is any of the nearest, never a farther one") {
  core::SplitMix64 rng(6);
  CandidateList list(64);
  for (std::uint64_t n = 0; n < 6; ++n) list.add(peer(n), at(Proximity::kSameRack, /*complete=*/true), rng);
  for (std::uint64_t n = 10; n < 20; ++n) list.add(peer(n), at(Proximity::kSameRack), rng);
  list.add(peer(30), at(Proximity::kSameDc, /*complete=*/true), rng);
  std::set<PeerId> complete_drawn, any_drawn;
  for (int i = 0; i < 1000; ++i) {
    complete_drawn.insert(*list.nearest(/*complete_only=*/true, &rng));
    any_drawn.insert(*list.nearest(/*complete_only=*/false, &rng));
  }
  CHECK(complete_drawn.size() == 6);  // the six complete rack mates, not the farther one
  CHECK_FALSE(complete_drawn.count(peer(30)));
  CHECK(any_drawn.size() == 16);  // every rack mate, complete or not
  CHECK_FALSE(any_drawn.count(peer(30)));
}
