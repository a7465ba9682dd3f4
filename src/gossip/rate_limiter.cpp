#include "gossip/rate_limiter.hpp"

#include <algorithm>

namespace tensorhub::gossip {

std::string RateLimiter::host_of(const std::string& address) {
  const auto colon = address.rfind(':');
  // "[v6]:port" and "v4:port" end in a port; a bare v6 address has colons
  // but no closing bracket before the last one.
  if (colon == std::string::npos || (address.find(':') != colon && (colon == 0 || address[colon - 1] != ']'))) {
    return address;
  }
  return address.substr(0, colon);
}

bool RateLimiter::allow(const std::string& address, TimePoint now) {
  const std::string host = host_of(address);
  auto it = buckets_.find(host);
  if (it == buckets_.end()) {
    if (buckets_.size() >= max_addresses_ && !lru_.empty()) {
      buckets_.erase(lru_.back());
      lru_.pop_back();
    }
    lru_.push_front(host);
    it = buckets_.emplace(host, Bucket{burst_, now, lru_.begin()}).first;
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
