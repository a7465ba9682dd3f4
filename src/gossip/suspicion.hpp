// Lifeguard's suspicion timeout: it starts at its maximum and shrinks, on a
// log scale, as independent peers confirm the suspicion, down to its minimum
// once `expected` confirmations arrive (Dadgar et al., "Lifeguard", 2018; as
// memberlist implements it).
#pragma once

#include <cmath>
#include <cstddef>
#include <set>

#include "core/time.hpp"
#include "tensorhub/ids.hpp"

namespace tensorhub::gossip {

class Suspicion {
 public:
  // REQUIRES: min_timeout <= max_timeout.
  Suspicion(TimePoint start, Duration min_timeout, Duration max_timeout, std::size_t expected_confirmations,
            const PeerId& first_accuser)
      : start_(start), min_(min_timeout), max_(max_timeout), expected_(expected_confirmations) {
    accusers_.insert(first_accuser);
  }

  // Counts a confirmation from an accuser not seen before; true if it is new.
  bool confirm(const PeerId& accuser) {
    if (accusers_.size() > expected_) return false;  // already at the floor
    return accusers_.insert(accuser).second;
  }

  // When the suspect is declared dead unless it refutes first.
  TimePoint deadline() const {
    const double confirmations = static_cast<double>(accusers_.size() - 1);
    if (expected_ == 0) return start_ + min_;
    const double fraction = std::log(confirmations + 1.0) / std::log(static_cast<double>(expected_) + 1.0);
    const auto span = std::chrono::duration<double, std::micro>(max_ - min_).count();
    const auto timeout = max_ - Duration(static_cast<std::int64_t>(span * std::min(1.0, fraction)));
    return start_ + std::max(min_, timeout);
  }

  std::size_t confirmations() const { return accusers_.size() - 1; }
  bool has_accuser(const PeerId& id) const { return accusers_.count(id) != 0; }
  // True once further confirmations change nothing.
  bool at_floor() const { return accusers_.size() > expected_; }


 private:
  TimePoint start_;
  Duration min_;
  Duration max_;
  std::size_t expected_;
  std::set<PeerId> accusers_;
};

}  // namespace tensorhub::gossip
