#include "gossip/broadcast_queue.hpp"

#include <memory>

namespace tensorhub::gossip {

BroadcastQueue::Subject BroadcastQueue::subject_of(const OutgoingItem& item) {
  if (const auto* record = std::get_if<RecordPtr>(&item)) return {(*record)->record.id, 0};
  return {std::get<LivenessItem>(item).target, 1};
}

void BroadcastQueue::remove(const Subject& subject) {
  auto it = by_subject_.find(subject);
  if (it == by_subject_.end()) return;
  by_order_.erase(it->second.get());
  by_subject_.erase(it);
}

void BroadcastQueue::enqueue(OutgoingItem item) {
  const Subject subject = subject_of(item);
  remove(subject);
  if (const auto* record = std::get_if<RecordPtr>(&item)) {
    // A record at a higher incarnation refutes queued suspicion of its owner.
    auto liveness = by_subject_.find(Subject{subject.first, 1});
    if (liveness != by_subject_.end() &&
        std::get<LivenessItem>(liveness->second->item).incarnation < (*record)->record.incarnation) {
      remove(liveness->first);
    }
  }
  auto entry = std::make_unique<Entry>();
  entry->bytes = encoded_item_size(item);
  entry->item = std::move(item);
  entry->order = next_order_++;
  by_order_.insert(entry.get());
  by_subject_.emplace(subject, std::move(entry));
}

std::vector<OutgoingItem> BroadcastQueue::take(std::size_t byte_budget, int limit) {
  std::vector<OutgoingItem> out;
  std::vector<Entry*> sent;
  // Skips items too large for what is left, but not forever: a long queue of
  // records must not make every datagram scan all of it.
  constexpr int kMaxSkipped = 32;
  int skipped = 0;
  const std::size_t smallest = encoded_item_size(LivenessItem{});
  for (Entry* e : by_order_) {
    if (byte_budget < smallest) break;
    if (e->bytes > byte_budget) {
      if (++skipped > kMaxSkipped) break;
      continue;
    }
    byte_budget -= e->bytes;
    out.push_back(e->item);
    sent.push_back(e);
  }
  for (Entry* e : sent) {
    by_order_.erase(e);
    if (++e->transmits >= limit) {
      by_subject_.erase(subject_of(e->item));  // frees e
    } else {
      by_order_.insert(e);
    }
  }
  return out;
}

void BroadcastQueue::clear() {
  by_order_.clear();
  by_subject_.clear();
}

}  // namespace tensorhub::gossip
