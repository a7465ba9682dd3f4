// Token buckets per source host, in a bounded table (least recently used
// hosts are forgotten first). A flood from one host is cut to the configured
// rate without touching anyone else's budget, whatever ports it sends from.
// Time is an input.
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

  // True when the host of `address` ("host:port", or a bare host) may send
  // one more message now.
  bool allow(const std::string& address, TimePoint now);
  // The host part of "host:port" ("[v6]:port" gives "[v6]").
  static std::string host_of(const std::string& address);

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
