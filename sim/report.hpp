// What a simulation run says: its JSON summary, its one-line summary, and
// the lower bound the scenario's links allow.
#pragma once

#include <string>

#include "sim/cluster_topology.hpp"
#include "sim/scenario.hpp"
#include "sim/swarm_simulation.hpp"

namespace tensorhub::sim {

// The fastest any scheme could bring the whole version to every rollout
// worker: the version must leave the trainer nodes' NICs, enter every rollout
// node's NICs (and rack, and datacenter across the WAN) at least once, be
// hashed by every worker, and cross the longest path's latency.
double lower_bound_seconds(const Scenario& scenario, const ClusterTopology& topology);

struct RunInfo {  // not reproducible: left out of the JSON with --reproducible
  double wall_seconds = 0;
  std::uint64_t peak_rss_bytes = 0;
};

// The JSON summary (times in seconds from each version's publication).
std::string report_json(const Scenario& scenario, const SimulationResult& result, double lower_bound,
                        const RunInfo* run);
// CSV: one row per (version, worker): when published, joined, done.
std::string completions_csv(const Scenario& scenario, const SimulationResult& result);
// CSV: one row per timeline bucket: bytes delivered per link class, the NIC
// and WAN rates over the bucket, and the cumulative bytes through NICs.
std::string timeline_csv(const SimulationResult& result);

std::string report_line(const Scenario& scenario, const SimulationResult& result, double lower_bound,
                        const RunInfo& run);

}  // namespace tensorhub::sim
