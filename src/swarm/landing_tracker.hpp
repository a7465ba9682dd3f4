// The payloads landing now, one owner for that fact: at most one payload
// per block of a version lands at a time (so bytes that verified are never
// overwritten by a second copy), and each has a deadline, so the stalled are
// found without a walk over the connections.
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
#include <set>
#include <tuple>

#include "core/time.hpp"
#include "tensorhub/ids.hpp"

namespace tensorhub::swarm {

class LandingTracker {
 public:
  LandingTracker(Duration stall_limit, double min_bytes_per_second)
      : stall_limit_(stall_limit), min_bytes_per_second_(min_bytes_per_second) {}

  // A payload of `length` bytes for the block begins to land. Returns
  // false, and records nothing, when another is landing there.
  bool begin(const ManifestId& version, ShardIndex shard, BlockIndex block, std::uint32_t length, TimePoint now) {
    const auto whole = Duration(static_cast<std::int64_t>(1e6 * static_cast<double>(length) / min_bytes_per_second_));
    auto [it, added] = landing_.try_emplace(Key{version, shard.value, block.value}, Payload{now + stall_limit_ + whole, {}});
    if (!added) return false;
    it->second.deadline = deadline_of(it->second, now);
    deadlines_.insert(it->second.deadline);
    return true;
  }
  // Bytes of it arrived: the stall limit counts from now (the rate limit
  // does not move).
  void moved(const ManifestId& version, ShardIndex shard, BlockIndex block, TimePoint now) {
    auto it = landing_.find(Key{version, shard.value, block.value});
    if (it == landing_.end()) return;
    deadlines_.erase(deadlines_.find(it->second.deadline));
    it->second.deadline = deadline_of(it->second, now);
    deadlines_.insert(it->second.deadline);
  }
  // It arrived, or will not.
  void end(const ManifestId& version, ShardIndex shard, BlockIndex block) {
    auto it = landing_.find(Key{version, shard.value, block.value});
    if (it == landing_.end()) return;
    deadlines_.erase(deadlines_.find(it->second.deadline));
    landing_.erase(it);
  }
  // When the block's payload counts as stalled (kTimeNever: none lands).
  TimePoint deadline(const ManifestId& version, ShardIndex shard, BlockIndex block) const {
    auto it = landing_.find(Key{version, shard.value, block.value});
    return it == landing_.end() ? kTimeNever : it->second.deadline;
  }
  bool empty() const { return landing_.empty(); }
  std::size_t size() const { return landing_.size(); }
  // The earliest deadline (kTimeNever when none lands).
  TimePoint next_deadline() const { return deadlines_.empty() ? kTimeNever : *deadlines_.begin(); }

 private:
  using Key = std::tuple<ManifestId, std::uint32_t, std::uint32_t>;  // version, shard, block
  struct Payload {
    TimePoint rate_deadline;  // began + stall limit + length at the minimum rate
    TimePoint deadline;       // the earlier of that and last moved + stall limit
  };
  TimePoint deadline_of(const Payload& p, TimePoint moved) const {
    return std::min(p.rate_deadline, moved + stall_limit_);
  }

  Duration stall_limit_;
  double min_bytes_per_second_;
  std::map<Key, Payload> landing_;
  std::multiset<TimePoint> deadlines_;  // the payloads' deadlines
};

}  // namespace tensorhub::swarm
