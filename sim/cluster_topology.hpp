// The cluster a scenario describes, as links of a network model.
//
// Each node has one up and one down link (its NICs pooled: K x rate), or
// with nic_per_gpu one up and one down link per GPU (K / G NICs each), and
// an NVLink domain for traffic between its own GPUs (one link: the
// NVSwitch's aggregate rate). Each rack has a ToR
// uplink and downlink of (nodes x node rate) / oversubscription. The spine
// inside a datacenter is taken as non-blocking. Each ordered pair of
// datacenters has a WAN link. Flows run between endpoints: a node where its
// NICs are pooled (endpoint n is node n), a GPU where each has its own
// (endpoint n x G + g). A path is the links a flow crosses:
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
  // Where flows start and end: GPU `gpu` of node `node`, or the node when
  // its NICs are pooled. REQUIRES: node < node_count(), gpu < gpus_per_node.
  std::uint32_t endpoint(std::uint32_t node, std::uint32_t gpu) const;
  std::uint32_t endpoint_count() const { return static_cast<std::uint32_t>(endpoint_up_.size()); }
  std::uint32_t node_of(std::uint32_t endpoint) const;
  // The links a flow between two endpoints crosses, and its latency.
  Path path(std::uint32_t from_endpoint, std::uint32_t to_endpoint) const;
  // A message's delay between two nodes (path's latency, without building it).
  Duration latency(std::uint32_t from_node, std::uint32_t to_node) const;
  // The links to take down when a node's network fails: all its NICs.
  std::vector<LinkId> node_links(std::uint32_t n) const;
  // A node's NICs together, and an endpoint's.
  double node_rate() const { return node_rate_; }
  double endpoint_rate() const { return endpoint_rate_; }
  LinkClass link_class(LinkId link) const { return link_classes_[link.value]; }

 private:
  LinkId add_link(NetworkModel& network, double bytes_per_second, LinkClass link_class);

  const TopologySpec& spec_;
  std::vector<LinkClass> link_classes_;  // by LinkId
  double node_rate_ = 0;
  double endpoint_rate_ = 0;
  std::uint32_t endpoints_per_node_ = 1;
  std::vector<NodeInfo> nodes_;
  std::vector<LinkId> endpoint_up_, endpoint_down_;  // by endpoint
  std::vector<LinkId> nvlink_;                       // by node
  std::vector<LinkId> tor_up_, tor_down_;
  std::vector<std::vector<LinkId>> wan_;  // [from dc][to dc]
  std::optional<std::uint32_t> storage_;
};

}  // namespace tensorhub::sim
