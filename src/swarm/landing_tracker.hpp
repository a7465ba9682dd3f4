// The payloads landing now, one owner for that fact: at most one payload
// per block of a version lands at a time (so bytes that verified are never
// overwritten by a second copy), and each has the time it began or last
// moved, so the stalled are found without a walk over the connections.
//
// Sans-I/O.
#pragma once

#include <map>
#include <set>
#include <tuple>

#include "core/time.hpp"
#include "tensorhub/ids.hpp"

namespace tensorhub::swarm {

class LandingTracker {
 public:
  // A payload for the block begins to land. Returns false, and records
  // nothing, when another is landing there.
  bool begin(const ManifestId& version, ShardIndex shard, BlockIndex block, TimePoint now) {
    auto [it, added] = since_.try_emplace(Key{version, shard.value, block.value}, now);
    if (!added) return false;
    order_.insert(now);
    return true;
  }
  // Bytes of it arrived: its stall limit counts from now.
  void moved(const ManifestId& version, ShardIndex shard, BlockIndex block, TimePoint now) {
    auto it = since_.find(Key{version, shard.value, block.value});
    if (it == since_.end()) return;
    order_.erase(order_.find(it->second));
    it->second = now;
    order_.insert(now);
  }
  // It arrived, or will not.
  void end(const ManifestId& version, ShardIndex shard, BlockIndex block) {
    auto it = since_.find(Key{version, shard.value, block.value});
    if (it == since_.end()) return;
    order_.erase(order_.find(it->second));
    since_.erase(it);
  }
  // When the block's payload began or last moved (kTimeNever: none lands).
  TimePoint since(const ManifestId& version, ShardIndex shard, BlockIndex block) const {
    auto it = since_.find(Key{version, shard.value, block.value});
    return it == since_.end() ? kTimeNever : it->second;
  }
  bool empty() const { return since_.empty(); }
  std::size_t size() const { return since_.size(); }
  // When the payload that has gone longest without moving last moved
  // (kTimeNever when none lands).
  TimePoint oldest() const { return order_.empty() ? kTimeNever : *order_.begin(); }

 private:
  using Key = std::tuple<ManifestId, std::uint32_t, std::uint32_t>;  // version, shard, block
  std::map<Key, TimePoint> since_;
  std::multiset<TimePoint> order_;  // the values of since_
};

}  // namespace tensorhub::swarm
