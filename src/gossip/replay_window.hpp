// Anti-replay for one sender's datagrams (as IPsec's sliding window).
//
// A datagram carries the sender's boot id (random per process start, signed
// in its record) and a counter that grows per datagram. Accepted: the
// window's boot with a counter above the highest seen, or one of the 63 below
// it not seen yet. Rejected: a counter seen before, one too far behind, and
// any other boot. Boots have no order (a clock that steps back cannot make a
// restart look older): the caller moves the window to a new boot once the
// sender's signed record names it (restart). Network reordering within 64
// datagrams is tolerated; duplicates and replays are not.
#pragma once

#include <cstdint>

namespace tensorhub::gossip {

class ReplayWindow {
 public:
  // True when fresh; the pair is then recorded. An unused window takes the
  // boot of its first datagram.
  bool accept(std::uint64_t boot_id, std::uint64_t counter) {
    if (!used_) restart(boot_id);
    if (boot_id != boot_id_) return false;
    if (counter > highest_) {
      const std::uint64_t shift = counter - highest_;
      seen_ = shift >= 64 ? 1 : (seen_ << shift) | 1;
      highest_ = counter;
      return true;
    }
    const std::uint64_t behind = highest_ - counter;
    if (behind >= 64) return false;
    const std::uint64_t bit = std::uint64_t{1} << behind;
    if (seen_ & bit) return false;
    seen_ |= bit;
    return true;
  }

  // Follows the sender to `boot_id`, nothing of it seen yet.
  void restart(std::uint64_t boot_id) {
    used_ = true;
    boot_id_ = boot_id;
    highest_ = 0;
    seen_ = 0;
  }

  bool used() const { return used_; }
  std::uint64_t boot_id() const { return boot_id_; }

 private:
  bool used_ = false;
  std::uint64_t boot_id_ = 0;
  std::uint64_t highest_ = 0;  // counters start at 1
  std::uint64_t seen_ = 0;     // bit i: highest_ - i was seen
};

}  // namespace tensorhub::gossip
