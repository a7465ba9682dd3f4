// What a simulated run says, whichever driver ran it: the versions, the
// bytes per link class and over time, and the run's own counters.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sim/network_model.hpp"
#include "sim/timeline.hpp"
#include "sim/version_ledger.hpp"

namespace tensorhub::sim {

struct SimulationResult {
  std::vector<VersionOutcome> versions;
  std::vector<std::optional<TimePoint>> joined;  // per worker: when a spot worker joined
  std::vector<std::optional<TimePoint>> left;    // per worker: when its node crashed
  std::vector<std::uint32_t> worker_nodes;       // per worker
  std::vector<std::uint64_t> worker_received;    // per worker: payload bytes that reached it (swarm)
  std::vector<std::uint64_t> worker_wanted;      // per worker: bytes of the shards it fetches, each version (swarm)
  Timeline timeline;                             // bytes delivered per class over time
  std::array<std::uint64_t, kLinkClasses> bytes_by_class{};
  std::uint64_t events = 0;
  std::uint64_t flows = 0;
  std::uint64_t model_work = 0;
  TimePoint end;
  bool timed_out = false;  // the scenario's time limit came first
  bool stalled = false;    // nothing left to happen, and the workload unfinished
  std::size_t workers = 0, trainer_ranks = 0;
  std::uint64_t discarded_piece_bytes = 0;
  std::uint64_t requests_timed_out = 0;
  std::uint64_t gossip_datagrams = 0;  // gossip membership: datagrams the cores sent
  // Peer actions the driver does not carry out, by kind (the swarm driver's
  // copies that never come, and what only applications and operators read).
  std::map<std::string, std::uint64_t> actions_ignored;

  // What every driver reports at the end of its run: how it ended, the
  // ledger's versions and joins, the timeline, the network model's totals.
  static SimulationResult of_run(const RunEnd& run, bool finished, const VersionLedger& ledger, const Timeline& timeline,
                                 const NetworkModel& network, std::vector<std::uint32_t> worker_nodes) {
    SimulationResult r;
    r.end = run.at;
    r.timed_out = run.hit_limit;
    r.stalled = !finished && !run.hit_limit;
    r.versions = ledger.outcomes();
    r.joined = ledger.joined();
    r.left = ledger.left();
    r.timeline = timeline;
    r.worker_nodes = std::move(worker_nodes);
    r.workers = r.worker_nodes.size();
    for (std::size_t c = 0; c < kLinkClasses; ++c) r.bytes_by_class[c] = network.bytes_carried(static_cast<LinkClass>(c));
    r.model_work = network.work();
    return r;
  }
};

}  // namespace tensorhub::sim
