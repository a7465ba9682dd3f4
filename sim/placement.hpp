// Where a scenario's peers run: trainer rank r on trainer node r mod
// trainer_nodes (so every trainer node's NICs serve), on its GPU r /
// trainer_nodes there, and one rollout worker per GPU of every rollout node (Scenario::rollout_nodes: every other node,
// only in rollout_datacenters when given; never the storage node, which
// comes after them); the last spot_nodes rollout nodes are spot nodes.
// Shared by the swarm, the baselines and the bound.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/scenario.hpp"

namespace tensorhub::sim {

struct Placement {
  std::vector<std::uint32_t> trainer_nodes;  // per rank
  std::vector<std::uint32_t> trainer_gpus;   // per rank: its GPU on its node
  std::vector<std::uint32_t> worker_nodes;   // per worker, in node order
  std::vector<std::uint32_t> worker_gpus;    // per worker: its GPU on its node
  // Elastic: workers from here on sit on spot nodes, absent until they join;
  // join_first_worker[k] is the first worker of join k (joins take spot
  // nodes in order).
  std::size_t first_spot_worker = 0;
  std::vector<std::size_t> join_first_worker;
};

Placement place_peers(const Scenario& scenario);

}  // namespace tensorhub::sim
