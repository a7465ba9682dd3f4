// Overlapping slowdowns of one resource of a node (its NIC links, its
// hasher), from the scenario's faults: each runs the resource at a
// fraction of its full rate until a time, and the lowest fraction among
// those not yet over applies. Shared by NodeLinkFaults and the swarm
// driver's hashing.
#pragma once

#include <algorithm>
#include <vector>

#include "core/time.hpp"

namespace tensorhub::sim {

class Slowdowns {
 public:
  // REQUIRES: 0 <= fraction <= 1; until is kTimeNever for good.
  void add(TimePoint until, double fraction) { conditions_.push_back(Condition{until, fraction}); }
  // The lowest fraction among the slowdowns not over by `now` (1: none).
  double fraction(TimePoint now) const {
    double lowest = 1;
    for (const Condition& c : conditions_) {
      if (now < c.until) lowest = std::min(lowest, c.fraction);
    }
    return lowest;
  }
  // Drops the slowdowns over by `now`, so the list stays as long as the
  // faults in force.
  void forget_over(TimePoint now) {
    std::erase_if(conditions_, [now](const Condition& c) { return c.until <= now; });
  }

 private:
  struct Condition {
    TimePoint until;
    double fraction = 1;
  };
  std::vector<Condition> conditions_;
};

}  // namespace tensorhub::sim
