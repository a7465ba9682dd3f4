// The chain rule between two versions of a model, whatever signs them (a
// whole version's manifest, a version in parts' seal): the child has the
// parent's model, names the parent's id, and a larger number.
#pragma once

#include <cstdint>
#include <string>

#include "tensorhub/ids.hpp"
#include "tensorhub/status.hpp"

namespace tensorhub::manifest {

struct ChainLink {
  const std::string& model;
  std::uint64_t version = 0;
  const ManifestId& id;
  const ManifestId& parent;
};

// Errors: kVerifyFailed (the first rule `child` breaks, in one line).
Status verify_chain_link(const ChainLink& parent, const ChainLink& child);

}  // namespace tensorhub::manifest
