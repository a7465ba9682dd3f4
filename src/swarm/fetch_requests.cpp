// FetchSession's request table: requests in flight per block and
// neighbour, deliveries, deadlines and endgame duplicates.
#include "swarm/fetch_session.hpp"

#include <algorithm>
#include <cassert>

namespace tensorhub::swarm {

FetchSession::Shard& FetchSession::shard_state(ShardIndex s) {
  auto it = shards_.find(s.value);
  if (it != shards_.end()) return it->second;
  Shard shard;
  const std::uint32_t blocks = layout_.block_count(s);
  shard.received = core::Bitfield(blocks);
  shard.requests.resize(blocks);
  shard.sources.resize(blocks);
  shard.started = true;
  return shards_.emplace(s.value, std::move(shard)).first->second;
}

std::size_t FetchSession::in_flight_total() const {
#ifdef TENSORHUB_DEBUG_INVARIANTS
  std::size_t total = 0;
  for (const auto& [id, n] : neighbours_) total += n.in_flight;
  assert(total == in_flight_total_);
#endif
  return in_flight_total_;
}

std::size_t FetchSession::wan_in_flight() const {
  std::size_t total = 0;
  for (const auto& [id, n] : neighbours_) {
    if (n.proximity == Proximity::kRemote) total += n.in_flight;
  }
  return total;
}

void FetchSession::drop_request(ShardIndex shard, BlockIndex block, const PeerId& peer) {
  auto it = shards_.find(shard.value);
  if (it == shards_.end()) return;
  auto n = neighbours_.find(peer);
  drop_request(it->second, block, peer, n == neighbours_.end() ? nullptr : &n->second);
}

void FetchSession::drop_request(Shard& s, BlockIndex block, const PeerId& peer, Neighbour* n) {
  auto& requests = s.requests[block.value];
  auto r = std::find_if(requests.begin(), requests.end(), [&](const Request& q) { return q.peer == peer; });
  if (r == requests.end()) return;
  forget_request_id(r->id);
  requests.erase(r);
  if (n) one_less_in_flight(*n);
  if (requests.empty() && !s.received.test(block.value)) ++unrequested_;
}

RequestId FetchSession::take_request_id() {
  return request_ids_->next();
}

const FetchSession::Request* FetchSession::find_request(const PeerId& peer, RequestId id) const {
  auto at = request_blocks_.find(id);
  if (at == request_blocks_.end()) return nullptr;
  auto s = shards_.find(at->second.first.value);
  if (s == shards_.end() || at->second.second.value >= s->second.requests.size()) return nullptr;
  const Request* r = s->second.requests[at->second.second.value].find(peer);
  return r != nullptr && r->id == id ? r : nullptr;
}

std::optional<FetchSession::RequestedBlock> FetchSession::request_of(const PeerId& peer, RequestId id) const {
  const Request* r = find_request(peer, id);
  if (r == nullptr) {
    auto gone = let_go_.find(id);
    if (gone == let_go_.end() || !(gone->second.peer == peer)) return std::nullopt;
    return RequestedBlock{gone->second.shard, gone->second.block, gone->second.superseded};
  }
  const auto& [shard, block] = request_blocks_.find(id)->second;
  return RequestedBlock{shard, block, r->superseded};
}

void FetchSession::mark_superseded(const PeerId& peer, RequestId id) {
  // The table owns the request; find_request only looks.
  if (const Request* r = find_request(peer, id)) {
    const_cast<Request*>(r)->superseded = true;
  } else if (auto gone = let_go_.find(id); gone != let_go_.end() && gone->second.peer == peer) {
    gone->second.superseded = true;
  }
}

void FetchSession::answered(const PeerId& peer, RequestId id) {
  if (auto gone = let_go_.find(id); gone != let_go_.end() && gone->second.peer == peer) let_go_.erase(gone);
}

void FetchSession::one_less_in_flight(const PeerId& peer) {
  if (auto n = neighbours_.find(peer); n != neighbours_.end()) one_less_in_flight(n->second);
}

void FetchSession::one_less_in_flight(Neighbour& n) {
  if (n.in_flight == 0) return;
  --in_flight_total_;
  if (--n.in_flight == 0) std::erase(busy_, &n);
}

void FetchSession::release_requests_of(const PeerId& peer, bool still_answered) {
  for (auto& [index, s] : shards_) {
    for (std::uint32_t b = 0; b < s.requests.size(); ++b) {
      if (still_answered) {
        if (const Request* r = s.requests[b].find(peer)) {
          let_go_[r->id] = LetGo{peer, ShardIndex{index}, BlockIndex{b}, r->superseded};
        }
      }
      drop_request(ShardIndex{index}, BlockIndex{b}, peer);
    }
    if (s.only_from && *s.only_from == peer) s.only_from.reset();  // another may take the retry up
  }
}

void FetchSession::note_delivery(TimePoint now, const PeerId& peer) {
  if (auto n = neighbours_.find(peer); n != neighbours_.end()) note_delivery(now, n->second);
}

void FetchSession::note_delivery(TimePoint now, Neighbour& from) {
  if (from.last_delivery != TimePoint{}) from.delivery_gap += (std::min(now - from.last_delivery, config_.request_timeout * 8) - from.delivery_gap) / 8;
  from.last_delivery = now;
}

TimePoint FetchSession::deadline_of(TimePoint sent, const Neighbour* n) const {
  // A holder answers a connection's requests in order, and a busy one has a
  // queue: what counts is how long it has gone without delivering anything,
  // not how old this request is: a deadline per request re-asks blocks
  // whose answers are merely queued behind others, and both copies come.
  if (n == nullptr) return sent + config_.request_timeout;
  // Across the WAN the link is thinner and shared by every mate's flows, so a
  // healthy holder's gaps are longer.
  // And a holder that is merely slow (a thin or shared link) delivers at a
  // steady pace: it is given several of its usual gaps before it counts as
  // silent (without this, an unlabelled 200 Mbit/s link collapsed under
  // re-requests: 499 timeouts, 2x the version wasted).
  const Duration base = config_.request_timeout * (n->proximity == Proximity::kRemote ? 4 : 1);
  const Duration timeout = std::max(base, n->delivery_gap * 6);
  return std::max(sent, n->last_delivery) + timeout;
}

TimePoint FetchSession::first_request_deadline() const {
  TimePoint t = kTimeNever;
  for (const Neighbour* n : busy_) {
    if (n->first_sent != kTimeNever) t = std::min(t, deadline_of(n->first_sent, n));  // else: all landing
  }
#ifdef TENSORHUB_DEBUG_INVARIANTS
  for (const auto& [id, n] : neighbours_) {
    assert((n.in_flight != 0) == (std::count(busy_.begin(), busy_.end(), &n) == 1));
  }
  assert(busy_.size() <= neighbours_.size());
  // Every request's deadline is at or after its neighbour's (first_sent is
  // a lower bound on what is in flight to it).
  for (const auto& [index, s] : shards_) {
    for (const auto& requests : s.requests) {
      for (const Request& r : requests) {
        const Neighbour* n = find_neighbour(r.peer);
        assert(n != nullptr && n->in_flight != 0);
        assert(r.landing || (n->first_sent <= r.sent && t <= deadline_of(r.sent, n)));  // landing: no deadline
      }
    }
  }
#endif
  return t;
}

void FetchSession::refresh_first_sent() {
  for (auto& [id, n] : neighbours_) n.first_sent = kTimeNever;
  // Consecutive requests are mostly to one neighbour (a pipeline): one
  // lookup per run of them.
  const PeerId* looked_up = nullptr;
  Neighbour* neighbour = nullptr;
  for (const auto& [index, s] : shards_) {
    for (const auto& requests : s.requests) {
      for (const Request& r : requests) {
        if (r.landing) continue;  // no deadline
        if (looked_up == nullptr || !(*looked_up == r.peer)) {
          looked_up = &r.peer;
          auto it = neighbours_.find(r.peer);
          neighbour = it == neighbours_.end() ? nullptr : &it->second;
        }
        if (neighbour) neighbour->first_sent = std::min(neighbour->first_sent, r.sent);
      }
    }
  }
}

bool FetchSession::still_in_flight(const SentRequest& r) const {
  auto it = shards_.find(r.shard.value);
  if (it == shards_.end()) return false;
  const BlockRequests& requests = it->second.requests[r.block.value];
  return std::any_of(requests.begin(), requests.end(), [&](const Request& q) { return q.peer == r.peer && q.sent == r.sent; });
}

bool FetchSession::block_landing(const BlockRequests& requests) {
  return std::any_of(requests.begin(), requests.end(), [](const Request& q) { return q.landing; });
}

bool FetchSession::may_be_duplicated(const SentRequest& r) const {
  auto it = shards_.find(r.shard.value);
  if (it == shards_.end()) return false;
  const BlockRequests& requests = it->second.requests[r.block.value];
  return requests.size() < config_.endgame_duplicates && !block_landing(requests) && still_in_flight(r);
}

TimePoint FetchSession::next_endgame_duplicate() const {
  if (unrequested_ != 0) return kTimeNever;
  // The first one that may be duplicated is the earliest: the queue is in
  // the order sent.
  for (const SentRequest& r : recent_requests_) {
    const TimePoint overdue_at = r.sent + block_rtt_ * 2;
    if (overdue_at > last_scheduled_ && may_be_duplicated(r)) return overdue_at;
  }
  return kTimeNever;
}

}  // namespace tensorhub::swarm
