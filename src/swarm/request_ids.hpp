// Where a peer's request ids come from: each is unique among the requests
// in flight on any connection of this peer, over every version it fetches
// (a data transport cancels a queued piece by its id). 0 names no request.
#pragma once

#include <cstdint>

#include "tensorhub/ids.hpp"

namespace tensorhub::swarm {

struct RequestIdTag {};
// The id a request carries on the wire; its answer (a piece, a refusal, a
// deferral) and a cancel name it. Unique among one peer's requests in
// flight; 0 names none.
using RequestId = StrongIndex<RequestIdTag>;

class RequestIds {
 public:
  explicit RequestIds(std::uint32_t last = 0) : last_(last) {}
  RequestId next() {
    if (++last_ == 0) ++last_;  // 0 names no request
    return RequestId{last_};
  }

 private:
  std::uint32_t last_;
};

}  // namespace tensorhub::swarm
