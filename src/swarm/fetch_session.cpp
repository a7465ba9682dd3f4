#include "swarm/fetch_session.hpp"

#include <algorithm>
#include <cassert>
#include <limits>

namespace tensorhub::swarm {

FetchSession::FetchSession(ShardLayout layout, core::Bitfield have, Location self, PeerId self_id,
                           FetchConfig config, std::uint64_t seed, TimePoint now, RequestIds& ids)
    : layout_(layout),
      have_(std::move(have)),
      self_(std::move(self)),
      self_id_(self_id),
      config_(config),
      rng_(seed),
      picker_(layout.shard_count(), seed ^ 0x9e3779b97f4a7c15ull),
      candidates_(std::max<std::size_t>(config.max_candidates, 4)) {
  assert(have_.size() == layout_.shard_count());
  request_ids_ = &ids;
  for (auto& counts : near_holders_) counts.assign(layout_.shard_count(), 0);
  config_.endgame_duplicates = std::clamp<std::size_t>(config_.endgame_duplicates, 1, kMaxRequestsPerBlock);
  for (std::uint32_t s = 0; s < layout_.shard_count(); ++s) {
    const ShardIndex shard{s};
    if (have_.test(s)) {
      picker_.drop(shard);
    } else {
      unrequested_ += layout_.block_count(shard);
    }
  }
  if (have_.all()) {
    finish(Status::ok());
    return;
  }
  // Start the starvation clock now: if no candidate ever appears, no event
  // would run schedule() and the fetch would wait forever.
  schedule(now);
}

// --------------------------------------------------------------------------
// Scheduling and arriving blocks. The neighbourhood, the source rules, the
// request table and the slot share are in fetch_*.cpp beside this file.

void FetchSession::send_request(TimePoint now, const PeerId& id, Neighbour& n, ShardIndex shard, BlockIndex block) {
  Shard& s = shard_state(shard);
  if (!s.only_from && retry_alone_.count(shard.value)) s.only_from = id;
  // Only shards asked within the datacenter are claimed: one begun across
  // the WAN may be deferred to a carrier elsewhere in the datacenter, and
  // mates that left it to us would wait for the claim to lapse.
  if (!s.claimed && n.proximity != Proximity::kSameHost && n.proximity != Proximity::kRemote) {
    s.claimed = true;
    actions_.push(ClaimAction{shard});
  }
  auto& requests = s.requests[block.value];
  if (requests.empty()) --unrequested_;
  const RequestId request_id = take_request_id();
  requests.push_back(Request{id, now, request_id});
  request_blocks_[request_id] = {shard, block};
  recent_requests_.push_back(SentRequest{now, shard, block, id});
  if (n.in_flight == 0) {
    n.first_sent = now;
    busy_.push_back(&n);
  } else {
    n.first_sent = std::min(n.first_sent, now);  // kTimeNever while all it has in flight lands
  }
  ++n.in_flight;
  ++in_flight_total_;
  actions_.push(RequestAction{id, request_id, shard, block,
                              layout_.shard_offset(shard) + std::uint64_t{block.value} * layout_.block_size,
                              layout_.block_length(shard, block)});
}

bool FetchSession::request_next(TimePoint now, const PeerId& id, Neighbour& n) {
  // 1. Shards already started: finish what is begun before starting more.
  for (auto& [index, s] : shards_) {
    const ShardIndex shard{index};
    if (s.verifying || (s.only_from && !(*s.only_from == id)) || !allowed_from(now, n, shard)) continue;
    for (std::uint32_t b = 0; b < s.requests.size(); ++b) {
      if (!s.received.test(b) && s.requests[b].empty()) {
        send_request(now, id, n, shard, BlockIndex{b});
        return true;
      }
    }
  }
  // 2. A new shard, rarest first.
  auto picked = picker_.pick_one(n.bits, [&](ShardIndex s) { return !shards_.count(s.value) && allowed_from(now, n, s); });
  if (picked) {
    send_request(now, id, n, *picked, BlockIndex{0});
    return true;
  }
  // 3. Endgame: every missing block is in flight; ask a second holder.
  if (unrequested_ != 0) return false;
  endgame_ = true;
  for (auto& [index, s] : shards_) {
    const ShardIndex shard{index};
    if (s.verifying || s.only_from || !allowed_from(now, n, shard)) continue;  // a retry alone gets no duplicate
    for (std::uint32_t b = 0; b < s.requests.size(); ++b) {
      auto& requests = s.requests[b];
      if (s.received.test(b) || requests.size() >= config_.endgame_duplicates) continue;
      const bool already = std::any_of(requests.begin(), requests.end(), [&](const Request& r) { return r.peer == id; });
      const bool overdue = std::all_of(requests.begin(), requests.end(),
                                       [&](const Request& r) { return !r.landing && now - r.sent >= block_rtt_ * 2; });
      if (!already && overdue) {
        send_request(now, id, n, shard, BlockIndex{b});
        return true;
      }
    }
  }
  return false;
}

void FetchSession::fill(TimePoint now, const PeerId& id, Neighbour& n) {
  while (n.connected && !n.choked && n.has_bits && n.in_flight < config_.pipeline_blocks && request_next(now, id, n)) {
  }
}

void FetchSession::schedule(TimePoint now) {
  if (done_) return;
  last_scheduled_ = now;
  if (in_flight_total_ != 0) {
    idle_since_.reset();
  } else if (!idle_since_) {
    idle_since_ = now;
  }
  // What is overdue now is considered below (request_next); what left
  // flight never will be.
  while (!recent_requests_.empty()) {
    const SentRequest& r = recent_requests_.front();
    if (r.sent + block_rtt_ * 2 > now && still_in_flight(r)) break;
    recent_requests_.pop_front();
  }
  connect_more(now);
  // Nearest neighbours choose first, so they take what they can give
  // (equals in id order: the map's order, kept by the stable sort).
  if (schedule_order_stale_) {
    schedule_order_.clear();
    for (auto& entry : neighbours_) schedule_order_.push_back(&entry);
    std::stable_sort(schedule_order_.begin(), schedule_order_.end(),
                     [](const auto* a, const auto* b) { return a->second.proximity < b->second.proximity; });
    schedule_order_stale_ = false;
  }
  for (auto* entry : schedule_order_) fill(now, entry->first, entry->second);
  check_starvation(now);
  keep_slot_share(now);
}

void FetchSession::audience_of_have(ShardIndex shard, const std::set<PeerId>& requesters, const std::set<PeerId>& sources,
                                    std::vector<PeerId>& out) const {
  out.clear();
  // Calls keep(peer, neighbour or nullptr) for each of `peers`, walking the
  // neighbours alongside.
  auto walk = [&](const std::set<PeerId>& peers, auto&& keep) {
    auto n = neighbours_.begin();
    for (const PeerId& peer : peers) {
      while (n != neighbours_.end() && n->first < peer) ++n;
      const Neighbour* known = n != neighbours_.end() && n->first == peer ? &n->second : nullptr;
      if (keep(known)) out.push_back(peer);
    }
  };
  walk(requesters, [&](const Neighbour* n) {
    const bool holds = n && !n->super_seed && n->has_bits && shard.value < n->bits.size() && n->bits.test(shard.value);
    return !holds;
  });
  const auto from_requesters = static_cast<std::ptrdiff_t>(out.size());
  walk(sources, [](const Neighbour* n) { return n && n->super_seed; });
  std::inplace_merge(out.begin(), out.begin() + from_requesters, out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
}

bool FetchSession::wants_block(ShardIndex shard, BlockIndex block) const {
  auto it = shards_.find(shard.value);
  return it != shards_.end() && block.value < it->second.requests.size() && !it->second.verifying &&
         !it->second.received.test(block.value);
}

void FetchSession::on_block_superseded(TimePoint now, const PeerId& peer, ShardIndex shard, BlockIndex block) {
  note_delivery(now, peer);
  if (!shards_.count(shard.value) || block.value >= layout_.block_count(shard)) return;
  duplicate_bytes_ += layout_.block_length(shard, block);
  drop_request(shard, block, peer);  // a duplicate from endgame, or late
  schedule(now);
}

void FetchSession::on_block_landing(TimePoint now, const PeerId& peer, ShardIndex shard, BlockIndex block) {
  (void)now;
  auto it = shards_.find(shard.value);
  if (it == shards_.end() || block.value >= it->second.requests.size()) return;
  if (Request* r = it->second.requests[block.value].find(peer)) r->landing = true;
}

void FetchSession::on_block(TimePoint now, const PeerId& peer, ShardIndex shard, BlockIndex block) {
  if (!wants_block(shard, block)) return on_block_superseded(now, peer, shard, block);
  // One lookup each of the shard and the sender (a block is most events).
  Shard& s = shards_.find(shard.value)->second;
  auto sender = neighbours_.find(peer);
  Neighbour* from = sender == neighbours_.end() ? nullptr : &sender->second;
  if (from) note_delivery(now, *from);
  for (const Request& r : s.requests[block.value]) {
    if (r.peer == peer) {
      // An exponentially weighted average, 1/8 per sample (as TCP's SRTT).
      block_rtt_ += (std::chrono::duration_cast<Duration>(now - r.sent) - block_rtt_) / 8;
    }
  }
  drop_request(s, block, peer, from);
  // Whether or not it was still asked of this peer, its bytes are here now.
  if (s.requests[block.value].empty()) {
    // drop_request counted it as unrequested again; it is received instead.
    --unrequested_;
  }
  const bool cancels_others = !s.requests[block.value].empty();
  for (const Request& other : s.requests[block.value]) {
    actions_.push(CancelAction{other.peer, other.id, shard, block});
    forget_request_id(other.id);
    one_less_in_flight(other.peer);
  }
  s.requests[block.value].clear();
  s.received.set(block.value);
  s.sources[block.value] = peer;
  ++s.received_count;
  const std::uint32_t length = layout_.block_length(shard, block);
  bytes_received_ += length;
  if (from) {
    from->bytes += length;
    if (from->proximity == Proximity::kRemote) bytes_from_wan_ += length;
  }
  if (s.received_count == layout_.block_count(shard)) {
    s.verifying = true;
    actions_.push(VerifyAction{shard});
  }
  // Only the sender has a slot freed by this block, and the others had
  // nothing they were allowed to ask for, which a block's arrival does not
  // change, except: cancelled endgame duplicates free their holders' slots,
  // a block across the WAN frees WAN budget, and with nothing left in
  // flight a fetcher takes shards outside its share. A full schedule per
  // block would cost O(shards) per block.
  if (cancels_others || !from || from->proximity == Proximity::kRemote || in_flight_total_ == 0) {
    return schedule(now);
  }
  fill(now, peer, *from);
  check_starvation(now);
}

void FetchSession::on_block_refused(TimePoint now, const PeerId& peer, ShardIndex shard, BlockIndex block) {
  drop_request(shard, block, peer);
  // Whatever it claimed, it cannot give us this shard now.
  if (auto n = neighbours_.find(peer); n != neighbours_.end() && n->second.has_bits && n->second.bits.test(shard.value)) {
    n->second.bits.reset(shard.value);
    picker_.decrement(shard);
    count_holder(n->second, shard, -1);
  }
  schedule(now);
}

void FetchSession::on_block_deferred(TimePoint now, const PeerId& peer, ShardIndex shard, BlockIndex block) {
  drop_request(shard, block, peer);
  // A request_timeout: long enough for a mate's HAVE to come first, short
  // enough that a carrier that is not our neighbour (or has died) costs
  // little. Asking again is a message; the holder defers again while its
  // carrier is still at work.
  wan_deferred_until_[shard.value] = now + config_.request_timeout;
  schedule(now);
}

void FetchSession::on_verified(TimePoint now, ShardIndex shard, bool good) {
  auto it = shards_.find(shard.value);
  if (it == shards_.end() || !it->second.verifying) return;
  if (good) {
    shards_.erase(it);
    retry_alone_.erase(shard.value);
    mate_claims_.erase(shard.value);
    have_.set(shard.value);
    picker_.drop(shard);
    actions_.push(AnnounceAction{shard});
    if (have_.all()) {
      finish(Status::ok());
      return;
    }
    schedule(now);
    return;
  }
  // A bad shard: discard it and fetch it again. Sent by one neighbour
  // alone, it is that neighbour's fault; sent by several, nobody's yet: it
  // is fetched again from one of them (retry_alone_), so the next failure
  // names its sender.
  ++bad_shards_;
  std::set<PeerId> senders(it->second.sources.begin(), it->second.sources.end());
  unrequested_ += layout_.block_count(shard);
  shards_.erase(it);
  if (senders.size() != 1) {
    retry_alone_.insert(shard.value);
    schedule(now);
    return;
  }
  const PeerId sender = *senders.begin();
  failed_senders_[shard.value] = sender;
  if (auto n = neighbours_.find(sender); n != neighbours_.end() && ++n->second.bad_shards >= config_.max_bad_shards) {
    lose_neighbour(now, sender, /*ban=*/true,
                   "sent " + std::to_string(n->second.bad_shards) + " shards that failed verification");
  }
  schedule(now);
}

// --------------------------------------------------------------------------
// Time

void FetchSession::handle_timeout(TimePoint now) {
  if (done_) return;
  const core::TimerTable<FetchTimer> timers = this->timers();
  if (timers.due(FetchTimer::kWanDeferral, now)) {
    std::erase_if(wan_deferred_until_, [&](const auto& entry) { return entry.second <= now; });
  }
  if (timers.due(FetchTimer::kConnectBurst, now)) connect_due_.reset();  // schedule() below connects
  if (timers.due(FetchTimer::kReconnect, now)) retry_lost_holders(now);
  if (timers.due(FetchTimer::kConnect, now)) {
    std::vector<PeerId> stale;
    for (const auto& [id, n] : neighbours_) {
      if (n.connecting && now >= n.connect_deadline) stale.push_back(id);
    }
    for (const PeerId& id : stale) lose_neighbour(now, id, /*ban=*/false, "connect timed out");
  }
  if (timers.due(FetchTimer::kRequest, now)) {
    // Requests past their deadline go elsewhere; the slow peer is told to drop them.
    std::vector<CancelAction> expired;
    for (const auto& [index, s] : shards_) {
      for (std::uint32_t b = 0; b < s.requests.size(); ++b) {
        for (const Request& r : s.requests[b]) {
          if (!r.landing && now >= deadline_of(r.sent, find_neighbour(r.peer))) {
            expired.push_back(CancelAction{r.peer, r.id, ShardIndex{index}, BlockIndex{b}});
          }
        }
      }
    }
    requests_timed_out_ += expired.size();
    for (const CancelAction& cancel : expired) {
      drop_request(cancel.shard, cancel.block, cancel.peer);
      actions_.push(cancel);
    }
  }
  refresh_first_sent();  // a lower bound between timeouts, exact from here
  // The other timers' rules are schedule()'s: endgame duplicates,
  // starvation and neighbour swaps, slot probes, the WAN idle rule and
  // lapsed mate claims.
  schedule(now);
}

core::TimerTable<FetchTimer> FetchSession::timers() const {
  core::TimerTable<FetchTimer> t;
  if (done_) return t;
  if (connecting_count_ != 0) {
    for (const auto& [id, n] : neighbours_) {
      if (n.connecting) t.earliest(FetchTimer::kConnect, n.connect_deadline);
    }
  }
  t.set(FetchTimer::kRequest, first_request_deadline());
  t.set(FetchTimer::kEndgameDuplicate, next_endgame_duplicate());
  if (starved_since_) t.set(FetchTimer::kStarvation, *starved_since_ + config_.starvation_timeout);
  if (swap_due_) t.set(FetchTimer::kNeighbourSwap, *swap_due_);  // always later than when it was set
  if (connect_due_) t.set(FetchTimer::kConnectBurst, *connect_due_);
  if (slot_hungry_since_) t.set(FetchTimer::kSlotProbe, *slot_hungry_since_ + config_.slot_probe_after);
  if (idle_since_ && *idle_since_ + config_.request_timeout > last_scheduled_ && pulls_across_wan()) {
    t.set(FetchTimer::kWanIdle, *idle_since_ + config_.request_timeout);  // allowed_from's idle rule
  }
  for (const auto& [shard, until] : wan_deferred_until_) t.earliest(FetchTimer::kWanDeferral, until);  // the expired are gone
  for (const auto& [peer, lost] : lost_) {
    if (lost.retry_at) t.earliest(FetchTimer::kReconnect, *lost.retry_at);
  }
  if (in_flight_total_ == 0) {
    for (const auto& [shard, claim] : mate_claims_) {
      const TimePoint lapses = claim.since + config_.request_timeout;
      if (lapses > last_scheduled_) t.earliest(FetchTimer::kMateClaim, lapses);
    }
  }
  return t;
}

void FetchSession::finish(Status status) {
  if (done_) return;
  done_ = true;
  recent_requests_.clear();
  declined_.clear();
  asked_again_.clear();
  for (auto& [index, s] : shards_) {
    for (std::uint32_t b = 0; b < s.requests.size(); ++b) {
      for (const Request& r : s.requests[b]) actions_.push(CancelAction{r.peer, r.id, ShardIndex{index}, BlockIndex{b}});
    }
  }
  request_blocks_.clear();
  let_go_.clear();
  actions_.push(DoneAction{std::move(status)});
}

std::optional<FetchAction> FetchSession::poll() {
  if (actions_.empty() && !declined_.empty() && in_flight_total_ == 0) ask_declined_again();
  return actions_.poll();
}

FetchProgress FetchSession::progress() const {
  FetchProgress p;
  p.shards_total = layout_.shard_count();
  for (std::uint32_t s = 0; s < layout_.shard_count(); ++s) {
    if (have_.test(s)) {
      ++p.shards_verified;
      p.bytes_verified += layout_.shard_length(ShardIndex{s});
    }
  }
  p.bytes_received = bytes_received_;
  p.bytes_from_wan = bytes_from_wan_;
  p.neighbours = neighbours_.size();
  p.bad_shards = bad_shards_;
  p.requests_timed_out = requests_timed_out_;
  p.duplicate_bytes = duplicate_bytes_;
  p.endgame = endgame_;
  return p;
}

}  // namespace tensorhub::swarm
