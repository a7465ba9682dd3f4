#include "swarm/candidate_list.hpp"

#include <cassert>

namespace tensorhub::swarm {

CandidateList::CandidateList(std::size_t capacity)
    : near_capacity_(capacity - capacity / 4), sample_capacity_(capacity / 4) {
  assert(capacity >= 4);
}

void CandidateList::insert(const PeerId& peer, Part part, std::uint8_t rank) {
  auto& bucket = buckets_[part][rank];
  index_[peer] = Slot{part, rank, static_cast<std::uint32_t>(bucket.size())};
  bucket.push_back(peer);
  ++part_size_[part];
  if (entry_of(rank).complete) ++complete_count_;
}

void CandidateList::erase(const PeerId& peer) {
  auto it = index_.find(peer);
  assert(it != index_.end());
  const Slot slot = it->second;
  index_.erase(it);
  auto& bucket = buckets_[slot.part][slot.rank];
  if (slot.position + 1 != bucket.size()) {
    bucket[slot.position] = bucket.back();
    index_[bucket[slot.position]].position = slot.position;
  }
  bucket.pop_back();
  --part_size_[slot.part];
  if (entry_of(slot.rank).complete) --complete_count_;
}

std::optional<std::pair<PeerId, std::uint8_t>> CandidateList::offer_near(const PeerId& peer, std::uint8_t rank,
                                                                          core::SplitMix64& rng) {
  ++near_offers_[rank];
  if (part_size_[kNear] < near_capacity_) {
    insert(peer, kNear, rank);
    return std::nullopt;
  }
  std::size_t worst = kRanks - 1;
  while (buckets_[kNear][worst].empty()) --worst;  // the part is full, so some bucket is not empty
  const auto& farthest = buckets_[kNear][worst];
  std::size_t victim = farthest.size();
  if (worst > rank) {
    victim = rng.below(farthest.size());
  } else if (worst == rank) {
    // Each of the equals offered so far stays with the same chance.
    const std::uint64_t draw = rng.below(near_offers_[rank]);
    if (draw < farthest.size()) victim = static_cast<std::size_t>(draw);
  }
  if (victim == farthest.size()) return std::make_pair(peer, rank);
  const PeerId displaced = farthest[victim];
  const auto displaced_rank = static_cast<std::uint8_t>(worst);
  erase(displaced);
  insert(peer, kNear, rank);
  return std::make_pair(displaced, displaced_rank);
}

void CandidateList::offer_sample(const PeerId& peer, std::uint8_t rank, core::SplitMix64& rng) {
  ++sample_offers_;
  if (part_size_[kSample] < sample_capacity_) return insert(peer, kSample, rank);
  const std::uint64_t draw = rng.below(sample_offers_);
  if (draw >= sample_capacity_) return;  // not kept: the sample stays uniform over those offered
  erase(PeerId(nth(kSample, static_cast<std::size_t>(draw))));
  insert(peer, kSample, rank);
}

void CandidateList::add(const PeerId& peer, Entry entry, core::SplitMix64& rng) {
  const std::uint8_t rank = rank_of(entry);
  if (auto it = index_.find(peer); it != index_.end()) {
    const Part part = it->second.part;
    if (it->second.rank == rank) return;
    erase(peer);
    insert(peer, part, rank);
    return;
  }
  if (auto left_out = offer_near(peer, rank, rng)) offer_sample(left_out->first, left_out->second, rng);
}

std::optional<CandidateList::Entry> CandidateList::take(const PeerId& peer) {
  auto it = index_.find(peer);
  if (it == index_.end()) return std::nullopt;
  const Entry entry = entry_of(it->second.rank);
  erase(peer);
  return entry;
}

std::optional<PeerId> CandidateList::nearest(bool complete_only, core::SplitMix64* draw) const {
  for (std::uint8_t best = 0; best < kRanks; best += 2) {
    // The ranks of one proximity: complete (best) and, unless excluded, the rest.
    const std::uint8_t last = complete_only ? best : static_cast<std::uint8_t>(best + 1);
    std::size_t count = 0;
    for (std::uint8_t r = best; r <= last; ++r) count += buckets_[kNear][r].size() + buckets_[kSample][r].size();
    if (count == 0) continue;
    if (draw) {
      std::size_t n = static_cast<std::size_t>(draw->below(count));
      for (std::uint8_t r = best; r <= last; ++r) {
        for (const Part part : {kNear, kSample}) {
          const auto& bucket = buckets_[part][r];
          if (n < bucket.size()) return bucket[n];
          n -= bucket.size();
        }
      }
    }
    const PeerId* first = nullptr;
    for (std::uint8_t r = best; r <= last; ++r) {
      for (const Part part : {kNear, kSample}) {
        for (const PeerId& id : buckets_[part][r]) {
          if (!first || id < *first) first = &id;
        }
      }
    }
    return *first;
  }
  return std::nullopt;
}

const PeerId& CandidateList::nth(Part part, std::size_t n) const {
  for (const auto& bucket : buckets_[part]) {
    if (n < bucket.size()) return bucket[n];
    n -= bucket.size();
  }
  assert(false && "nth: past the part's size");
  return buckets_[part][0][0];
}

PeerId CandidateList::any(core::SplitMix64& rng) const {
  assert(!empty());
  const auto n = static_cast<std::size_t>(rng.below(size()));
  return n < part_size_[kNear] ? nth(kNear, n) : nth(kSample, n - part_size_[kNear]);
}

}  // namespace tensorhub::swarm
