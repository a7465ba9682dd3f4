#include "sim/placement.hpp"

#include <algorithm>

namespace tensorhub::sim {

Placement place_peers(const Scenario& scenario) {
  const WorkloadSpec& w = scenario.workload;
  Placement p;
  for (std::uint32_t rank = 0; rank < scenario.model.trainer_ranks; ++rank) {
    p.trainer_nodes.push_back(rank % w.trainer_nodes);
    p.trainer_gpus.push_back(rank / w.trainer_nodes);
  }
  for (std::uint32_t node : scenario.rollout_nodes()) {
    for (std::uint32_t g = 0; g < scenario.topology.gpus_per_node; ++g) {
      p.worker_nodes.push_back(node);
      p.worker_gpus.push_back(g);
    }
  }
  const std::size_t gpus = scenario.topology.gpus_per_node;
  const std::size_t spot_workers = std::min<std::size_t>(p.worker_nodes.size(), std::size_t{w.spot_nodes} * gpus);
  p.first_spot_worker = p.worker_nodes.size() - spot_workers;
  std::size_t next = p.first_spot_worker;
  for (const auto& join : w.joins) {
    p.join_first_worker.push_back(next);
    next = std::min(p.worker_nodes.size(), next + std::size_t{join.nodes} * gpus);
  }
  p.join_first_worker.push_back(next);  // the end of the last join
  return p;
}

}  // namespace tensorhub::sim
