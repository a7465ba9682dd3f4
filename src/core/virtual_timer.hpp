// One core's timer in a virtual-time driver (the test networks, the
// simulator): a core says when it next wants to run (next_timeout), the
// driver keeps one timer event in its queue for it, re-armed only when that
// time moves, and runs the core when the newest event fires. Older events
// are recognised as stale by their generation and ignored.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>

#include "core/time.hpp"

namespace tensorhub::core {

class VirtualTimer {
 public:
  // After the core changed: the generation of a timer event to schedule at
  // max(next, now), or nothing when the timer stands as it is (or the core
  // wants no timer).
  std::optional<std::uint64_t> rearm(TimePoint next, TimePoint now) {
    const TimePoint t = std::max(next, now);
    if (t == at_ || t == kTimeNever) return std::nullopt;
    at_ = t;
    return ++generation_;
  }
  // Whether a timer event of `generation` is the newest: then it fires, and
  // the timer stands no more until it is re-armed.
  bool fires(std::uint64_t generation) {
    if (generation != generation_) return false;
    at_ = kTimeNever;
    return true;
  }
  // Every event scheduled so far is stale (the core is gone).
  void cancel() {
    ++generation_;
    at_ = kTimeNever;
  }
  TimePoint at() const { return at_; }

 private:
  TimePoint at_ = kTimeNever;
  std::uint64_t generation_ = 0;
};

}  // namespace tensorhub::core
