// Checks on whole peers in virtual time (support/peer_network.hpp) that
// several test files share.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include "peer/local_version.hpp"
#include "support/peer_network.hpp"

namespace tensorhub::testing {

using peer::LocalVersion;
using peer::VersionState;

inline bool complete(const std::shared_ptr<LocalVersion>& v) {
  return v->state == VersionState::kComplete;
}

inline VersionState state_of(const std::shared_ptr<LocalVersion>& v) {
  return v->state;
}

inline bool same_bytes(const std::shared_ptr<LocalVersion>& v, const std::vector<std::byte>& image) {
  if (v->destination.size() != image.size()) return false;
  bool same = true;
  std::size_t at = 0;
  v->destination.for_each(0, image.size(), [&](std::span<std::byte> piece) {
    same = same && std::equal(piece.begin(), piece.end(), image.begin() + static_cast<std::ptrdiff_t>(at));
    at += piece.size();
  });
  return same;
}

// Peers 0..n-1 on their own hosts, joined and converged.
inline void add_peers(PeerNetwork& net, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) net.add_peer(Location{"dc", "r" + std::to_string(i % 2), "h" + std::to_string(i)});
  REQUIRE(net.run_until([&] { return net.gossip().converged(); }, std::chrono::seconds(20)));
}

inline bool knows_head(PeerNetwork& net, std::size_t peer, std::uint64_t version) {
  auto head = net.core(peer).latest("policy");
  return head && head->version == version;
}

}  // namespace tensorhub::testing
