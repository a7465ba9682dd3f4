#include "swarm/seed_scheduler.hpp"

#include <algorithm>
#include <cassert>

namespace tensorhub::swarm {

SeedScheduler::SeedScheduler(std::uint32_t shard_count, std::size_t reveal_ahead, std::uint64_t seed,
                             Duration stall_timeout, Duration min_lapse)
    : shard_count_(shard_count),
      reveal_ahead_(reveal_ahead),
      stall_timeout_(stall_timeout),
      min_lapse_(min_lapse),
      copies_(shard_count, seed),
      uncopied_(shard_count, true),
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

void SeedScheduler::count_copy(ShardIndex shard) {
  copies_.increment(shard);
  uncopied_.reset(shard.value);
}

void SeedScheduler::uncount_copy(ShardIndex shard) {
  copies_.decrement(shard);
  if (copies_.availability(shard) == 0) uncopied_.set(shard.value);
}

void SeedScheduler::count_copies(const core::Bitfield& has) {
  copies_.add_peer(has);
  for (std::size_t s = has.find_next(0, true); s < shard_count_; s = has.find_next(s + 1, true)) uncopied_.reset(s);
}

std::optional<ShardIndex> SeedScheduler::next_for(const Requester& r) const {
  // A shard without a copy is neither held by r nor shown to it, unless r
  // is suspended (its holdings uncounted) or it lapsed there.
  for (std::size_t s = uncopied_.find_next(0, true); s < shard_count_; s = uncopied_.find_next(s + 1, true)) {
    if (!r.has.test(s) && !r.revealed.test(s)) return ShardIndex{static_cast<std::uint32_t>(s)};
  }
  auto picked = copies_.pick(
      everything_, 1, [&](ShardIndex s) { return !r.has.test(s.value) && !r.revealed.test(s.value); },
      /*min_availability=*/1);
  if (picked.empty()) return std::nullopt;
  return picked.front();
}

void SeedScheduler::add_requester(const PeerId& peer, const core::Bitfield& has) {
  remove_requester(peer);  // a second arrival replaces the first
  Requester r;
  r.has = core::Bitfield(shard_count_);
  r.revealed = core::Bitfield(shard_count_);
  r.lapsed = core::Bitfield(shard_count_);
  if (has.size() == shard_count_) {
    r.has = has;
    count_copies(has);
    add_held(has);
  }
  requesters_.emplace(peer, std::move(r));
}

std::vector<Reveal> SeedScheduler::activate(TimePoint now, const PeerId& peer) {
  std::vector<Reveal> out;
  auto it = requesters_.find(peer);
  if (it == requesters_.end()) return out;
  if (!it->second.active && !it->second.suspended) ++sharing_;
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
      if (!r.suspended && !r.lapsed.test(s)) uncount_copy(ShardIndex{s});  // a lapsed one is uncounted already
      --r.pending;
      --total_pending_;
    }
  }
  r.first_copies.clear();
  r.lapsed.reset_all();
  r.lapsed_count = 0;
}

void SeedScheduler::deactivate(const PeerId& peer) {
  auto it = requesters_.find(peer);
  if (it == requesters_.end()) return;
  Requester& r = it->second;
  if (shares_uplink(r)) --sharing_;
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
    if (r.has.test(s)) uncount_copy(ShardIndex{s});
  }
  remove_held(r.has);
  if (shares_uplink(r)) --sharing_;
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
  if (r.active) ++sharing_;
  count_copies(r.has);
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
    --r.pending;  // its copy was counted when it was revealed...
    --total_pending_;
    if (r.lapsed.test(shard.value)) {  // ...unless it lapsed
      r.lapsed.reset(shard.value);
      --r.lapsed_count;
      count_copy(shard);
    } else if (r.lapsed_count == 0) {
      // A gap of a requester that keeps up: the uplink's time per revealed
      // shard learns from it.
      const Duration gap = (now - r.gap_start) / static_cast<Duration::rep>(std::max<std::size_t>(sharing_, 1));
      uplink_gap_ = uplink_gap_ == Duration{0} ? gap : (uplink_gap_ * 7 + gap) / 8;
    }
    std::erase(r.first_copies, shard);
    r.gap_start = now;
  } else {
    count_copy(shard);  // it got this one elsewhere
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
  if (shares_uplink(it->second)) --sharing_;
  if (!it->second.suspended) {  // else its copies are uncounted already
    const Requester& r = it->second;
    for (std::uint32_t s = 0; s < shard_count_; ++s) {
      if (r.has.test(s) || (r.revealed.test(s) && !r.lapsed.test(s))) uncount_copy(ShardIndex{s});
    }
    remove_held(it->second.has);
  }
  requesters_.erase(it);
}

std::size_t SeedScheduler::pending(const PeerId& peer) const {
  auto it = requesters_.find(peer);
  return it == requesters_.end() ? 0 : it->second.pending;
}

core::TimerTable<SeedScheduler::Timer> SeedScheduler::timers() const {
#ifdef TENSORHUB_DEBUG_INVARIANTS
  std::size_t pending_sum = 0;
  for (const auto& [id, r] : requesters_) {
    pending_sum += r.pending;
    assert(!r.suspended || r.pending == 0);  // a suspended requester is shown nothing
  }
  assert(pending_sum == total_pending_);
  assert(static_cast<std::size_t>(std::count_if(requesters_.begin(), requesters_.end(), [](const auto& e) {
           return shares_uplink(e.second);
         })) == sharing_);
  for (const auto& [id, r] : requesters_) {
    assert(r.lapsed_count == r.lapsed.count());
    for (ShardIndex s : r.first_copies) assert(r.revealed.test(s.value) && !r.has.test(s.value) && !r.lapsed.test(s.value));
  }
#endif
  core::TimerTable<Timer> t;
  for (const auto& [id, r] : requesters_) {
    if (r.waiting) t.set(Timer::kStall, last_progress_ + stall_timeout_);
    t.earliest(Timer::kLapse, lapse_due(r));
  }
  return t;
}

TimePoint SeedScheduler::lapse_due(const Requester& r) const {
  if (r.first_copies.empty() || r.suspended) return kTimeNever;
  // Until a gap has been seen, only a requester stuck for the stall timeout lags.
  if (uplink_gap_ == Duration{0}) return r.gap_start + stall_timeout_;
  const auto sharing = static_cast<Duration::rep>(std::max<std::size_t>(sharing_, 1));
  const Duration allowed =
      std::clamp<Duration>(uplink_gap_ * sharing * kLapseGaps, min_lapse_, stall_timeout_);
  return r.gap_start + allowed;
}

void SeedScheduler::lapse(Requester& r) {
  for (ShardIndex s : r.first_copies) {
    uncount_copy(s);
    r.lapsed.set(s.value);
    ++r.lapsed_count;
  }
  r.first_copies.clear();
}

std::vector<Reveal> SeedScheduler::handle_timeout(TimePoint now) {
  std::vector<Reveal> out;
  bool lapsed = false;
  for (auto& [id, r] : requesters_) {
    if (now >= lapse_due(r)) {
      lapse(r);
      lapsed = true;
    }
  }
  if (lapsed) {
    // Lapsed first copies have no copy now: shown first, to those that keep up.
    top_up_in_turn(now, out, [](const Requester& r) { return r.lapsed_count == 0; });
  } else if (now >= last_progress_ + stall_timeout_) {
    top_up_waiting(now, out);  // past the stall timeout duplicates go too
  }
  return out;
}

bool SeedScheduler::lagging(const PeerId& peer) const {
  auto it = requesters_.find(peer);
  return it != requesters_.end() && it->second.lapsed_count > 0;
}

void SeedScheduler::top_up_waiting(TimePoint now, std::vector<Reveal>& out) {
  top_up_in_turn(now, out, [](const Requester& r) { return r.waiting; });
}

void SeedScheduler::top_up_in_turn(TimePoint now, std::vector<Reveal>& out,
                                   const std::function<bool(const Requester&)>& who) {
  std::vector<std::pair<const PeerId*, Requester*>> turn;
  for (auto& [id, r] : requesters_) {
    if (who(r)) turn.emplace_back(&id, &r);
  }
  // A reveal each per round: the few shards that have just come free spread
  // over as many requesters, which then serve them to each other, instead of
  // filling the first requester's quota, so the last shards do not all go
  // out through one or two peers' uplinks.
  for (bool revealed = true; revealed;) {
    revealed = false;
    for (auto [id, r] : turn) {
      const std::size_t before = out.size();
      top_up(now, *id, *r, out, 1);
      revealed = revealed || out.size() > before;
    }
  }
}

void SeedScheduler::top_up(TimePoint now, const PeerId& id, Requester& r, std::vector<Reveal>& out, std::size_t limit) {
  r.waiting = false;
  for (std::size_t given = 0; given < limit && r.active && !r.finishing && !r.suspended && r.pending < reveal_ahead_; ++given) {
    // The shard with the fewest copies that this requester neither holds nor
    // has been shown (first copies in shard order).
    const std::optional<ShardIndex> next = next_for(r);
    if (!next) break;  // everything it lacks is revealed
    const ShardIndex s = *next;
    const bool first_copy = copies_.availability(s) == 0;
    if (!first_copy && unheld_ > 0 && now < last_progress_ + stall_timeout_) {
      r.waiting = true;  // first copies are still on their way: no duplicates yet
      break;
    }
    if (first_copy && r.lapsed_count > 0) {
      r.waiting = true;  // it lags: first copies go to those that keep up
      break;
    }
    if (r.pending == 0) r.gap_start = now;
    r.revealed.set(s.value);
    ++r.pending;
    ++total_pending_;
    count_copy(s);
    if (first_copy) {
      last_progress_ = now;
      r.first_copies.push_back(s);
    }
    out.push_back(Reveal{id, s});
  }
}

}  // namespace tensorhub::swarm
