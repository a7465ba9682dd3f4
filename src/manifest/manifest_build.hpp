// Manifest building with the shard digests computed by the caller's
// function: the host's CPU hashing (build_manifest) or a memory domain's
// (peer::build_manifest_in, on a GPU for GPU memory).
#pragma once

#include <functional>
#include <string_view>

#include "core/regions.hpp"
#include "tensorhub/manifest.hpp"

namespace tensorhub {

// Computes the `algorithm` digest of bytes [offset, offset + length) of
// the image into `out`; false when they could not be read.
using ShardDigester = std::function<bool(ShardHashAlgorithm algorithm, const core::ConstRegions& image,
                                         std::uint64_t offset, std::uint64_t length, ShardDigest& out)>;

// build_manifest() with `digester` hashing each shard (on the build's
// threads). `memory` names where the image lies, for kIoError's message.
// Errors: as build_manifest().
Result<Manifest> build_manifest_digesting(const ManifestBuildOptions& options, std::span<const ConstRegion> regions,
                                          std::vector<TensorEntry> tensors, const Identity& publisher,
                                          const ShardDigester& digester, std::string_view memory);

}  // namespace tensorhub
