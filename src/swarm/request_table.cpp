#include "swarm/request_table.hpp"

#include <algorithm>
#include <cassert>

namespace tensorhub::swarm {

RequestTable::RequestTable(ShardLayout layout, Duration request_timeout)
    : layout_(layout), request_timeout_(request_timeout) {}

// --------------------------------------------------------------------------
// Holders

void RequestTable::add_holder(const PeerId& peer, bool remote) {
  Holder h;
  h.remote = remote;
  const bool added = holders_.emplace(peer, h).second;
  assert(added);
  (void)added;
}

void RequestTable::remove_holder(const PeerId& peer) {
  auto it = holders_.find(peer);
  if (it == holders_.end()) return;
  assert(it->second.in_flight == 0);
  std::erase(busy_, &it->second);
  holders_.erase(it);
}

RequestTable::Holder* RequestTable::holder(const PeerId& peer) {
  auto it = holders_.find(peer);
  return it == holders_.end() ? nullptr : &it->second;
}

const RequestTable::Holder* RequestTable::holder(const PeerId& peer) const {
  auto it = holders_.find(peer);
  return it == holders_.end() ? nullptr : &it->second;
}

std::size_t RequestTable::in_flight(const PeerId& peer) const {
  const Holder* h = holder(peer);
  return h == nullptr ? 0 : h->in_flight;
}

std::size_t RequestTable::in_flight_total() const {
#ifdef TENSORHUB_DEBUG_INVARIANTS
  std::size_t total = 0;
  for (const auto& [peer, h] : holders_) total += h.in_flight;
  assert(total == in_flight_total_);
#endif
  return in_flight_total_;
}

void RequestTable::note_delivery(TimePoint now, const PeerId& peer) {
  Holder* from = holder(peer);
  if (from == nullptr) return;
  if (from->last_delivery != TimePoint{}) {
    from->delivery_gap += (std::min(now - from->last_delivery, request_timeout_ * 8) - from->delivery_gap) / 8;
  }
  from->last_delivery = now;
}

// --------------------------------------------------------------------------
// Requests

RequestId RequestTable::add(TimePoint now, const PeerId& peer, const ShardRange& range, RequestIds& ids) {
  assert(range.length != 0 && range.offset + range.length <= layout_.shard_length(range.shard));
  Holder* to = holder(peer);
  assert(to != nullptr);
  const RequestId id = ids.next();
  std::uint32_t slot;
  if (free_slots_.empty()) {
    slot = static_cast<std::uint32_t>(requests_.size());
    requests_.push_back(Request{id, peer, range, now});
  } else {
    slot = free_slots_.back();
    free_slots_.pop_back();
    requests_[slot] = Request{id, peer, range, now};
  }
  by_id_[id] = slot;
  auto [entry, opened] = shards_.try_emplace(range.shard.value);
  if (opened) entry->second.blocks.resize(layout_.block_count(range.shard));
  const std::uint32_t last = layout_.last_block(range).value;
  for (std::uint32_t b = layout_.first_block(range).value; b <= last; ++b) {
    BlockRequests& on = entry->second.blocks[b];
    assert(on.count < kMaxRequestsPerBlock);
    if (on.count == 0) ++entry->second.asked_blocks;
    on.slots[on.count++] = slot;
    overdue_queue_.push_back(Queued{now, range.shard, BlockIndex{b}, peer});
  }
  if (to->in_flight == 0) {
    to->first_sent = now;
    busy_.push_back(to);
  } else {
    to->first_sent = std::min(to->first_sent, now);  // kTimeNever while all it has in flight lands
  }
  ++to->in_flight;
  ++in_flight_total_;
  if (to->remote) ++in_flight_remote_;
  return id;
}

const RequestTable::BlockRequests* RequestTable::block(ShardIndex shard, BlockIndex b) const {
  auto it = shards_.find(shard.value);
  if (it == shards_.end() || b.value >= it->second.blocks.size()) return nullptr;
  return &it->second.blocks[b.value];
}

std::optional<std::uint32_t> RequestTable::slot_of(const PeerId& peer, ShardIndex shard, BlockIndex b) const {
  const BlockRequests* on = block(shard, b);
  if (on == nullptr) return std::nullopt;
  for (std::uint8_t i = 0; i < on->count; ++i) {
    if (requests_[on->slots[i]].peer == peer) return on->slots[i];
  }
  return std::nullopt;
}

const RequestTable::Request* RequestTable::find(const PeerId& peer, RequestId id) const {
  if (auto at = by_id_.find(id); at != by_id_.end()) {
    const Request& r = requests_[at->second];
    return r.peer == peer ? &r : nullptr;
  }
  auto gone = let_go_.find(id);
  return gone != let_go_.end() && gone->second.peer == peer ? &gone->second : nullptr;
}

void RequestTable::mark_superseded(const PeerId& peer, RequestId id) {
  if (auto at = by_id_.find(id); at != by_id_.end()) {
    if (requests_[at->second].peer == peer) requests_[at->second].superseded = true;
  } else if (auto gone = let_go_.find(id); gone != let_go_.end() && gone->second.peer == peer) {
    gone->second.superseded = true;
  }
}

void RequestTable::answered(const PeerId& peer, RequestId id) {
  if (auto gone = let_go_.find(id); gone != let_go_.end() && gone->second.peer == peer) let_go_.erase(gone);
}

void RequestTable::mark_landing(const PeerId& peer, ShardIndex shard, BlockIndex b) {
  if (const auto slot = slot_of(peer, shard, b)) requests_[*slot].landing = true;
}

bool RequestTable::asked(ShardIndex shard, BlockIndex b) const {
  const BlockRequests* on = block(shard, b);
  return on != nullptr && on->count != 0;
}

bool RequestTable::asked(ShardIndex shard) const {
  auto it = shards_.find(shard.value);
  return it != shards_.end() && it->second.asked_blocks != 0;
}

bool RequestTable::unfile(std::uint32_t slot, ShardIndex shard, BlockIndex b) {
  auto entry = shards_.find(shard.value);
  assert(entry != shards_.end());
  BlockRequests& on = entry->second.blocks[b.value];
  auto* end = on.slots.data() + on.count;
  auto* at = std::find(on.slots.data(), end, slot);
  assert(at != end);
  std::move(at + 1, end, at);
  --on.count;
  if (on.count != 0) return false;
  --entry->second.asked_blocks;
  return true;
}

void RequestTable::forget(std::uint32_t slot) {
  const Request& r = requests_[slot];
  if (auto at = by_id_.find(r.id); at != by_id_.end() && at->second == slot) by_id_.erase(at);
  if (Holder* to = holder(r.peer); to != nullptr && to->in_flight != 0) {
    --in_flight_total_;
    if (to->remote) --in_flight_remote_;
    if (--to->in_flight == 0) std::erase(busy_, to);
  }
  free_slots_.push_back(slot);
}

void RequestTable::connection_closed(const PeerId& peer) {
  std::erase_if(let_go_, [&](const auto& entry) { return entry.second.peer == peer; });
}

void RequestTable::close(ShardIndex shard) {
  assert(!asked(shard));
  shards_.erase(shard.value);
}

// --------------------------------------------------------------------------
// Deadlines

TimePoint RequestTable::deadline_of(TimePoint sent, const Holder* h) const {
  // A holder answers a connection's requests in order, and a busy one has a
  // queue: what counts is how long it has gone without delivering anything,
  // not how old this request is: a deadline per request re-asks blocks
  // whose answers are merely queued behind others, and both copies come.
  if (h == nullptr) return sent + request_timeout_;
  // Across the WAN the link is thinner and shared by every mate's flows, so
  // a healthy holder's gaps are longer. And a holder that is merely slow
  // (a thin or shared link) delivers at a steady pace: it is given several
  // of its usual gaps before it counts as silent.
  const Duration base = request_timeout_ * (h->remote ? 4 : 1);
  const Duration timeout = std::max(base, h->delivery_gap * 6);
  return std::max(sent, h->last_delivery) + timeout;
}

void RequestTable::expired(TimePoint now, std::vector<Request>& out) const {
  for (const auto& [index, s] : shards_) {
    for (std::uint32_t b = 0; b < s.blocks.size(); ++b) {
      for (std::uint8_t i = 0; i < s.blocks[b].count; ++i) {
        const std::uint32_t slot = s.blocks[b].slots[i];
        const Request& r = requests_[slot];
        if (starts_on(slot, BlockIndex{b}) && !r.landing && now >= deadline_of(r.sent, holder(r.peer))) out.push_back(r);
      }
    }
  }
}

TimePoint RequestTable::next_deadline() const {
  TimePoint t = kTimeNever;
  for (const Holder* h : busy_) {
    if (h->first_sent != kTimeNever) t = std::min(t, deadline_of(h->first_sent, h));  // else: all landing
  }
#ifdef TENSORHUB_DEBUG_INVARIANTS
  check_invariants();
  // Every request's deadline is at or after its holder's (first_sent is a
  // lower bound on what is in flight to it).
  for (const auto& [id, slot] : by_id_) {
    const Request& r = requests_[slot];
    const Holder* h = holder(r.peer);
    assert(r.landing || (h->first_sent <= r.sent && t <= deadline_of(r.sent, h)));
  }
#endif
  return t;
}

void RequestTable::refresh_deadlines() {
  for (auto& [peer, h] : holders_) h.first_sent = kTimeNever;
  for (const auto& [id, slot] : by_id_) {
    const Request& r = requests_[slot];
    if (r.landing) continue;  // no deadline
    if (Holder* h = holder(r.peer)) h->first_sent = std::min(h->first_sent, r.sent);
  }
}

void RequestTable::check_invariants() const {
  std::map<PeerId, std::size_t> counted;
  for (const auto& [id, slot] : by_id_) {
    assert(requests_[slot].id == id);
    ++counted[requests_[slot].peer];
  }
  std::size_t total = 0, remote = 0;
  for (const auto& [peer, h] : holders_) {
    assert((h.in_flight != 0) == (std::count(busy_.begin(), busy_.end(), &h) == 1));
    assert(counted[peer] == h.in_flight);
    total += h.in_flight;
    if (h.remote) remote += h.in_flight;
  }
  assert(total == in_flight_total_ && remote == in_flight_remote_);
  assert(busy_.size() <= holders_.size());
  (void)total;
  (void)remote;
}

// --------------------------------------------------------------------------
// Endgame

bool RequestTable::landing_on(const BlockRequests& on) const {
  for (std::uint8_t i = 0; i < on.count; ++i) {
    if (requests_[on.slots[i]].landing) return true;
  }
  return false;
}

bool RequestTable::may_duplicate(TimePoint now, const PeerId& peer, ShardIndex shard, BlockIndex b,
                                 std::size_t duplicates) const {
  const BlockRequests* on = block(shard, b);
  if (on == nullptr) return true;
  if (on->count >= duplicates) return false;
  for (std::uint8_t i = 0; i < on->count; ++i) {
    const Request& r = requests_[on->slots[i]];
    if (r.peer == peer || r.landing || now - r.sent < round_trip_ * 2) return false;
  }
  return true;
}

bool RequestTable::still_in_flight(const Queued& q) const {
  const BlockRequests* on = block(q.shard, q.block);
  if (on == nullptr) return false;
  for (std::uint8_t i = 0; i < on->count; ++i) {
    const Request& r = requests_[on->slots[i]];
    if (r.peer == q.peer && r.sent == q.sent) return true;
  }
  return false;
}

void RequestTable::prune_overdue(TimePoint now) {
  while (!overdue_queue_.empty()) {
    const Queued& q = overdue_queue_.front();
    if (q.sent + round_trip_ * 2 > now && still_in_flight(q)) break;
    overdue_queue_.pop_front();
  }
}

TimePoint RequestTable::next_overdue(TimePoint after, std::size_t duplicates) const {
  // The first one that may be duplicated is the earliest: the queue is in
  // the order sent.
  for (const Queued& q : overdue_queue_) {
    const TimePoint overdue_at = q.sent + round_trip_ * 2;
    if (overdue_at <= after) continue;
    const BlockRequests* on = block(q.shard, q.block);
    if (on != nullptr && on->count < duplicates && !landing_on(*on) && still_in_flight(q)) return overdue_at;
  }
  return kTimeNever;
}

}  // namespace tensorhub::swarm
