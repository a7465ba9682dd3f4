// The piggyback queue: gossip items waiting to ride on outgoing datagrams
// (memberlist's TransmitLimitedQueue).
//
// Each item is sent at most `limit` times (λ·log N, set by the caller), items
// sent fewer times go first, and among those the newest. A new item about a
// member replaces a queued one of the same class about that member, and a
// record with a higher incarnation also retires queued suspect/dead items it
// refutes, so stale news stops spreading.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "gossip/gossip_wire.hpp"

namespace tensorhub::gossip {

class BroadcastQueue {
 public:
  void enqueue(OutgoingItem item);

  // Items whose encodings fit in `byte_budget` together, each counted as one
  // more transmission; those that reach `limit` leave the queue.
  std::vector<OutgoingItem> take(std::size_t byte_budget, int limit);

  std::size_t size() const { return by_order_.size(); }
  bool empty() const { return by_order_.empty(); }
  void clear();

 private:
  struct Entry {
    OutgoingItem item;
    int transmits = 0;
    std::uint64_t order = 0;  // insertion order; larger is newer
    std::size_t bytes = 0;
  };
  struct ByPriority {
    bool operator()(const Entry* a, const Entry* b) const {
      return a->transmits != b->transmits ? a->transmits < b->transmits : a->order > b->order;
    }
  };
  // (member, class): class 0 records, 1 liveness items.
  using Subject = std::pair<PeerId, int>;
  static Subject subject_of(const OutgoingItem& item);
  void remove(const Subject& subject);

  std::map<Subject, std::unique_ptr<Entry>> by_subject_;
  std::set<Entry*, ByPriority> by_order_;
  std::uint64_t next_order_ = 0;
};

}  // namespace tensorhub::gossip
