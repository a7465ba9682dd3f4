// Token buckets per source address, in a bounded table (least recently used
// addresses are forgotten first). A flood from one address is cut to the
// configured rate without touching anyone else's budget. Time is an input.
#pragma once

#include <cstddef>
#include <list>
#include <string>
#include <unordered_map>

#include "core/time.hpp"

namespace tensorhub::gossip {

class RateLimiter {
 public:
  RateLimiter(double per_second, double burst, std::size_t max_addresses)
      : per_second_(per_second), burst_(burst), max_addresses_(max_addresses) {}

  // True when `address` may send one more message now.
  bool allow(const std::string& address, TimePoint now);

  std::size_t tracked() const { return buckets_.size(); }

 private:
  struct Bucket {
    double tokens;
    TimePoint updated;
    std::list<std::string>::iterator lru;
  };
  double per_second_;
  double burst_;
  std::size_t max_addresses_;
  std::unordered_map<std::string, Bucket> buckets_;
  std::list<std::string> lru_;  // front: most recently used
};

}  // namespace tensorhub::gossip
