// One version as this peer holds it: its manifest, the memory it is served
// from or fetched into, its state, and the pins that keep that memory in use
// while pieces are being sent from it.
//
// Shared between the peer's I/O thread (which changes it) and application
// threads (which read it through handles and wait on it): every field below
// `mutex` is guarded by it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/anonymous_memory.hpp"
#include "core/time.hpp"
#include "tensorhub/manifest.hpp"
#include "tensorhub/peer.hpp"
#include "transport/piece_source.hpp"

namespace tensorhub::peer {

enum class VersionState { kManifest, kFetching, kComplete, kFailed, kReleasing, kReleased };

struct LocalVersion : transport::PieceSource {
  std::string model;
  std::uint64_t number = 0;
  ManifestId id;

  mutable std::mutex mutex;
  std::condition_variable changed;
  VersionState state = VersionState::kManifest;
  Status result;
  std::optional<Manifest> manifest;
  std::span<const std::byte> memory;   // what is served (published, or fetched so far)
  std::span<std::byte> destination;    // a fetch writes here
  core::AnonymousMemory owned;         // when the peer allocated the destination
  FetchProgressInfo progress;
  TimePoint started;
  double fetch_seconds = 0;          // from start to verified, once complete
  std::uint64_t started_unix_ms = 0;   // wall clock: fetch started, or published
  std::uint64_t complete_unix_ms = 0;  // wall clock: every shard verified (for cross-host timing)
  std::uint64_t bytes_served = 0;    // payload sent to other peers
  std::uint32_t bad_shards = 0;      // shards received that failed verification
  bool published = false;

  // I/O-thread only: pieces being sent from `memory`, and what to do when
  // the last one is gone after a release.
  int pins = 0;
  std::function<void()> on_unpinned;

  // A piece sent from `memory` (pinned when queued) has left or was dropped.
  void on_piece_sent(std::uint32_t length, bool sent) override {
    if (sent) {  // counted once sent: a piece cancelled while queued never left
      std::lock_guard lock(mutex);
      bytes_served += length;
    }
    if (--pins == 0 && on_unpinned) {
      auto unpinned = std::move(on_unpinned);
      on_unpinned = nullptr;
      unpinned();
    }
  }
};

}  // namespace tensorhub::peer
