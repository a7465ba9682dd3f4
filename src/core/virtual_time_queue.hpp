// The discrete-event loop under the in-process test networks and the
// simulator: events carry a virtual time, run in time order (ties in the
// order they were scheduled, so a run is a function of its seed), and
// advance the clock as they run.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <queue>
#include <vector>

#include "core/time.hpp"

namespace tensorhub::core {

// REQUIRES: Event has a TimePoint member `at`.
template <typename Event>
class VirtualTimeQueue {
 public:
  explicit VirtualTimeQueue(TimePoint start = TimePoint{}) : now_(start) {}
  TimePoint now() const { return now_; }
  void schedule(Event e) { queue_.push(Entry{next_order_++, std::move(e)}); }
  // From inside a dispatch: puts the event being dispatched back (at its new
  // `at`), keeping its place among events of the same time.
  void requeue(Event e) { queue_.push(Entry{current_order_, std::move(e)}); }

  bool empty() const { return queue_.empty(); }
  // REQUIRES: !empty().
  TimePoint next_at() const { return queue_.top().event.at; }
  // Moves the clock forward to `t` without running anything (for a driver
  // whose other source of events, such as a network model, comes first).
  // REQUIRES: empty() || t <= next_at().
  void advance_to(TimePoint t) { now_ = std::max(now_, t); }
  // Runs the earliest event. REQUIRES: !empty().
  template <typename Dispatch>
  void run_next(Dispatch&& dispatch) {
    Event e = queue_.top().event;
    current_order_ = queue_.top().order;
    queue_.pop();
    now_ = e.at;
    dispatch(e);
  }

  // Runs every event due by `t` through `dispatch(Event&)`, then sets the
  // clock to `t`.
  template <typename Dispatch>
  void run_until(TimePoint t, Dispatch&& dispatch) {
    while (!queue_.empty() && queue_.top().event.at <= t) run_next(dispatch);
    now_ = std::max(now_, t);
  }

  // Runs until `done()` holds (checked every `step`) or `limit` passes.
  template <typename Dispatch>
  bool run_until(const std::function<bool()>& done, Duration limit, Duration step, Dispatch&& dispatch) {
    const TimePoint end = now_ + limit;
    while (now_ < end) {
      if (done()) return true;
      run_until(std::min(end, now_ + step), dispatch);
    }
    return done();
  }

 private:
  struct Entry {
    std::uint64_t order;
    Event event;
  };
  struct Later {
    bool operator()(const Entry& a, const Entry& b) const {
      return a.event.at != b.event.at ? a.event.at > b.event.at : a.order > b.order;
    }
  };
  std::priority_queue<Entry, std::vector<Entry>, Later> queue_;
  std::uint64_t next_order_ = 0;
  std::uint64_t current_order_ = 0;
  TimePoint now_;
};

}  // namespace tensorhub::core
