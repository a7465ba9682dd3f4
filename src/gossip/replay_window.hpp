// Anti-replay for one sender's datagrams (as IPsec's sliding window).
//
// A datagram carries the sender's boot id and a counter that grows per
// datagram. Accepted: a newer boot (the sender restarted), a counter above the
// highest seen, or one of the 63 below it not seen yet. Rejected: an older
// boot, a counter seen before, or one too far behind. Network reordering
// within 64 datagrams is tolerated; duplicates and replays are not.
#pragma once

#include <cstdint>

namespace tensorhub::gossip {

class ReplayWindow {
 public:
  // True when fresh; the pair is then recorded.
  bool accept(std::uint64_t boot_id, std::uint64_t counter) {
    if (!used_ || boot_id > boot_id_) {
      used_ = true;
      boot_id_ = boot_id;
      highest_ = counter;
      seen_ = 1;
      return true;
    }
    if (boot_id < boot_id_) return false;
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

 private:
  bool used_ = false;
  std::uint64_t boot_id_ = 0;
  std::uint64_t highest_ = 0;
  std::uint64_t seen_ = 0;  // bit i: highest_ - i was seen
};

}  // namespace tensorhub::gossip
