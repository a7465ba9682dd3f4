#include "swarm/fetch_session.hpp"

#include <algorithm>
#include <cassert>
#include <limits>

namespace tensorhub::swarm {

FetchSession::FetchSession(ShardLayout layout, core::Bitfield have, Location self, PeerId self_id,
                           FetchConfig config, std::uint64_t seed, TimePoint now, RequestIds& ids,
                           core::Bitfield wanted)
    : layout_(layout),
      have_(std::move(have)),
      wanted_(wanted.size() == 0 ? core::Bitfield(layout.shard_count(), true) : std::move(wanted)),
      self_(std::move(self)),
      self_id_(self_id),
      config_(config),
      picker_(layout.shard_count(), seed ^ 0x9e3779b97f4a7c15ull),
      neighbourhood_(layout.shard_count(), config.max_candidates, seed) {
  assert(have_.size() == layout_.shard_count());
  assert(wanted_.size() == layout_.shard_count());
  request_ids_ = &ids;
  config_.endgame_duplicates = std::clamp<std::size_t>(config_.endgame_duplicates, 1, RequestTable::kMaxRequestsPerBlock);
  for (std::uint32_t s = 0; s < layout_.shard_count(); ++s) {
    const ShardIndex shard{s};
    if (!needs(shard)) {
      picker_.drop(shard);
    } else {
      unrequested_ += layout_.block_count(shard);
      ++needed_left_;
    }
  }
  if (needed_left_ == 0) {
    finish(Status::ok());
    return;
  }
  // Start the starvation clock now: if no candidate ever appears, no event
  // would run schedule() and the fetch would wait forever.
  schedule(now);
}

// --------------------------------------------------------------------------
// Scheduling and arriving blocks. The neighbourhood, the source rules, the
// slot share and the pieces' way in are in fetch_*.cpp beside this file; the
// requests in flight are the RequestTable's.

FetchSession::Shard& FetchSession::shard_state(ShardIndex s) {
  auto it = shards_.find(s.value);
  if (it != shards_.end()) return it->second;
  Shard shard;
  const std::uint32_t blocks = layout_.block_count(s);
  shard.received = core::Bitfield(blocks);
  shard.sources.resize(blocks);
  shard.started = true;
  return shards_.emplace(s.value, std::move(shard)).first->second;
}

void FetchSession::on_block_freed(ShardIndex shard, BlockIndex block) {
  auto it = shards_.find(shard.value);
  if (it != shards_.end() && !it->second.received.test(block.value)) ++unrequested_;
}

void FetchSession::drop_request(ShardIndex shard, BlockIndex block, const PeerId& peer) {
  requests_.drop(peer, shard, block, [this](ShardIndex s, BlockIndex b) { on_block_freed(s, b); });
}

void FetchSession::release_requests_of(const PeerId& peer, bool still_answered) {
  requests_.release_all_of(peer, still_answered, [this](ShardIndex s, BlockIndex b) { on_block_freed(s, b); });
  for (auto& [index, s] : shards_) {
    if (s.only_from && *s.only_from == peer) s.only_from.reset();  // another may take the retry up
  }
}

void FetchSession::send_request(TimePoint now, const PeerId& id, const Neighbour& n, ShardIndex shard, BlockIndex block) {
  Shard& s = shard_state(shard);
  if (!s.only_from && retry_alone_.count(shard.value)) s.only_from = id;
  // Only shards asked within the datacenter are claimed: one begun across
  // the WAN may be deferred to a carrier elsewhere in the datacenter, and
  // mates that left it to us would wait for the claim to lapse.
  if (!s.claimed && n.proximity != Proximity::kSameHost && n.proximity != Proximity::kRemote) {
    s.claimed = true;
    actions_.push(ClaimAction{shard});
  }
  if (!requests_.asked(shard, block)) --unrequested_;
  const ShardRange range = layout_.block_range(shard, block);
  const RequestId request_id = requests_.add(now, id, range, *request_ids_);
  actions_.push(RequestAction{id, request_id, shard, block, layout_.image_offset(range), range.length});
}

bool FetchSession::request_next(TimePoint now, const PeerId& id, const Neighbour& n) {
  // 1. Shards already started: finish what is begun before starting more.
  for (auto& [index, s] : shards_) {
    const ShardIndex shard{index};
    if (s.verifying || (s.only_from && !(*s.only_from == id)) || !source_rules_.allowed(now, n, shard, /*begun=*/true)) {
      continue;
    }
    const std::uint32_t blocks = layout_.block_count(shard);
    for (std::uint32_t b = 0; b < blocks; ++b) {
      if (!s.received.test(b) && !requests_.asked(shard, BlockIndex{b})) {
        send_request(now, id, n, shard, BlockIndex{b});
        return true;
      }
    }
  }
  // 2. A new shard, rarest first.
  auto picked = picker_.pick_one(
      n.bits, [&](ShardIndex s) { return !shards_.count(s.value) && source_rules_.allowed(now, n, s, /*begun=*/false); });
  if (picked) {
    send_request(now, id, n, *picked, BlockIndex{0});
    return true;
  }
  // 3. Endgame: every missing block is in flight; ask a second holder.
  if (unrequested_ != 0) return false;
  endgame_ = true;
  for (auto& [index, s] : shards_) {
    const ShardIndex shard{index};
    // A retry alone gets no duplicate.
    if (s.verifying || s.only_from || !source_rules_.allowed(now, n, shard, /*begun=*/true)) continue;
    const std::uint32_t blocks = layout_.block_count(shard);
    for (std::uint32_t b = 0; b < blocks; ++b) {
      if (s.received.test(b)) continue;
      if (requests_.may_duplicate(now, id, shard, BlockIndex{b}, config_.endgame_duplicates)) {
        send_request(now, id, n, shard, BlockIndex{b});
        return true;
      }
    }
  }
  return false;
}

void FetchSession::fill(TimePoint now, const PeerId& id, const Neighbour& n) {
  while (n.connected && !n.choked && n.has_bits && requests_.in_flight(id) < config_.pipeline_blocks &&
         request_next(now, id, n)) {
  }
}

void FetchSession::schedule(TimePoint now) {
  if (done_) return;
  last_scheduled_ = now;
  source_rules_.note_schedule(now);
  // What is overdue now is considered below (request_next); what left
  // flight never will be.
  requests_.prune_overdue(now);
  connect_more(now);
  // Nearest neighbours choose first, so they take what they can give.
  for (const auto* entry : neighbourhood_.schedule_order()) fill(now, entry->first, entry->second);
  check_starvation(now);
  keep_slot_share(now);
}

void FetchSession::audience_of_have(ShardIndex shard, const std::set<PeerId>& requesters, const std::set<PeerId>& sources,
                                    std::vector<PeerId>& out) const {
  out.clear();
  // Calls keep(peer, neighbour or nullptr) for each of `peers`, walking the
  // neighbours alongside.
  auto walk = [&](const std::set<PeerId>& peers, auto&& keep) {
    const auto& neighbours = neighbourhood_.all();
    auto n = neighbours.begin();
    for (const PeerId& peer : peers) {
      while (n != neighbours.end() && n->first < peer) ++n;
      const Neighbour* known = n != neighbours.end() && n->first == peer ? &n->second : nullptr;
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
  return it != shards_.end() && block.value < layout_.block_count(shard) && !it->second.verifying &&
         !it->second.received.test(block.value);
}

void FetchSession::on_block_superseded(TimePoint now, const PeerId& peer, ShardIndex shard, BlockIndex block) {
  requests_.note_delivery(now, peer);
  if (!shards_.count(shard.value) || block.value >= layout_.block_count(shard)) return;
  duplicate_bytes_ += layout_.block_length(shard, block);
  drop_request(shard, block, peer);  // a duplicate from endgame, or late
  schedule(now);
}

void FetchSession::on_block_landing(TimePoint now, const PeerId& peer, ShardIndex shard, BlockIndex block) {
  (void)now;
  requests_.mark_landing(peer, shard, block);
}

void FetchSession::on_block(TimePoint now, const PeerId& peer, ShardIndex shard, BlockIndex block) {
  if (!wants_block(shard, block)) return on_block_superseded(now, peer, shard, block);
  // One lookup each of the shard and the sender (a block is most events).
  Shard& s = shards_.find(shard.value)->second;
  const Neighbour* from = neighbourhood_.find(peer);
  // Whether or not it was still asked of this peer, its bytes are here now:
  // every request on the block leaves the table, another holder's with a
  // cancel. The block, counted as asked of nobody when its last request
  // left (or never asked), is received instead.
  bool cancels_others = false;
  requests_.settle(
      now, peer, shard, block,
      [&](const RequestTable::Request& other) {
        actions_.push(CancelAction{other.peer, other.id, shard, block});
        cancels_others = true;
      },
      [this](ShardIndex freed, BlockIndex b) { on_block_freed(freed, b); });
  --unrequested_;
  s.received.set(block.value);
  s.sources[block.value] = peer;
  ++s.received_count;
  const std::uint32_t length = layout_.block_length(shard, block);
  bytes_received_ += length;
  if (from) {
    neighbourhood_.note_bytes(peer, length);
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
  if (cancels_others || !from || from->proximity == Proximity::kRemote || requests_.in_flight_total() == 0) {
    return schedule(now);
  }
  fill(now, peer, *from);
  check_starvation(now);
}

void FetchSession::on_block_refused(TimePoint now, const PeerId& peer, ShardIndex shard, BlockIndex block) {
  drop_request(shard, block, peer);
  // Whatever it claimed, it cannot give us this shard now.
  if (neighbourhood_.drop_have(peer, shard)) picker_.decrement(shard);
  schedule(now);
}

void FetchSession::on_block_deferred(TimePoint now, const PeerId& peer, ShardIndex shard, BlockIndex block) {
  drop_request(shard, block, peer);
  // A request_timeout: long enough for a mate's HAVE to come first, short
  // enough that a carrier that is not our neighbour (or has died) costs
  // little. Asking again is a message; the holder defers again while its
  // carrier is still at work.
  source_rules_.defer(shard, now + config_.request_timeout);
  schedule(now);
}

void FetchSession::on_verified(TimePoint now, ShardIndex shard, bool good) {
  auto it = shards_.find(shard.value);
  if (it == shards_.end() || !it->second.verifying) return;
  if (good) {
    shards_.erase(it);
    requests_.close(shard);
    retry_alone_.erase(shard.value);
    source_rules_.forget_claim(shard);
    have_.set(shard.value);
    --needed_left_;
    picker_.drop(shard);
    actions_.push(AnnounceAction{shard});
    if (needed_left_ == 0) {
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
  requests_.close(shard);
  if (senders.size() != 1) {
    retry_alone_.insert(shard.value);
    schedule(now);
    return;
  }
  const PeerId sender = *senders.begin();
  failed_senders_[shard.value] = sender;
  if (neighbourhood_.find(sender)) {
    if (const int bad = neighbourhood_.note_bad_shard(sender); bad >= config_.max_bad_shards) {
      lose_neighbour(now, sender, /*ban=*/true, "sent " + std::to_string(bad) + " shards that failed verification");
    }
  }
  schedule(now);
}

// --------------------------------------------------------------------------
// Time

void FetchSession::handle_timeout(TimePoint now) {
  if (done_) return;
  const core::TimerTable<FetchTimer> timers = this->timers();
  if (timers.due(FetchTimer::kWanDeferral, now)) {
    source_rules_.expire_deferrals(now);
  }
  if (timers.due(FetchTimer::kConnectBurst, now)) connect_due_.reset();  // schedule() below connects
  if (timers.due(FetchTimer::kReconnect, now)) retry_lost_holders(now);
  if (timers.due(FetchTimer::kConnect, now)) {
    std::vector<PeerId> stale;
    for (const auto& [id, n] : neighbourhood_.all()) {
      if (n.connecting && now >= n.connect_deadline) stale.push_back(id);
    }
    for (const PeerId& id : stale) lose_neighbour(now, id, /*ban=*/false, "connect timed out");
  }
  if (timers.due(FetchTimer::kRequest, now)) {
    // Requests past their deadline go elsewhere; the slow peer is told to drop them.
    std::vector<RequestTable::Request> expired;
    requests_.expired(now, expired);
    requests_timed_out_ += expired.size();
    for (const RequestTable::Request& r : expired) {
      const BlockIndex block = layout_.first_block(r.range);
      drop_request(r.range.shard, block, r.peer);
      actions_.push(CancelAction{r.peer, r.id, r.range.shard, block});
    }
  }
  requests_.refresh_deadlines();  // a lower bound between timeouts, exact from here
  // The other timers' rules are schedule()'s: endgame duplicates,
  // starvation and neighbour swaps, slot probes, the WAN idle rule and
  // lapsed mate claims.
  schedule(now);
}

core::TimerTable<FetchTimer> FetchSession::timers() const {
  core::TimerTable<FetchTimer> t;
  if (done_) return t;
  if (neighbourhood_.connecting_count() != 0) {
    for (const auto& [id, n] : neighbourhood_.all()) {
      if (n.connecting) t.earliest(FetchTimer::kConnect, n.connect_deadline);
    }
  }
  t.set(FetchTimer::kRequest, requests_.next_deadline());
  if (unrequested_ == 0) t.set(FetchTimer::kEndgameDuplicate, requests_.next_overdue(last_scheduled_, config_.endgame_duplicates));
  if (starved_since_) t.set(FetchTimer::kStarvation, *starved_since_ + config_.starvation_timeout);
  if (swap_due_) t.set(FetchTimer::kNeighbourSwap, *swap_due_);  // always later than when it was set
  if (connect_due_) t.set(FetchTimer::kConnectBurst, *connect_due_);
  if (slots_.hungry_since()) t.set(FetchTimer::kSlotProbe, *slots_.hungry_since() + config_.slot_probe_after);
  source_rules_.set_timers(t, last_scheduled_);
  t.set(FetchTimer::kReconnect, neighbourhood_.next_retry());
  return t;
}

void FetchSession::finish(Status status) {
  if (done_) return;
  done_ = true;
  slots_.clear();
  requests_.end([&](const RequestTable::Request& r) {
    actions_.push(CancelAction{r.peer, r.id, r.range.shard, layout_.first_block(r.range)});
  });
  actions_.push(DoneAction{std::move(status)});
}

std::optional<FetchAction> FetchSession::poll() {
  if (actions_.empty() && slots_.any_handed_back() && requests_.in_flight_total() == 0) ask_declined_again();
  return actions_.poll();
}

FetchProgress FetchSession::progress() const {
  FetchProgress p;
  p.shards_total = static_cast<std::uint32_t>(wanted_.count());
  for (std::uint32_t s = 0; s < layout_.shard_count(); ++s) {
    if (have_.test(s) && wanted_.test(s)) {
      ++p.shards_verified;
      p.bytes_verified += layout_.shard_length(ShardIndex{s});
    }
  }
  p.bytes_received = bytes_received_;
  p.bytes_from_wan = bytes_from_wan_;
  p.neighbours = neighbourhood_.size();
  p.bad_shards = bad_shards_;
  p.requests_timed_out = requests_timed_out_;
  p.duplicate_bytes = duplicate_bytes_;
  p.endgame = endgame_;
  return p;
}

}  // namespace tensorhub::swarm
