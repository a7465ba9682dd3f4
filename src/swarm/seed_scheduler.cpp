#include "swarm/seed_scheduler.hpp"

namespace tensorhub::swarm {

SeedScheduler::SeedScheduler(std::uint32_t shard_count, std::size_t reveal_ahead, std::uint64_t seed)
    : shard_count_(shard_count),
      reveal_ahead_(reveal_ahead),
      copies_(shard_count, seed),
      everything_(shard_count, true) {}

void SeedScheduler::add_requester(const PeerId& peer, const core::Bitfield& has) {
  remove_requester(peer);  // a second arrival replaces the first
  Requester r{core::Bitfield(shard_count_), core::Bitfield(shard_count_), 0, false};
  if (has.size() == shard_count_) {
    r.has = has;
    copies_.add_peer(has);
  }
  requesters_.emplace(peer, std::move(r));
}

std::vector<ShardIndex> SeedScheduler::activate(const PeerId& peer) {
  auto it = requesters_.find(peer);
  if (it == requesters_.end()) return {};
  it->second.active = true;
  return top_up(it->second);
}

void SeedScheduler::deactivate(const PeerId& peer) {
  auto it = requesters_.find(peer);
  if (it == requesters_.end()) return;
  Requester& r = it->second;
  r.active = false;
  for (std::uint32_t s = 0; s < shard_count_ && r.pending > 0; ++s) {
    if (r.revealed.test(s) && !r.has.test(s)) {
      r.revealed.reset(s);
      copies_.decrement(ShardIndex{s});
      --r.pending;
    }
  }
}

std::vector<ShardIndex> SeedScheduler::on_have(const PeerId& peer, ShardIndex shard) {
  auto it = requesters_.find(peer);
  if (it == requesters_.end() || shard.value >= shard_count_) return {};
  Requester& r = it->second;
  if (r.has.test(shard.value)) return {};
  r.has.set(shard.value);
  if (r.revealed.test(shard.value)) {
    --r.pending;  // its copy was counted when it was revealed
  } else {
    copies_.increment(shard);  // it got this one elsewhere
  }
  return top_up(r);
}

void SeedScheduler::remove_requester(const PeerId& peer) {
  auto it = requesters_.find(peer);
  if (it == requesters_.end()) return;
  for (std::uint32_t s = 0; s < shard_count_; ++s) {
    if (it->second.has.test(s) || it->second.revealed.test(s)) copies_.decrement(ShardIndex{s});
  }
  requesters_.erase(it);
}

std::size_t SeedScheduler::pending(const PeerId& peer) const {
  auto it = requesters_.find(peer);
  return it == requesters_.end() ? 0 : it->second.pending;
}

std::vector<ShardIndex> SeedScheduler::top_up(Requester& r) {
  std::vector<ShardIndex> revealed;
  while (r.active && r.pending < reveal_ahead_) {
    // The shard with the fewest copies that this requester neither holds nor
    // has been shown; ties in the picker's random order.
    auto picked = copies_.pick(
        everything_, 1, [&](ShardIndex s) { return !r.has.test(s.value) && !r.revealed.test(s.value); },
        /*min_availability=*/0);
    if (picked.empty()) break;  // everything it lacks is revealed
    const ShardIndex s = picked.front();
    r.revealed.set(s.value);
    ++r.pending;
    copies_.increment(s);
    revealed.push_back(s);
  }
  return revealed;
}

}  // namespace tensorhub::swarm
