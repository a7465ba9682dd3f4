// A core's timers in one table. Each timer is named by an enumerator of
// `Timer` (an enum class whose last enumerator is kCount) and stands at one
// time or not at all (kTimeNever). A core fills the table from its state, in
// one function that names every timer it has; its next_timeout is the
// table's next(), and its handle_timeout runs the rule of each timer due.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>

#include "core/time.hpp"

namespace tensorhub::core {

template <typename Timer>
class TimerTable {
 public:
  static constexpr std::size_t kSize = static_cast<std::size_t>(Timer::kCount);

  TimerTable() { at_.fill(kTimeNever); }

  void set(Timer timer, TimePoint at) { at_[index(timer)] = at; }
  // Keeps the earlier of the time the timer stands at and `at` (a timer over
  // many items: the first of them).
  void earliest(Timer timer, TimePoint at) { at_[index(timer)] = std::min(at_[index(timer)], at); }
  TimePoint at(Timer timer) const { return at_[index(timer)]; }
  // Whether the timer stands and its time has come.
  bool due(Timer timer, TimePoint now) const { return at(timer) != kTimeNever && now >= at(timer); }
  // The earliest time any timer stands at, or kTimeNever.
  TimePoint next() const { return *std::min_element(at_.begin(), at_.end()); }

 private:
  static constexpr std::size_t index(Timer timer) { return static_cast<std::size_t>(timer); }

  std::array<TimePoint, kSize> at_{};
};

}  // namespace tensorhub::core
