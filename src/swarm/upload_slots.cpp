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
    const PeerId next = waiting_.front();
    waiting_.pop_front();
    serving_.emplace(next, now);
    actions_.push(UnchokeAction{next});
  }
}

void UploadSlots::handle_timeout(TimePoint now) {
  // Rotate: whoever has been served longest yields to the next in line.
  while (!waiting_.empty()) {
    auto oldest = std::min_element(serving_.begin(), serving_.end(),
                                   [](const auto& a, const auto& b) { return a.second < b.second; });
    if (oldest == serving_.end() || now - oldest->second < rotation_) break;
    const PeerId yielded = oldest->first;
    serving_.erase(oldest);
    actions_.push(ChokeAction{yielded});
    waiting_.push_back(yielded);
    fill(now);
  }
}

TimePoint UploadSlots::next_timeout() const {
  if (waiting_.empty() || serving_.empty()) return kTimeNever;
  TimePoint oldest = kTimeNever;
  for (const auto& [peer, since] : serving_) oldest = std::min(oldest, since);
  return oldest + rotation_;
}

std::optional<SlotAction> UploadSlots::poll() {
  return actions_.poll();
}

}  // namespace tensorhub::swarm
