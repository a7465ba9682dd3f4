// What a peer tells of a version: which one it is, and how far a fetch of it
// has come. Plain values, shared by the Peer API and the peer core.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tensorhub/ids.hpp"

namespace tensorhub {

// A version argument for "the newest known" (fetch(), version_info()...).
inline constexpr std::uint64_t kLatestVersion = 0;

struct VersionInfo {
  std::string model;
  std::uint64_t version = 0;  // the number; `id` is the manifest id
  ManifestId id;
  std::uint64_t bytes = 0;  // the version's total size (what a fetch destination must hold)
};

struct FetchProgressInfo {
  std::uint64_t bytes_total = 0;
  std::uint64_t bytes_verified = 0;
  std::uint32_t shards_total = 0;
  std::uint32_t shards_verified = 0;
  std::size_t sources = 0;  // peers sending to this fetch now
  // Payload bytes that came over the network for this fetch: blocks that
  // arrived twice and shards fetched again after failing verification
  // count each time; shards copied from a local version do not (a copy of
  // a version held here reports 0).
  std::uint64_t bytes_received = 0;
  double bytes_per_second = 0;
  bool done = false;  // the fetch ended (verified, failed or released)
};

}  // namespace tensorhub
