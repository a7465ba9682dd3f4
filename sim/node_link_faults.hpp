// A node's links going down for a while and coming back (a fault of the
// scenario): the network model is told, and a driver can ask until when a
// node is unreachable. A node taken down again before it came back stays
// down until the later time. Shared by the swarm and the baseline drivers.
#pragma once

#include <vector>

#include "sim/cluster_topology.hpp"
#include "sim/network_model.hpp"

namespace tensorhub::sim {

class NodeLinkFaults {
 public:
  NodeLinkFaults(const ClusterTopology& topology, NetworkModel& network)
      : topology_(topology), network_(network), down_until_(topology.node_count(), kTimeZero) {}

  // Takes the node's links down until now + length; returns that time, when
  // the driver is to call bring_up.
  TimePoint take_down(TimePoint now, std::uint32_t node, Duration length) {
    for (LinkId link : topology_.node_links(node)) network_.set_link_up(now, link, false);
    down_until_[node] = std::max(down_until_[node], now + length);
    return now + length;
  }
  // Brings the links up, unless they were taken down again meanwhile.
  void bring_up(TimePoint now, std::uint32_t node) {
    if (down_until_[node] > now) return;
    for (LinkId link : topology_.node_links(node)) network_.set_link_up(now, link, true);
  }
  TimePoint down_until(std::uint32_t node) const { return down_until_[node]; }

 private:
  const ClusterTopology& topology_;
  NetworkModel& network_;
  std::vector<TimePoint> down_until_;
};

}  // namespace tensorhub::sim
