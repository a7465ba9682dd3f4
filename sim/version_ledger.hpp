// The workload's versions as the simulator drivers see them: when each was
// published, when each worker came to hold it, and what comes next (the next
// version once every live worker holds the newest, when versions follow
// completion; the end after the last). Shared by the swarm and the baselines.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "core/time.hpp"
#include "sim/scenario.hpp"

namespace tensorhub::sim {

struct VersionOutcome {
  std::uint32_t number = 0;
  TimePoint published;
  std::vector<std::optional<TimePoint>> worker_done;  // per rollout worker; empty when it never completed
  std::optional<TimePoint> replicated;                // when `replicas` workers held it
  // When the trainer was free to go on, where a scheme says so (storage:
  // written; direct pull and broadcast: every worker has it). Unset for the
  // swarm, whose trainer goes on at `replicated`.
  std::optional<TimePoint> trainer_free;
  std::uint64_t publisher_bytes = 0;                  // sent by the trainer ranks
};

class VersionLedger {
 public:
  // Workers from `first_spot_worker` on are absent until they join.
  VersionLedger(const WorkloadSpec& workload, std::size_t workers, std::size_t first_spot_worker)
      : workload_(workload), workers_(workers), joined_(workers), left_(workers) {
    for (std::size_t w = first_spot_worker; w < workers; ++w) joined_[w] = kTimeNever;
  }

  // REQUIRES: number == latest() + 1.
  void publish(std::uint32_t number, TimePoint at);
  // Idempotent: a worker's first completion counts.
  void worker_done(std::uint32_t number, std::size_t worker, TimePoint at);
  void add_publisher_bytes(std::uint32_t number, std::uint64_t bytes);
  void trainer_free(std::uint32_t number, TimePoint at);
  // A spot worker joined (it counts from now on, and wants the newest version).
  void worker_joined(std::size_t worker, TimePoint at) { joined_[worker] = at; }
  const std::vector<std::optional<TimePoint>>& joined() const { return joined_; }
  // A worker's node crashed or was reclaimed: it waits for no version from now on.
  void worker_left(std::size_t worker, TimePoint at) { left_[worker] = at; }
  const std::vector<std::optional<TimePoint>>& left() const { return left_; }
  // Whether every live worker holds the version.
  bool all_hold(std::uint32_t number, const std::function<bool(std::size_t worker)>& alive) const;

  enum class Next { kWait, kPublishNext, kFinished };
  // After a completion, a crash or a join: whether every live worker holds
  // the newest version, and if so what follows. kPublishNext is returned
  // once per version (the caller schedules it); kFinished only after the
  // last version and once no more workers are to join.
  Next next(const std::function<bool(std::size_t worker)>& alive, bool more_to_join);

  std::uint32_t latest() const { return static_cast<std::uint32_t>(outcomes_.size()); }
  bool known(std::uint32_t number) const { return number >= 1 && number <= outcomes_.size(); }
  std::size_t done_with_latest() const;
  const std::vector<VersionOutcome>& outcomes() const { return outcomes_; }

 private:
  const WorkloadSpec& workload_;
  std::size_t workers_;
  std::vector<VersionOutcome> outcomes_;
  std::vector<std::optional<TimePoint>> joined_;  // spot workers: when they joined (kTimeNever: not yet)
  std::vector<std::optional<TimePoint>> left_;    // when a worker's node crashed
  std::uint32_t publish_announced_ = 0;  // the version whose kPublishNext was returned
};

}  // namespace tensorhub::sim
