// The payloads landing now in one fetch's destination, one owner for that
// fact: which request's payload lands in which block, at most one payload
// per block at a time (so bytes that verified are never overwritten by a
// second copy), and each with a deadline, so the stalled are found without
// a walk over the connections. Its FetchSession owns it: a payload begun
// here outlives its request in the session's table, which a cancel or a
// choke may drop while the bytes are on the wire.
//
// A payload is stalled when it has not moved for `stall_limit`, or when it
// has been landing longer than `stall_limit` plus its length at
// `min_bytes_per_second`: a sender that drips a byte now and then holds its
// block as surely as one that stopped.
//
// Sans-I/O.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "core/time.hpp"
#include "swarm/request_ids.hpp"
#include "tensorhub/ids.hpp"

namespace tensorhub::swarm {

// Where a payload lands.
struct LandingBlock {
  ShardIndex shard;
  BlockIndex block;
};

class Landings {
 public:
  Landings(Duration stall_limit, double min_bytes_per_second)
      : stall_limit_(stall_limit), min_bytes_per_second_(min_bytes_per_second) {}

  // The payload of `peer`'s answer to `request`, `length` bytes for
  // `where`, begins to land. Returns false, and records nothing, when
  // another payload lands in that block or this one lands already.
  bool begin(const PeerId& peer, RequestId request, const LandingBlock& where, std::uint32_t length,
             TimePoint now) {
    const BlockKey block{where.shard.value, where.block.value};
    if (blocks_.count(block) || payloads_.count({peer, request})) return false;
    const auto whole = Duration(static_cast<std::int64_t>(1e6 * static_cast<double>(length) / min_bytes_per_second_));
    Payload p{where, now + stall_limit_ + whole, {}};
    p.deadline = deadline_of(p, now);
    deadlines_.emplace(p.deadline, peer);
    blocks_.insert(block);
    payloads_.emplace(std::make_pair(peer, request), p);
    return true;
  }
  bool lands(const PeerId& peer, RequestId request) const { return payloads_.count({peer, request}) != 0; }
  // Bytes of it arrived: the stall limit counts from now (the rate limit
  // does not move).
  void moved(const PeerId& peer, RequestId request, TimePoint now) {
    auto it = payloads_.find({peer, request});
    if (it == payloads_.end()) return;
    deadlines_.erase(deadlines_.find({it->second.deadline, peer}));
    it->second.deadline = deadline_of(it->second, now);
    deadlines_.emplace(it->second.deadline, peer);
  }
  // It arrived, or will not: where it was landing (nullopt: it was not).
  std::optional<LandingBlock> end(const PeerId& peer, RequestId request) {
    auto it = payloads_.find({peer, request});
    if (it == payloads_.end()) return std::nullopt;
    const LandingBlock where = it->second.where;
    deadlines_.erase(deadlines_.find({it->second.deadline, peer}));
    blocks_.erase(BlockKey{where.shard.value, where.block.value});
    payloads_.erase(it);
    return where;
  }
  // The connection to `peer` is gone: none of its payloads lands any more.
  void end_all_from(const PeerId& peer) {
    for (auto it = payloads_.lower_bound({peer, RequestId{0}}); it != payloads_.end() && it->first.first == peer;) {
      const RequestId request = (it++)->first.second;
      end(peer, request);
    }
  }
  // The peers whose payloads land, each once, in their order.
  std::vector<PeerId> senders() const {
    std::vector<PeerId> out;
    for (const auto& [key, p] : payloads_) {
      if (out.empty() || !(out.back() == key.first)) out.push_back(key.first);
    }
    return out;
  }
  // Appends (deadline, sender) of each payload stalled at `now`, earliest
  // first (a sender may come more than once).
  void stalled(TimePoint now, std::vector<std::pair<TimePoint, PeerId>>& out) const {
    for (auto it = deadlines_.begin(); it != deadlines_.end() && it->first <= now; ++it) out.push_back(*it);
  }
  // When the payload counts as stalled (kTimeNever: it does not land).
  TimePoint deadline(const PeerId& peer, RequestId request) const {
    auto it = payloads_.find({peer, request});
    return it == payloads_.end() ? kTimeNever : it->second.deadline;
  }
  bool empty() const { return payloads_.empty(); }
  std::size_t size() const { return payloads_.size(); }
  // The earliest deadline (kTimeNever when none lands).
  TimePoint next_deadline() const { return deadlines_.empty() ? kTimeNever : deadlines_.begin()->first; }

 private:
  using BlockKey = std::pair<std::uint32_t, std::uint32_t>;  // shard, block
  struct Payload {
    LandingBlock where;
    TimePoint rate_deadline;  // began + stall limit + length at the minimum rate
    TimePoint deadline;       // the earlier of that and last moved + stall limit
  };
  TimePoint deadline_of(const Payload& p, TimePoint moved) const {
    return std::min(p.rate_deadline, moved + stall_limit_);
  }

  Duration stall_limit_;
  double min_bytes_per_second_;
  std::map<std::pair<PeerId, RequestId>, Payload> payloads_;  // by sender and request id
  std::set<BlockKey> blocks_;                                      // the blocks landing
  std::multiset<std::pair<TimePoint, PeerId>> deadlines_;          // the payloads' deadlines, with their senders
};

}  // namespace tensorhub::swarm
