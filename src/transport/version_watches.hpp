// What the application's threads see of the versions an engine holds, and
// who waits for their memory to come back: a VersionWatch per version from
// its creation until its memory is its owner's again, refreshed after every
// turn of the core that changed something, and the callbacks of releases
// waiting for that moment. Only the I/O thread calls these.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "peer/local_version.hpp"
#include "transport/version_watch.hpp"

namespace tensorhub::peer {

class VersionWatches {
 public:
  // A watch for a version the core just created.
  void add(const std::shared_ptr<LocalVersion>& version);
  // Its watch; null once its memory went back (or for one never added).
  std::shared_ptr<VersionWatch> of(const LocalVersion& version) const;
  // Every watch copies its version's state.
  void refresh_all();
  // `done` runs once the version's memory is its owner's again.
  void on_released(const LocalVersion& version, std::function<void()> done);
  // The memory of `version` is its owner's again: its watch takes the last
  // state and says so, and is dropped; the waiting callbacks run.
  void released(const LocalVersion& version);

 private:
  struct Watched {
    std::shared_ptr<LocalVersion> version;
    std::shared_ptr<VersionWatch> watch;
  };
  std::map<const LocalVersion*, Watched> watches_;
  std::map<const LocalVersion*, std::vector<std::function<void()>>> waiters_;
};

}  // namespace tensorhub::peer
