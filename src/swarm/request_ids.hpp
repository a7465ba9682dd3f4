// Where a peer's request ids come from: each is unique among the requests
// in flight on any connection of this peer, over every version it fetches
// (a data transport cancels a queued piece by its id). 0 names no request.
#pragma once

#include <cstdint>

namespace tensorhub::swarm {

class RequestIds {
 public:
  explicit RequestIds(std::uint32_t last = 0) : last_(last) {}
  std::uint32_t next() {
    if (++last_ == 0) ++last_;  // 0 names no request
    return last_;
  }

 private:
  std::uint32_t last_;
};

}  // namespace tensorhub::swarm
