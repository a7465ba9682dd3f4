// Ids and times for tests of one swarm object (a table, a neighbourhood, a
// set of rules) that need distinct peers but no keys.
#pragma once

#include <cstdint>

#include "core/time.hpp"
#include "tensorhub/ids.hpp"

namespace tensorhub::testing {

// A peer id whose first byte is `tag` (ids order by it).
inline PeerId peer_tagged(std::uint8_t tag) {
  PeerId id;
  id.bytes[0] = tag;
  return id;
}

// A version id whose first byte is `tag`.
inline ManifestId version_tagged(std::uint8_t tag) {
  ManifestId id;
  id.bytes[0] = tag;
  return id;
}

// A start time that is not the epoch (a zero time means "never" to some fields).
inline const TimePoint kStart = TimePoint{} + std::chrono::seconds(1);

}  // namespace tensorhub::testing
