// The swarm keeps a model's head alive (DESIGN.md, "Publishing, retention,
// mutability"): a peer that is among the last R complete holders of the head
// defers a release until another holder completes, a newer head replaces it,
// or the deferral has lasted `max_deferral`. Versions that are not the head
// are released at once. The bound keeps a swarm that nobody fetches from
// from holding a caller's memory forever.
//
// Sans-I/O: the caller supplies what gossip says and the time.
#pragma once

#include <cstddef>
#include <map>
#include <vector>

#include "core/time.hpp"
#include "tensorhub/ids.hpp"

namespace tensorhub::swarm {

struct RetentionPolicy {
  std::size_t head_replicas = 1;  // R: complete copies of a head the swarm keeps (0: never defer)
  Duration max_deferral = std::chrono::seconds(60);
};

// What gossip currently says about one version this peer holds.
struct ReleaseFacts {
  bool is_head = false;       // the newest verified version of its model
  bool complete = false;      // this peer holds all of it (only then does it count as a holder)
  std::size_t other_holders = 0;  // live peers other than this one that hold all of it
};

class DeferredReleases {
 public:
  explicit DeferredReleases(RetentionPolicy policy) : policy_(policy) {}

  // Whether releasing a version with these facts must wait.
  bool must_defer(const ReleaseFacts& facts) const {
    return facts.is_head && facts.complete && facts.other_holders < policy_.head_replicas;
  }

  // Records a deferred release requested at `now` (a second request keeps
  // the first deadline).
  void defer(const ManifestId& id, TimePoint now) { deadlines_.try_emplace(id, now + policy_.max_deferral); }
  bool deferred(const ManifestId& id) const { return deadlines_.count(id) != 0; }
  void forget(const ManifestId& id) { deadlines_.erase(id); }
  bool empty() const { return deadlines_.empty(); }

  // The deferred releases that may go ahead now; they are forgotten.
  // `facts_of` is called once per deferred version.
  template <typename FactsOf>
  std::vector<ManifestId> due(TimePoint now, FactsOf&& facts_of) {
    std::vector<ManifestId> ready;
    for (auto it = deadlines_.begin(); it != deadlines_.end();) {
      if (now >= it->second || !must_defer(facts_of(it->first))) {
        ready.push_back(it->first);
        it = deadlines_.erase(it);
      } else {
        ++it;
      }
    }
    return ready;
  }

  // When the earliest deferral runs out (kTimeNever when none is pending).
  TimePoint next_deadline() const {
    TimePoint earliest = kTimeNever;
    for (const auto& [id, deadline] : deadlines_) earliest = std::min(earliest, deadline);
    return earliest;
  }

 private:
  RetentionPolicy policy_;
  std::map<ManifestId, TimePoint> deadlines_;
};

}  // namespace tensorhub::swarm
