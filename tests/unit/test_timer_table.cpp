#include <doctest/doctest.h>

#include "core/timer_table.hpp"

using namespace tensorhub;
using namespace std::chrono_literals;

namespace {
enum class Timer { kA, kB, kC, kCount };
}

TEST_CASE("timer table: a timer stands at one time or not at all, and next() is the earliest") {
  core::TimerTable<Timer> t;
  CHECK(t.next() == kTimeNever);
  CHECK_FALSE(t.due(Timer::kA, TimePoint(100s)));
  t.set(Timer::kB, TimePoint(5s));
  t.earliest(Timer::kC, TimePoint(9s));
  t.earliest(Timer::kC, TimePoint(7s));
  t.earliest(Timer::kC, TimePoint(8s));  // later: the earlier stays
  CHECK(t.at(Timer::kC) == TimePoint(7s));
  CHECK(t.next() == TimePoint(5s));
  CHECK_FALSE(t.due(Timer::kB, TimePoint(4s)));
  CHECK(t.due(Timer::kB, TimePoint(5s)));
  CHECK_FALSE(t.due(Timer::kC, TimePoint(5s)));
  t.set(Timer::kB, kTimeNever);
  CHECK(t.next() == TimePoint(7s));
  CHECK_FALSE(t.due(Timer::kB, TimePoint(100s)));
}
