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
// Events wait in a pool and the heap orders small keys that name them: a
// simulator's events carry a message, too large to sift through the heap or
// copy out to run.
template <typename Event>
class VirtualTimeQueue {
 public:
  explicit VirtualTimeQueue(TimePoint start = TimePoint{}) : now_(start) {}
  TimePoint now() const { return now_; }
  void schedule(Event e) { push(next_order_++, std::move(e)); }
  // From inside a dispatch: puts the event being dispatched back (at its new
  // `at`), keeping its place among events of the same time.
  void requeue(Event e) { push(current_order_, std::move(e)); }

  bool empty() const { return queue_.empty(); }
  // REQUIRES: !empty().
  TimePoint next_at() const { return queue_.top().at; }
  // Moves the clock forward to `t` without running anything (for a driver
  // whose other source of events, such as a network model, comes first).
  // REQUIRES: empty() || t <= next_at().
  void advance_to(TimePoint t) { now_ = std::max(now_, t); }
  // Runs the earliest event. REQUIRES: !empty().
  template <typename Dispatch>
  void run_next(Dispatch&& dispatch) {
    const Key next = queue_.top();
    queue_.pop();
    Event e = std::move(pool_[next.slot]);
    free_slots_.push_back(next.slot);
    current_order_ = next.order;
    now_ = e.at;
    dispatch(e);
  }

  // Runs every event due by `t` through `dispatch(Event&)`, then sets the
  // clock to `t`.
  template <typename Dispatch>
  void run_until(TimePoint t, Dispatch&& dispatch) {
    while (!queue_.empty() && queue_.top().at <= t) run_next(dispatch);
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
  struct Key {
    TimePoint at;
    std::uint64_t order;
    std::size_t slot;  // in pool_
  };
  struct Later {
    bool operator()(const Key& a, const Key& b) const { return a.at != b.at ? a.at > b.at : a.order > b.order; }
  };
  void push(std::uint64_t order, Event e) {
    std::size_t slot;
    if (free_slots_.empty()) {
      slot = pool_.size();
      pool_.push_back(std::move(e));
    } else {
      slot = free_slots_.back();
      free_slots_.pop_back();
      pool_[slot] = std::move(e);
    }
    queue_.push(Key{pool_[slot].at, order, slot});
  }

  std::priority_queue<Key, std::vector<Key>, Later> queue_;
  // Invariant: a slot is named by one key in queue_ or listed in free_slots_.
  std::vector<Event> pool_;
  std::vector<std::size_t> free_slots_;
  std::uint64_t next_order_ = 0;
  std::uint64_t current_order_ = 0;
  TimePoint now_;
};

}  // namespace tensorhub::core
