// A node's links going down, or running slow, for a while and coming back
// (faults of the scenario): the network model is told, and a driver can ask
// until when a node is unreachable. Shared by the swarm and the baseline
// drivers.
//
// Conditions overlap: a node runs at the lowest fraction of its rate among
// the conditions not yet over (0 while any says down), so a node taken down
// again before it came back stays down until the later time, and a slow node
// taken down is down, then slow again.
#pragma once

#include <algorithm>
#include <vector>

#include "sim/cluster_topology.hpp"
#include "sim/network_model.hpp"
#include "sim/slowdowns.hpp"

namespace tensorhub::sim {

class NodeLinkFaults {
 public:
  NodeLinkFaults(const ClusterTopology& topology, NetworkModel& network)
      : topology_(topology), network_(network), nodes_(topology.node_count()) {}

  // Runs the node's links at `fraction` of their rate (0: down) until
  // now + length, or for good when length is kForGood; returns when it ends
  // (kTimeNever for good), when the driver is to call restore.
  // REQUIRES: 0 <= fraction < 1.
  TimePoint degrade(TimePoint now, std::uint32_t node, double fraction, Duration length) {
    const TimePoint until = length == kForGood ? kTimeNever : now + length;
    nodes_[node].slowdowns.add(until, fraction);
    if (fraction == 0) nodes_[node].down_until = std::max(nodes_[node].down_until, until);
    apply(now, node);
    return until;
  }
  // Ends the conditions that are over by now and sets the rate the others leave.
  void restore(TimePoint now, std::uint32_t node) {
    nodes_[node].slowdowns.forget_over(now);
    apply(now, node);
  }
  // Until when the node is unreachable (a time past when it is reachable).
  TimePoint down_until(std::uint32_t node) const { return nodes_[node].down_until; }

  static constexpr Duration kForGood = Duration::max();

 private:
  struct NodeState {
    Slowdowns slowdowns;
    double applied = 1;  // the fraction the links run at now
    TimePoint down_until = kTimeZero;
  };

  void apply(TimePoint now, std::uint32_t node) {
    NodeState& state = nodes_[node];
    const double fraction = state.slowdowns.fraction(now);
    if (fraction == state.applied) return;
    state.applied = fraction;
    for (LinkId link : topology_.node_links(node)) network_.set_link_rate(now, link, fraction);
  }

  const ClusterTopology& topology_;
  NetworkModel& network_;
  std::vector<NodeState> nodes_;
};

}  // namespace tensorhub::sim
