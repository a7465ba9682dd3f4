// The holders a fetch knows of and is not connected to, bounded.
//
// A fetcher needs a few dozen neighbours, not every holder of a swarm of
// 10,000 peers. Keeping every holder gossip names costs a real peer little,
// but the simulator runs one fetch per peer, and a list per fetcher of every
// other peer would be 10^8 entries at 10,240 peers.
//
// The list keeps two parts:
// * the *near* part (three quarters of the capacity) prefers nearer holders
//   and, among equally near, complete ones: a newcomer displaces one drawn
//   at random from the farthest kept when it is nearer; among equals the
//   part is a uniform sample of those named (reservoir sampling), so neither
//   the first nor the last named fill it;
// * the *sample* part (the rest) is a uniform sample of every holder the
//   near part did not keep, whatever its distance: the random neighbours a
//   fetch takes for diversity come from the whole list, and without this
//   part a peer in a rack of a thousand would know only its rack.
// A holder dropped from both is forgotten; gossip names holders again on
// every update of their records.
//
// To fill its neighbourhood a fetcher takes the first in id order among the
// nearest, so fetchers that know the same holders make the same choice (the
// simulator finds that better than a draw per fetcher; why is not yet
// understood). To find a holder of a shard no neighbour has, it draws
// instead: there, the same choice everywhere is the same wrong guess
// everywhere. `any` draws from the whole list.
//
// Sans-I/O, deterministic for a given sequence of calls and generator.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "core/rng.hpp"
#include "swarm/topology.hpp"
#include "tensorhub/ids.hpp"

namespace tensorhub::swarm {

class CandidateList {
 public:
  struct Entry {
    Proximity proximity = Proximity::kRemote;
    bool complete = false;  // gossip named it a holder of the whole version
  };

  // REQUIRES: capacity >= 4 (each part holds at least one).
  explicit CandidateList(std::size_t capacity);

  // Adds a holder, or updates one already listed (it keeps its place). May
  // drop another holder (or this one) to stay within the capacity.
  void add(const PeerId& peer, Entry entry, core::SplitMix64& rng);
  // Removes the holder if listed; returns what was known of it.
  std::optional<Entry> take(const PeerId& peer);
  bool contains(const PeerId& peer) const { return index_.count(peer) != 0; }
  // What is known of a listed holder, which stays listed.
  std::optional<Entry> find(const PeerId& peer) const {
    auto it = index_.find(peer);
    if (it == index_.end()) return std::nullopt;
    return entry_of(it->second.rank);
  }
  // Whether some listed holder is exactly this near. O(1).
  bool any_at(Proximity proximity) const {
    const auto complete = rank_of(Entry{proximity, true}), partial = rank_of(Entry{proximity, false});
    return !buckets_[kNear][complete].empty() || !buckets_[kNear][partial].empty() ||
           !buckets_[kSample][complete].empty() || !buckets_[kSample][partial].empty();
  }

  std::size_t size() const { return index_.size(); }
  bool empty() const { return index_.empty(); }
  std::size_t complete_count() const { return complete_count_; }
  std::size_t capacity() const { return near_capacity_ + sample_capacity_; }

  // Among the nearest listed (only complete ones if `complete_only`): the
  // first in id order, or with `draw`, one drawn at random; nothing if none
  // qualifies. Linear in the size.
  std::optional<PeerId> nearest(bool complete_only, core::SplitMix64* draw = nullptr) const;
  // A holder drawn uniformly from the whole list. REQUIRES: !empty().
  PeerId any(core::SplitMix64& rng) const;
  // Calls visit(peer) for each listed holder exactly this near that gossip
  // did not name complete (still fetching, as far as it was told).
  template <typename Visit>
  void for_each_partial_at(Proximity proximity, Visit&& visit) const {
    const std::uint8_t rank = rank_of(Entry{proximity, false});
    for (const auto& part : buckets_) {
      for (const PeerId& peer : part[rank]) visit(peer);
    }
  }

 private:
  enum Part : std::uint8_t { kNear = 0, kSample = 1 };
  static constexpr std::size_t kRanks = 8;  // proximity x complete, best first
  static std::uint8_t rank_of(Entry e) {
    return static_cast<std::uint8_t>(2 * static_cast<unsigned>(e.proximity) + (e.complete ? 0 : 1));
  }
  static Entry entry_of(std::uint8_t rank) {
    return Entry{static_cast<Proximity>(rank / 2), rank % 2 == 0};
  }
  struct Slot {
    Part part;
    std::uint8_t rank;
    std::uint32_t position;  // in buckets_[part][rank]
  };

  void insert(const PeerId& peer, Part part, std::uint8_t rank);
  void erase(const PeerId& peer);
  // Offers a holder to the near part; returns the holder left out (the
  // newcomer or the one it displaced), if any.
  std::optional<std::pair<PeerId, std::uint8_t>> offer_near(const PeerId& peer, std::uint8_t rank,
                                                             core::SplitMix64& rng);
  void offer_sample(const PeerId& peer, std::uint8_t rank, core::SplitMix64& rng);
  // The n-th holder of a part, counting through its ranks in order.
  const PeerId& nth(Part part, std::size_t n) const;

  std::size_t near_capacity_, sample_capacity_;
  // Invariant: every listed holder is in exactly one bucket, at the position
  // its slot says; part_size_[p] is the sum of bucket sizes of part p.
  std::unordered_map<PeerId, Slot> index_;
  std::array<std::array<std::vector<PeerId>, kRanks>, 2> buckets_;
  std::array<std::size_t, 2> part_size_{};
  std::size_t complete_count_ = 0;
  std::array<std::uint64_t, kRanks> near_offers_{};  // per rank, for the reservoir among equals
  std::uint64_t sample_offers_ = 0;
};

}  // namespace tensorhub::swarm
