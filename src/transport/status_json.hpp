// The member table as JSON, for `tensorhub status`:
// {"self": {...}, "members": [{"id", "addr", "state", "incarnation", "dc",
//  "rack", "host", "heads": {model: {"version", "id"}}, "holds": [...]}],
//  "stats": {...}}
#pragma once

#include <nlohmann/json.hpp>

#include "gossip/gossip_core.hpp"

namespace tensorhub::transport {

nlohmann::ordered_json gossip_status_json(const gossip::GossipCore& core, TimePoint now);

}  // namespace tensorhub::transport
