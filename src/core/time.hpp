// Time as the sans-I/O cores see it: a point on the driver's monotonic clock.
//
// The cores never read a clock. Every input carries `now`, and they return
// the time at which they next want to run. The runtime feeds them
// std::chrono::steady_clock; tests and the simulator feed virtual time.
#pragma once

#include <chrono>
#include <cstdint>

namespace tensorhub {

// A clock with no now(): only drivers know what time it is.
struct DriverClock {
  using rep = std::int64_t;
  using period = std::micro;
  using duration = std::chrono::microseconds;
  using time_point = std::chrono::time_point<DriverClock>;
  static constexpr bool is_steady = true;
};

using Duration = std::chrono::microseconds;
using TimePoint = DriverClock::time_point;

inline constexpr TimePoint kTimeZero{};
inline constexpr TimePoint kTimeNever{Duration{INT64_MAX}};

inline double to_seconds(Duration d) { return std::chrono::duration<double>(d).count(); }
inline double to_seconds(TimePoint t) { return to_seconds(t.time_since_epoch()); }

}  // namespace tensorhub
