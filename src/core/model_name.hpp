// The rule for a model's name, wherever one arrives (the API, a manifest, a
// gossip record): 1 to `max_bytes` bytes of letters, digits and . _ - /, not
// starting with / or . (so a name is safe in a path, a log line and JSON).
#pragma once

#include <cstddef>
#include <string_view>

#include "tensorhub/status.hpp"

namespace tensorhub::core {

// Returns kInvalidArgument, naming what breaks the rule.
Status validate_model_name(std::string_view name, std::size_t max_bytes);

}  // namespace tensorhub::core
