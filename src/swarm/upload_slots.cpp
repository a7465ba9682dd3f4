#include "swarm/upload_slots.hpp"

#include <algorithm>

namespace tensorhub::swarm {

void UploadSlots::on_interested(TimePoint now, const PeerId& peer) {
  if (serving_.count(peer) || std::find(waiting_.begin(), waiting_.end(), peer) != waiting_.end()) return;
  waiting_.push_back(peer);
  fill(now);
}

void UploadSlots::on_gone(TimePoint now, const PeerId& peer) {
  if (serving_.erase(peer) == 0) {
    waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), peer), waiting_.end());
    return;
  }
  fill(now);
}

void UploadSlots::fill(TimePoint now) {
  while (serving_.size() < slots_ && !waiting_.empty()) {
    auto next = waiting_.begin() + static_cast<std::ptrdiff_t>(rng_.below(waiting_.size()));
    const PeerId peer = *next;
    waiting_.erase(next);
    serving_.emplace(peer, now);
    actions_.push(UnchokeAction{peer});
  }
  note_serving_changed();
}

void UploadSlots::note_serving_changed() {
  oldest_since_ = kTimeNever;
  for (const auto& [peer, since] : serving_) oldest_since_ = std::min(oldest_since_, since);
}

TimePoint UploadSlots::turn_over() const {
  if (waiting_.empty() || serving_.empty()) return kTimeNever;
  return std::max(oldest_since_ + rotation_, next_handover_);
}

void UploadSlots::handle_timeout(TimePoint now) {
  if (now < turn_over()) return;
  // One handover: a requester served longest (drawn among equals) yields.
  TimePoint oldest = kTimeNever;
  std::size_t ties = 0;
  for (const auto& [peer, since] : serving_) {
    if (since < oldest) {
      oldest = since;
      ties = 1;
    } else if (since == oldest) {
      ++ties;
    }
  }
  std::size_t pick = rng_.below(ties);
  auto yielded = serving_.begin();
  for (; yielded != serving_.end(); ++yielded) {
    if (yielded->second == oldest && pick-- == 0) break;
  }
  const PeerId peer = yielded->first;
  serving_.erase(yielded);
  actions_.push(ChokeAction{peer});
  fill(now);
  waiting_.push_back(peer);  // after the fill: it does not win its own slot back
  next_handover_ = now + rotation_ / static_cast<std::int64_t>(slots_);
}

TimePoint UploadSlots::next_timeout() const {
  return turn_over();
}

std::optional<SlotAction> UploadSlots::poll() {
  return actions_.poll();
}

}  // namespace tensorhub::swarm
