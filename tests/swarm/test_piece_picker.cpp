#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "swarm/piece_picker.hpp"

using namespace tensorhub;
using namespace tensorhub::swarm;
using core::Bitfield;

namespace {
Bitfield bits(std::size_t n, std::initializer_list<std::size_t> set) {
  Bitfield b(n);
  for (auto i : set) b.set(i);
  return b;
}
}  // namespace

TEST_CASE("piece picker: rarest first, only what the peer has") {
  PiecePicker p(8, 1);
  p.add_peer(bits(8, {0, 1, 2, 3, 4, 5, 6, 7}));  // a seed
  p.add_peer(bits(8, {0, 1, 2, 3}));
  p.add_peer(bits(8, {0, 1}));
  p.check_invariants();
  CHECK(p.availability(ShardIndex{0}) == 3);
  CHECK(p.availability(ShardIndex{5}) == 1);
  const auto from_seed = p.pick(bits(8, {0, 1, 2, 3, 4, 5, 6, 7}), 8);
  REQUIRE(from_seed.size() == 8);
  for (std::size_t i = 1; i < from_seed.size(); ++i) {
    CHECK(p.availability(from_seed[i - 1]) <= p.availability(from_seed[i]));
  }
  const auto from_small = p.pick(bits(8, {0, 1}), 5);
  CHECK(from_small.size() == 2);
  // Shards nobody has are never picked.
  PiecePicker q(4, 2);
  CHECK(q.pick(bits(4, {0, 1, 2, 3}), 4).empty());
}

TEST_CASE("piece picker: drop and restore") {
  PiecePicker p(6, 3);
  p.add_peer(bits(6, {0, 1, 2, 3, 4, 5}));
  p.increment(ShardIndex{2});
  p.drop(ShardIndex{1});
  p.drop(ShardIndex{2});
  p.check_invariants();
  CHECK(p.wanted_count() == 4);
  CHECK_FALSE(p.wanted(ShardIndex{1}));
  auto picked = p.pick(bits(6, {0, 1, 2, 3, 4, 5}), 6);
  CHECK(std::find(picked.begin(), picked.end(), ShardIndex{1}) == picked.end());
  CHECK(picked.size() == 4);
  p.restore(ShardIndex{2});
  p.check_invariants();
  CHECK(p.wanted(ShardIndex{2}));
  CHECK(p.availability(ShardIndex{2}) == 2);
  picked = p.pick(bits(6, {0, 1, 2, 3, 4, 5}), 6);
  CHECK(picked.back() == ShardIndex{2});  // the most available comes last
}

TEST_CASE("piece picker: random operations keep every invariant and the rarest-first order") {
  constexpr std::size_t kShards = 300;
  PiecePicker p(kShards, 9);
  core::SplitMix64 rng(10);
  std::vector<std::uint32_t> model(kShards, 0);
  std::vector<std::uint32_t> extra(kShards, 0);  // the part of model[] from single HAVEs
  std::set<std::uint32_t> wanted;
  for (std::uint32_t i = 0; i < kShards; ++i) wanted.insert(i);
  std::vector<Bitfield> peers;
  for (int step = 0; step < 20000; ++step) {
    const ShardIndex s{static_cast<std::uint32_t>(rng.below(kShards))};
    switch (rng.below(7)) {
      case 0: {  // a neighbour arrives with a random bitfield
        Bitfield b(kShards);
        for (std::size_t i = 0; i < kShards; ++i) {
          if (rng.below(3) == 0) b.set(i);
        }
        p.add_peer(b);
        for (std::size_t i = 0; i < kShards; ++i) model[i] += b.test(i);
        peers.push_back(b);
        break;
      }
      case 1:
        if (!peers.empty()) {
          const std::size_t k = rng.below(peers.size());
          p.remove_peer(peers[k]);
          for (std::size_t i = 0; i < kShards; ++i) model[i] -= peers[k].test(i);
          peers.erase(peers.begin() + static_cast<std::ptrdiff_t>(k));
        }
        break;
      case 2:
        p.increment(s);
        ++model[s.value];
        ++extra[s.value];
        break;
      case 3:
        if (extra[s.value] > 0) {
          p.decrement(s);
          --model[s.value];
          --extra[s.value];
        }
        break;
      case 4:
        p.drop(s);
        wanted.erase(s.value);
        break;
      case 5:
        p.restore(s);
        wanted.insert(s.value);
        break;
      case 6: {
        Bitfield has(kShards);
        for (std::size_t i = 0; i < kShards; ++i) {
          if (rng.below(2) == 0) has.set(i);
        }
        const auto picked = p.pick(has, 20);
        std::uint32_t last = 0;
        for (ShardIndex x : picked) {
          CHECK(has.test(x.value));
          CHECK(wanted.count(x.value));
          CHECK(model[x.value] >= 1);
          CHECK(model[x.value] >= last);  // rarest first
          last = model[x.value];
        }
        // Nothing rarer that the peer has and we want was skipped.
        if (!picked.empty() && picked.size() < 20) {
          for (std::uint32_t i : wanted) {
            if (has.test(i) && model[i] >= 1) {
              CHECK(std::find(picked.begin(), picked.end(), ShardIndex{i}) != picked.end());
            }
          }
        }
        break;
      }
    }
    if (step % 100 == 0) {
      p.check_invariants();
      for (std::size_t i = 0; i < kShards; ++i) REQUIRE(p.availability(ShardIndex{static_cast<std::uint32_t>(i)}) == model[i]);
      REQUIRE(p.wanted_count() == wanted.size());
    }
  }
  p.check_invariants();
}

TEST_CASE("piece picker: ties are broken randomly, reproducibly by seed") {
  auto first_pick = [](std::uint64_t seed) {
    PiecePicker p(64, seed);
    Bitfield all(64, true);
    p.add_peer(all);
    return p.pick(all, 1).front();
  };
  std::set<std::uint32_t> firsts;
  for (std::uint64_t seed = 0; seed < 20; ++seed) firsts.insert(first_pick(seed).value);
  CHECK(firsts.size() > 5);
  CHECK(first_pick(4) == first_pick(4));
}
