// The requests one fetch has in flight, and the pace of the holders they
// went to.
//
// A request asks one holder for a range of one shard. The table files it
// under every block the range touches, so a fetch's questions about a block
// (is it asked; of whom; is a payload landing for it; may a second holder
// be asked) and an answer's question by id (which range; is it still ours)
// are both lookups. A block carries at most kMaxRequestsPerBlock requests.
// A request let go without a cancel (its holder still answers it) is
// remembered by id until answered or its connection closes.
//
// Per holder, the table keeps what sets a request's deadline: how many
// requests are in flight to it, when the earliest of them was sent, and the
// smoothed gap between its deliveries. For the whole fetch it keeps the
// smoothed round trip that says when an endgame request is overdue for a
// second holder, and the requests in the order sent that may yet become so.
//
// It sends nothing and decides nothing: FetchSession asks it and acts.
// Dropping requests may leave blocks with none: the calls that drop take a
// `freed(ShardIndex, BlockIndex)` called once for each such block, so the
// session can count what is left to ask.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

#include "core/time.hpp"
#include "swarm/request_ids.hpp"
#include "swarm/shard_layout.hpp"
#include "tensorhub/ids.hpp"

namespace tensorhub::swarm {

class RequestTable {
 public:
  // Bounds endgame duplicates (FetchConfig::endgame_duplicates).
  static constexpr std::size_t kMaxRequestsPerBlock = 4;

  struct Request {
    RequestId id;  // on the wire
    PeerId peer;
    ShardRange range;
    TimePoint sent;
    bool landing = false;     // its payload is arriving (mark_landing): no deadline
    bool superseded = false;  // its payload was turned away unwritten (mark_superseded)
  };

  RequestTable(ShardLayout layout, Duration request_timeout);
  // Not copied: busy_ points into holders_.
  RequestTable(const RequestTable&) = delete;
  RequestTable& operator=(const RequestTable&) = delete;

  // --- Holders: the peers requests may go to ---
  // REQUIRES: `peer` is not a holder.
  void add_holder(const PeerId& peer, bool remote);
  // REQUIRES: no request to `peer` is in the table (release_all_of).
  void remove_holder(const PeerId& peer);
  // Requests to `peer` in flight (0 for one that is not a holder).
  std::size_t in_flight(const PeerId& peer) const;
  std::size_t in_flight_total() const;
  // To holders across the WAN.
  std::size_t in_flight_remote() const { return in_flight_remote_; }
  // The holder delivered a block, wanted or not: its pace. Nothing for a
  // peer that is not a holder.
  void note_delivery(TimePoint now, const PeerId& peer);

  // --- Requests ---
  // Files a request for `range` to `peer`, with the next id of `ids`.
  // REQUIRES: `peer` is a holder with no request on any block of `range`,
  // and each of those blocks has fewer than kMaxRequestsPerBlock requests.
  RequestId add(TimePoint now, const PeerId& peer, const ShardRange& range, RequestIds& ids);
  // The request `id` of `peer`, in the table or let go and not yet
  // answered; nullptr when neither.
  const Request* find(const PeerId& peer, RequestId id) const;
  // Its payload is turned away unwritten: it ends as superseded.
  void mark_superseded(const PeerId& peer, RequestId id);
  // Its answer was handled: a let-go request is forgotten.
  void answered(const PeerId& peer, RequestId id);
  // The payload of `peer`'s request on the block began to land: it no
  // longer times out, and the block gets no second holder.
  void mark_landing(const PeerId& peer, ShardIndex shard, BlockIndex block);
  // Whether any request is on the block / on any block of the shard.
  bool asked(ShardIndex shard, BlockIndex block) const;
  bool asked(ShardIndex shard) const;
  // Calls `visit(const Request&)` for each request on the block, oldest first.
  template <typename Visit>
  void for_each_on(ShardIndex shard, BlockIndex block, Visit&& visit) const;

  // Drops `peer`'s request on the block, if it has one.
  template <typename Freed>
  void drop(const PeerId& peer, ShardIndex shard, BlockIndex block, Freed&& freed);
  // The block arrived from `peer`: its round trip is sampled, and every
  // request on the block leaves the table; `cancelled(const Request&)` is
  // called for each of another holder's (the driver cancels them).
  template <typename Cancelled, typename Freed>
  void settle(TimePoint now, const PeerId& peer, ShardIndex shard, BlockIndex block, Cancelled&& cancelled,
              Freed&& freed);
  // Drops every request to `peer`. With `still_answered` its holder was
  // told nothing (no cancel; the connection stays), so find() keeps naming
  // each until answered() or connection_closed().
  template <typename Freed>
  void release_all_of(const PeerId& peer, bool still_answered, Freed&& freed);
  // The connection to `peer` closed: nothing it was asked is answered now.
  void connection_closed(const PeerId& peer);
  // Appends the requests past their deadline at `now` (not landing), in
  // shard, block and sending order. They stay in the table.
  void expired(TimePoint now, std::vector<Request>& out) const;
  // Calls `visit(const Request&)` for every request, in shard, block and
  // sending order, then forgets every id: no answer finds one afterwards.
  template <typename Visit>
  void end(Visit&& visit);
  // REQUIRES: !asked(shard). Its blocks' entries go.
  void close(ShardIndex shard);

  // --- Deadlines ---
  // The earliest deadline of a request in flight (kTimeNever: none), from
  // each busy holder's earliest send: exact after refresh_deadlines, else
  // early (a request dropped or landing leaves the earliest send behind).
  TimePoint next_deadline() const;
  void refresh_deadlines();

  // --- Endgame ---
  // Whether `peer` may be asked for the block as another holder: it is not
  // asked already, fewer than `duplicates` are, and every request on the
  // block is overdue (sent two round trips ago) and not landing.
  bool may_duplicate(TimePoint now, const PeerId& peer, ShardIndex shard, BlockIndex block,
                     std::size_t duplicates) const;
  // Forgets the queued requests that left flight or are overdue at `now`
  // (already considered for a duplicate).
  void prune_overdue(TimePoint now);
  // When the first request still in flight, with fewer than `duplicates`
  // requests on its block and none landing, becomes overdue after `after`
  // (kTimeNever: none).
  TimePoint next_overdue(TimePoint after, std::size_t duplicates) const;

 private:
  struct Holder {
    bool remote = false;
    std::size_t in_flight = 0;
    // No request in flight to it and not landing was sent before this:
    // exact after refresh_deadlines, a lower bound otherwise.
    TimePoint first_sent;
    TimePoint last_delivery;  // the last block it sent us
    Duration delivery_gap{};  // smoothed time between its blocks (1/8 per sample)
  };
  // A block's requests, as slots of requests_, oldest first; held inline so
  // that asking for a block allocates nothing.
  struct BlockRequests {
    std::array<std::uint32_t, kMaxRequestsPerBlock> slots{};
    std::uint8_t count = 0;
  };
  struct ShardRequests {
    std::vector<BlockRequests> blocks;
    std::uint32_t asked_blocks = 0;  // blocks with a request
  };
  struct Queued {  // a request that may become overdue
    TimePoint sent;
    ShardIndex shard;
    BlockIndex block;
    PeerId peer;
  };

  // When a request to a holder counts as lost (nullptr: not a holder).
  TimePoint deadline_of(TimePoint sent, const Holder* holder) const;
  Holder* holder(const PeerId& peer);
  const Holder* holder(const PeerId& peer) const;
  const BlockRequests* block(ShardIndex shard, BlockIndex block) const;
  // The slot of `peer`'s request on the block, or nullopt.
  std::optional<std::uint32_t> slot_of(const PeerId& peer, ShardIndex shard, BlockIndex block) const;
  // Takes the request out of every block it is on, and out of its holder's
  // count; `freed` names each block left with no request.
  template <typename Freed>
  void remove(std::uint32_t slot, Freed&& freed);
  // Takes the slot off the block; true when the block has no request left.
  bool unfile(std::uint32_t slot, ShardIndex shard, BlockIndex b);
  // The request leaves its holder's count, the ids and the slots.
  void forget(std::uint32_t slot);
  // Whether the request is filed first on this block (walks visit it there).
  bool starts_on(std::uint32_t slot, BlockIndex b) const { return layout_.first_block(requests_[slot].range).value == b.value; }
  bool still_in_flight(const Queued& q) const;
  bool landing_on(const BlockRequests& b) const;
  void check_invariants() const;

  ShardLayout layout_;
  Duration request_timeout_;
  std::vector<Request> requests_;           // by slot
  std::vector<std::uint32_t> free_slots_;   // of requests_
  std::unordered_map<RequestId, std::uint32_t> by_id_;  // the slots in the table
  std::map<std::uint32_t, ShardRequests> shards_;        // started shards, by index
  std::unordered_map<RequestId, Request> let_go_;
  std::map<PeerId, Holder> holders_;
  // Holders with requests in flight (a few of dozens: next_deadline looks
  // only at them). Invariant: exactly those with in_flight != 0.
  std::vector<const Holder*> busy_;
  std::size_t in_flight_total_ = 0;
  std::size_t in_flight_remote_ = 0;
  // Smoothed time from request to arrival. Endgame duplicates only requests
  // outstanding for twice that: a duplicate of a block about to arrive is
  // waste, and with small versions every block is "in flight" at once.
  Duration round_trip_ = std::chrono::milliseconds(20);
  // The requests that may still become overdue, in the order sent.
  // Invariant after prune_overdue: the front is in flight and not overdue.
  std::deque<Queued> overdue_queue_;
};

// --- Templates ---

template <typename Visit>
void RequestTable::for_each_on(ShardIndex shard, BlockIndex b, Visit&& visit) const {
  const BlockRequests* on = block(shard, b);
  if (on == nullptr) return;
  for (std::uint8_t i = 0; i < on->count; ++i) visit(requests_[on->slots[i]]);
}

template <typename Freed>
void RequestTable::remove(std::uint32_t slot, Freed&& freed) {
  const ShardRange range = requests_[slot].range;
  const std::uint32_t last = layout_.last_block(range).value;
  for (std::uint32_t b = layout_.first_block(range).value; b <= last; ++b) {
    if (unfile(slot, range.shard, BlockIndex{b})) freed(range.shard, BlockIndex{b});
  }
  forget(slot);
}

template <typename Freed>
void RequestTable::drop(const PeerId& peer, ShardIndex shard, BlockIndex b, Freed&& freed) {
  if (const auto slot = slot_of(peer, shard, b)) remove(*slot, freed);
}

template <typename Cancelled, typename Freed>
void RequestTable::settle(TimePoint now, const PeerId& peer, ShardIndex shard, BlockIndex b, Cancelled&& cancelled,
                          Freed&& freed) {
  note_delivery(now, peer);
  const BlockRequests* on = block(shard, b);
  if (on == nullptr) return;
  for (std::uint8_t i = 0; i < on->count; ++i) {
    const Request& r = requests_[on->slots[i]];
    // An exponentially weighted average, 1/8 per sample (as TCP's SRTT).
    if (r.peer == peer) round_trip_ += (std::chrono::duration_cast<Duration>(now - r.sent) - round_trip_) / 8;
  }
  if (const auto own = slot_of(peer, shard, b)) remove(*own, freed);
  while (on->count != 0) {
    const std::uint32_t slot = on->slots[0];
    cancelled(static_cast<const Request&>(requests_[slot]));
    remove(slot, freed);
  }
}

template <typename Freed>
void RequestTable::release_all_of(const PeerId& peer, bool still_answered, Freed&& freed) {
  for (auto& [index, s] : shards_) {
    for (std::uint32_t b = 0; b < s.blocks.size(); ++b) {
      const auto slot = slot_of(peer, ShardIndex{index}, BlockIndex{b});
      if (!slot) continue;
      if (still_answered) let_go_[requests_[*slot].id] = requests_[*slot];
      remove(*slot, freed);
    }
  }
}

template <typename Visit>
void RequestTable::end(Visit&& visit) {
  for (const auto& [index, s] : shards_) {
    for (std::uint32_t b = 0; b < s.blocks.size(); ++b) {
      for (std::uint8_t i = 0; i < s.blocks[b].count; ++i) {
        const std::uint32_t slot = s.blocks[b].slots[i];
        if (starts_on(slot, BlockIndex{b})) visit(static_cast<const Request&>(requests_[slot]));
      }
    }
  }
  by_id_.clear();
  let_go_.clear();
  overdue_queue_.clear();
}

}  // namespace tensorhub::swarm
