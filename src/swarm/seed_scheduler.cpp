#include "swarm/seed_scheduler.hpp"

#include <cassert>

namespace tensorhub::swarm {

SeedScheduler::SeedScheduler(std::uint32_t shard_count, std::size_t reveal_ahead, std::uint64_t seed,
                             Duration stall_timeout)
    : shard_count_(shard_count),
      reveal_ahead_(reveal_ahead),
      stall_timeout_(stall_timeout),
      copies_(shard_count, seed),
      everything_(shard_count, true),
      held_(shard_count, 0),
      unheld_(shard_count) {}

void SeedScheduler::add_held(const core::Bitfield& has) {
  for (std::uint32_t s = 0; s < shard_count_; ++s) {
    if (has.test(s) && held_[s]++ == 0) --unheld_;
  }
}

void SeedScheduler::remove_held(const core::Bitfield& has) {
  for (std::uint32_t s = 0; s < shard_count_; ++s) {
    if (has.test(s) && --held_[s] == 0) ++unheld_;
  }
}

void SeedScheduler::add_requester(const PeerId& peer, const core::Bitfield& has) {
  remove_requester(peer);  // a second arrival replaces the first
  Requester r{core::Bitfield(shard_count_), core::Bitfield(shard_count_), 0, false, false};
  if (has.size() == shard_count_) {
    r.has = has;
    copies_.add_peer(has);
    add_held(has);
  }
  requesters_.emplace(peer, std::move(r));
}

std::vector<Reveal> SeedScheduler::activate(TimePoint now, const PeerId& peer) {
  std::vector<Reveal> out;
  auto it = requesters_.find(peer);
  if (it == requesters_.end()) return out;
  it->second.active = true;
  it->second.finishing = false;
  top_up(now, peer, it->second, out);
  return out;
}

void SeedScheduler::finish(const PeerId& peer) {
  auto it = requesters_.find(peer);
  if (it == requesters_.end()) return;
  it->second.finishing = true;
  it->second.waiting = false;
}

void SeedScheduler::forget_revealed(Requester& r) {
  for (std::uint32_t s = 0; s < shard_count_ && r.pending > 0; ++s) {
    if (r.revealed.test(s) && !r.has.test(s)) {
      r.revealed.reset(s);
      if (!r.suspended) copies_.decrement(ShardIndex{s});
      --r.pending;
      --total_pending_;
    }
  }
}

void SeedScheduler::deactivate(const PeerId& peer) {
  auto it = requesters_.find(peer);
  if (it == requesters_.end()) return;
  Requester& r = it->second;
  r.active = false;
  r.waiting = false;
  r.finishing = false;
  forget_revealed(r);
}

std::vector<Reveal> SeedScheduler::suspend(TimePoint now, const PeerId& peer) {
  std::vector<Reveal> out;
  auto it = requesters_.find(peer);
  if (it == requesters_.end() || it->second.suspended) return out;
  Requester& r = it->second;
  r.waiting = false;
  forget_revealed(r);
  for (std::uint32_t s = 0; s < shard_count_; ++s) {
    if (r.has.test(s)) copies_.decrement(ShardIndex{s});
  }
  remove_held(r.has);
  r.suspended = true;
  top_up_waiting(now, out);
  return out;
}

std::vector<Reveal> SeedScheduler::resume(TimePoint now, const PeerId& peer) {
  std::vector<Reveal> out;
  auto it = requesters_.find(peer);
  if (it == requesters_.end() || !it->second.suspended) return out;
  restore(it->second);
  top_up(now, peer, it->second, out);
  return out;
}

void SeedScheduler::restore(Requester& r) {
  r.suspended = false;
  copies_.add_peer(r.has);
  add_held(r.has);
}

bool SeedScheduler::suspended(const PeerId& peer) const {
  auto it = requesters_.find(peer);
  return it != requesters_.end() && it->second.suspended;
}

std::vector<Reveal> SeedScheduler::on_have(TimePoint now, const PeerId& peer, ShardIndex shard) {
  std::vector<Reveal> out;
  auto it = requesters_.find(peer);
  if (it == requesters_.end() || shard.value >= shard_count_) return out;
  Requester& r = it->second;
  if (r.has.test(shard.value)) return out;
  if (r.suspended) restore(r);  // heard from: top_up below shows it more
  r.has.set(shard.value);
  if (r.revealed.test(shard.value)) {
    --r.pending;  // its copy was counted when it was revealed
    --total_pending_;
  } else {
    copies_.increment(shard);  // it got this one elsewhere
  }
  if (held_[shard.value]++ == 0) {
    --unheld_;
    last_progress_ = now;
  }
  top_up(now, peer, r, out);
  if (unheld_ == 0) top_up_waiting(now, out);  // the rule is over: everyone may have more
  return out;
}

void SeedScheduler::remove_requester(const PeerId& peer) {
  auto it = requesters_.find(peer);
  if (it == requesters_.end()) return;
  total_pending_ -= it->second.pending;
  if (!it->second.suspended) {  // else its copies are uncounted already
    for (std::uint32_t s = 0; s < shard_count_; ++s) {
      if (it->second.has.test(s) || it->second.revealed.test(s)) copies_.decrement(ShardIndex{s});
    }
    remove_held(it->second.has);
  }
  requesters_.erase(it);
}

std::size_t SeedScheduler::pending(const PeerId& peer) const {
  auto it = requesters_.find(peer);
  return it == requesters_.end() ? 0 : it->second.pending;
}

TimePoint SeedScheduler::next_timeout() const {
#ifdef TENSORHUB_DEBUG_INVARIANTS
  std::size_t pending_sum = 0;
  for (const auto& [id, r] : requesters_) {
    pending_sum += r.pending;
    assert(!r.suspended || r.pending == 0);  // a suspended requester is shown nothing
  }
  assert(pending_sum == total_pending_);
#endif
  for (const auto& [id, r] : requesters_) {
    if (r.waiting) return last_progress_ + stall_timeout_;
  }
  return kTimeNever;
}

std::vector<Reveal> SeedScheduler::handle_timeout(TimePoint now) {
  std::vector<Reveal> out;
  if (now >= last_progress_ + stall_timeout_) top_up_waiting(now, out);
  return out;
}

void SeedScheduler::top_up_waiting(TimePoint now, std::vector<Reveal>& out) {
  for (auto& [id, r] : requesters_) {
    if (r.waiting) top_up(now, id, r, out);
  }
}

void SeedScheduler::top_up(TimePoint now, const PeerId& id, Requester& r, std::vector<Reveal>& out) {
  r.waiting = false;
  while (r.active && !r.finishing && !r.suspended && r.pending < reveal_ahead_) {
    // The shard with the fewest copies that this requester neither holds nor
    // has been shown; ties in the picker's random order.
    auto picked = copies_.pick(
        everything_, 1, [&](ShardIndex s) { return !r.has.test(s.value) && !r.revealed.test(s.value); },
        /*min_availability=*/0);
    if (picked.empty()) break;  // everything it lacks is revealed
    const ShardIndex s = picked.front();
    const bool first_copy = copies_.availability(s) == 0;
    if (!first_copy && unheld_ > 0 && now < last_progress_ + stall_timeout_) {
      r.waiting = true;  // first copies are still on their way: no duplicates yet
      break;
    }
    r.revealed.set(s.value);
    ++r.pending;
    ++total_pending_;
    copies_.increment(s);
    if (first_copy) last_progress_ = now;
    out.push_back(Reveal{id, s});
  }
}

}  // namespace tensorhub::swarm
