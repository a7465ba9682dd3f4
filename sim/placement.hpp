// Where a scenario's peers run: trainer rank r on trainer node r mod
// trainer_nodes (so every trainer node's NICs serve), and one rollout worker
// per GPU of every other node (only in rollout_datacenters when given; never
// on the storage node). Shared by the swarm, the baselines and the bound.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/cluster_topology.hpp"
#include "sim/scenario.hpp"

namespace tensorhub::sim {

struct Placement {
  std::vector<std::uint32_t> trainer_nodes;  // per rank
  std::vector<std::uint32_t> worker_nodes;   // per worker, in node order
};

Placement place_peers(const Scenario& scenario, const ClusterTopology& topology);

}  // namespace tensorhub::sim
