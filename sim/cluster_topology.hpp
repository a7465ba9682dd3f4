// The cluster a scenario describes, as links of a network model.
//
// Each node has one up and one down link (its NICs pooled: K x rate) and an
// NVLink domain for traffic between its own GPUs (one link: the NVSwitch's
// aggregate rate). Each rack has a ToR
// uplink and downlink of (nodes x node rate) / oversubscription. The spine
// inside a datacenter is taken as non-blocking. Each ordered pair of
// datacenters has a WAN link. A path is the links a flow crosses:
//   same node:       nvlink
//   same rack:       node up, node down
//   same datacenter: node up, ToR up, ToR down, node down
//   across the WAN:  node up, ToR up, WAN, ToR down, node down
// Latency is hop_latency per link crossed, plus the WAN's latency. The
// storage baseline's service is one more node, in a rack of its own in the
// first datacenter, whose NIC and ToR links run at the storage's rate.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sim/network_model.hpp"
#include "sim/scenario.hpp"

namespace tensorhub::sim {

struct NodeInfo {
  bool storage = false;  // the storage baseline's service, not a machine with GPUs
  std::uint32_t datacenter = 0;
  std::uint32_t rack = 0;  // global rack number
  std::string dc_name, rack_name, host_name;
};

struct Path {
  std::vector<LinkId> links;
  Duration latency{0};
};

class ClusterTopology {
 public:
  // Adds the cluster's links to `network`.
  ClusterTopology(const TopologySpec& spec, NetworkModel& network);

  // Nodes, the storage node (when the scenario has one) last.
  std::uint32_t node_count() const { return static_cast<std::uint32_t>(nodes_.size()); }
  std::optional<std::uint32_t> storage_node() const { return storage_; }
  const NodeInfo& node(std::uint32_t n) const { return nodes_[n]; }
  Path path(std::uint32_t from, std::uint32_t to) const;
  // path(from, to).latency without building the path (every message's delay).
  Duration latency(std::uint32_t from, std::uint32_t to) const;
  // The links to take down when a node's network fails.
  std::vector<LinkId> node_links(std::uint32_t n) const { return {node_up_[n], node_down_[n]}; }
  double node_rate() const { return node_rate_; }
  LinkClass link_class(LinkId link) const { return link_classes_[link.value]; }

 private:
  LinkId add_link(NetworkModel& network, double bytes_per_second, LinkClass link_class);

  const TopologySpec& spec_;
  std::vector<LinkClass> link_classes_;  // by LinkId
  double node_rate_ = 0;
  std::vector<NodeInfo> nodes_;
  std::vector<LinkId> node_up_, node_down_, nvlink_;
  std::vector<LinkId> tor_up_, tor_down_;
  std::vector<std::vector<LinkId>> wan_;  // [from dc][to dc]
  std::optional<std::uint32_t> storage_;
};

}  // namespace tensorhub::sim
