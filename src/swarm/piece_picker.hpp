// Rarest-first shard selection over a neighbourhood's availability.
//
// The shards still wanted are kept in one vector ordered by availability
// (how many neighbours hold each), in buckets: every shard of availability a
// sits before every shard of availability a + 1. A HAVE or a lost neighbour
// moves one shard across one bucket boundary by a single swap, so updates are
// O(1); within a bucket the order is a seeded shuffle, which is the random
// tie-break. pick() walks from the rarest bucket and stops as soon as it has
// what it needs (libtorrent's priority vector is the model).
//
// Invariants (checked in debug builds): pieces_ holds exactly the wanted
// shards; pos_[pieces_[i]] == i; bucket boundaries are non-decreasing and
// every shard in bucket a has availability a.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "core/bitfield.hpp"
#include "core/rng.hpp"
#include "tensorhub/ids.hpp"

namespace tensorhub::swarm {

class PiecePicker {
 public:
  // Every shard starts wanted, with availability 0.
  PiecePicker(std::size_t shard_count, std::uint64_t seed);

  std::size_t shard_count() const { return availability_.size(); }

  // A shard no longer to be picked: held, copied locally, or abandoned.
  void drop(ShardIndex shard);
  // Wanted again (e.g. it failed verification).
  void restore(ShardIndex shard);
  bool wanted(ShardIndex shard) const { return pos_[shard.value] != kNotWanted; }
  std::size_t wanted_count() const { return pieces_.size(); }

  // Availability bookkeeping: a neighbour's bitfield arrives or leaves, a HAVE.
  void add_peer(const core::Bitfield& has);
  void remove_peer(const core::Bitfield& has);
  void increment(ShardIndex shard);
  void decrement(ShardIndex shard);
  std::uint32_t availability(ShardIndex shard) const { return availability_[shard.value]; }

  // Up to `count` wanted shards that `has` holds and `eligible` accepts,
  // rarest first from `min_availability` up (by default skipping the shards
  // no neighbour has), ties in random order. Stops as soon as it has `count`.
  std::vector<ShardIndex> pick(const core::Bitfield& has, std::size_t count,
                               const std::function<bool(ShardIndex)>& eligible = nullptr,
                               std::uint32_t min_availability = 1) const;

  // pick() of one shard, allocating nothing (a fetch asks once per request).
  template <typename Eligible>
  std::optional<ShardIndex> pick_one(const core::Bitfield& has, Eligible&& eligible,
                                     std::uint32_t min_availability = 1) const {
    std::optional<ShardIndex> out;
    for_each_held_rarest_first(has, min_availability, [&](ShardIndex s) {
      if (eligible(s)) out = s;
      return !out;
    });
    return out;
  }

  // The wanted shards that no neighbour holds (availability 0), in no
  // particular order. Valid until the picker changes.
  std::span<const ShardIndex> unavailable() const { return {pieces_.data(), start(1)}; }

  // The rarest availability among wanted shards (for diagnostics and tests).
  std::uint32_t min_availability() const;

  void check_invariants() const;

 private:
  static constexpr std::uint32_t kNotWanted = UINT32_MAX;
  // First position of bucket a; bucket a spans [start(a), start(a + 1)).
  std::uint32_t start(std::uint32_t a) const { return a < bucket_start_.size() ? bucket_start_[a] : size(); }
  std::uint32_t size() const { return static_cast<std::uint32_t>(pieces_.size()); }
  // Calls `visit(shard)` for each wanted shard `has` holds, rarest first
  // from `min_availability`, while it returns true.
  template <typename Visit>
  void for_each_held_rarest_first(const core::Bitfield& has, std::uint32_t min_availability, Visit&& visit) const {
    for (std::uint32_t i = start(min_availability); i < size(); ++i) {
      const ShardIndex s = pieces_[i];
      if (has.test(s.value) && !visit(s)) return;
    }
  }
  void grow_buckets(std::uint32_t a);
  void swap_positions(std::uint32_t i, std::uint32_t j);
  void move_up(ShardIndex shard);    // availability a -> a + 1
  void move_down(ShardIndex shard);  // availability a -> a - 1
  void shuffle_into_bucket(ShardIndex shard, std::uint32_t a);

  std::vector<std::uint32_t> availability_;  // per shard, whether wanted or not
  std::vector<ShardIndex> pieces_;           // wanted shards, by bucket
  std::vector<std::uint32_t> pos_;           // shard -> index in pieces_, or kNotWanted
  std::vector<std::uint32_t> bucket_start_;  // bucket a -> first index
  core::SplitMix64 rng_;
};

}  // namespace tensorhub::swarm
