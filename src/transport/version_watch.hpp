// What the application's threads see of one version the engine holds. The
// peer core's LocalVersion is the core's alone (it changes on the I/O
// thread); the engine copies its state into this watch after every turn that
// changed something (StateChanged), and handles read the copy and wait on
// it. The engine also counts here what only it sees (bytes served, requests
// refused), and marks the version released once its memory is back with
// its owner.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "peer/local_version.hpp"
#include "tensorhub/status.hpp"
#include "tensorhub/version_info.hpp"

namespace tensorhub::peer {

class VersionWatch {
 public:
  struct Snapshot {
    VersionState state = VersionState::kFetching;
    Status result;  // why it failed, once kFailed
    FetchProgressInfo progress;

    bool finished() const { return state != VersionState::kFetching; }
  };

  explicit VersionWatch(const LocalVersion& version) { refresh(version); }
  VersionWatch(const VersionWatch&) = delete;
  VersionWatch& operator=(const VersionWatch&) = delete;

  // REQUIRES: the I/O thread. Copies the core's state and wakes waiters;
  // nothing once the version is marked released.
  void refresh(const LocalVersion& version);
  // REQUIRES: the I/O thread. The memory is its owner's again: final.
  void mark_released();

  // Any thread.
  Snapshot snapshot() const;
  // Waits until the version is no longer fetching or `timeout` passes;
  // returns the snapshot it saw last (finished() says which).
  Snapshot wait_finished(std::chrono::milliseconds timeout) const;
  // Waits until more than `shards` shards are verified, the version is no
  // longer fetching, or `timeout` passes; returns the snapshot it saw last.
  Snapshot wait_verified_above(std::uint32_t shards, std::chrono::milliseconds timeout) const;

  // Counted by the engine (any thread may read them).
  std::atomic<std::uint64_t> bytes_served{0};      // payload sent to other peers
  // Requests refused: for a block already queued to that requester, or past
  // its share of queued pieces.
  std::atomic<std::uint64_t> requests_refused{0};

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  Snapshot snapshot_;  // guarded by mutex_
};

}  // namespace tensorhub::peer
