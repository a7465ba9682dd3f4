#include "transport/version_watch.hpp"

namespace tensorhub::peer {

void VersionWatch::refresh(const LocalVersion& version) {
  {
    std::lock_guard lock(mutex_);
    if (snapshot_.state == VersionState::kReleased) return;
    snapshot_.state = version.state;
    snapshot_.result = version.result;
    snapshot_.progress = version.progress;
  }
  changed_.notify_all();
}

void VersionWatch::mark_released() {
  {
    std::lock_guard lock(mutex_);
    snapshot_.state = VersionState::kReleased;
  }
  changed_.notify_all();
}

VersionWatch::Snapshot VersionWatch::snapshot() const {
  std::lock_guard lock(mutex_);
  return snapshot_;
}

VersionWatch::Snapshot VersionWatch::wait_finished(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, timeout, [&] { return snapshot_.finished(); });
  return snapshot_;
}

VersionWatch::Snapshot VersionWatch::wait_verified_above(std::uint32_t shards, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, timeout,
                    [&] { return snapshot_.finished() || snapshot_.progress.shards_verified > shards; });
  return snapshot_;
}

}  // namespace tensorhub::peer
