#include "gossip/rate_limiter.hpp"

#include <algorithm>

namespace tensorhub::gossip {

bool RateLimiter::allow(const std::string& address, TimePoint now) {
  auto it = buckets_.find(address);
  if (it == buckets_.end()) {
    if (buckets_.size() >= max_addresses_ && !lru_.empty()) {
      buckets_.erase(lru_.back());
      lru_.pop_back();
    }
    lru_.push_front(address);
    it = buckets_.emplace(address, Bucket{burst_, now, lru_.begin()}).first;
  } else {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    Bucket& b = it->second;
    const double elapsed = std::max(0.0, to_seconds(now - b.updated));
    b.tokens = std::min(burst_, b.tokens + elapsed * per_second_);
    b.updated = now;
  }
  Bucket& b = it->second;
  if (b.tokens < 1.0) return false;
  b.tokens -= 1.0;
  return true;
}

}  // namespace tensorhub::gossip
