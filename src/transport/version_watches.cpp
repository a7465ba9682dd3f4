#include "transport/version_watches.hpp"

namespace tensorhub::peer {

void VersionWatches::add(const std::shared_ptr<LocalVersion>& version) {
  watches_.emplace(version.get(), Watched{version, std::make_shared<VersionWatch>(*version)});
}

std::shared_ptr<VersionWatch> VersionWatches::of(const LocalVersion& version) const {
  auto it = watches_.find(&version);
  return it == watches_.end() ? nullptr : it->second.watch;
}

void VersionWatches::refresh_all() {
  for (auto& [key, watched] : watches_) watched.watch->refresh(*watched.version);
}

void VersionWatches::on_released(const LocalVersion& version, std::function<void()> done) {
  waiters_[&version].push_back(std::move(done));
}

void VersionWatches::released(const LocalVersion& version) {
  if (auto it = watches_.find(&version); it != watches_.end()) {
    it->second.watch->refresh(version);  // its last state, then released
    it->second.watch->mark_released();
    watches_.erase(it);
  }
  auto waiting = waiters_.extract(&version);
  if (waiting.empty()) return;
  for (auto& done : waiting.mapped()) done();
}

}  // namespace tensorhub::peer
