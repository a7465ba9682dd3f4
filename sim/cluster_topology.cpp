#include "sim/cluster_topology.hpp"

#include <stdexcept>

namespace tensorhub::sim {

ClusterTopology::ClusterTopology(const TopologySpec& spec, NetworkModel& network) : spec_(spec) {
  node_rate_ = spec.nic_bytes_per_second * spec.nics_per_node;
  endpoints_per_node_ = spec.nic_per_gpu ? spec.gpus_per_node : 1;
  endpoint_rate_ = node_rate_ / endpoints_per_node_;
  const std::size_t dcs = spec.datacenters.size();
  wan_.assign(dcs, std::vector<LinkId>(dcs));
  for (std::size_t a = 0; a < dcs; ++a) {
    for (std::size_t b = 0; b < dcs; ++b) {
      if (a != b) wan_[a][b] = add_link(network, spec.wan_bytes_per_second, LinkClass::kWan);
    }
  }
  std::uint32_t rack_number = 0;
  for (std::uint32_t d = 0; d < dcs; ++d) {
    const auto& dc = spec.datacenters[d];
    for (std::uint32_t r = 0; r < dc.racks; ++r, ++rack_number) {
      const double tor_rate = node_rate_ * dc.nodes_per_rack / spec.tor_oversubscription;
      tor_up_.push_back(add_link(network, tor_rate, LinkClass::kTorUp));
      tor_down_.push_back(add_link(network, tor_rate, LinkClass::kTorDown));
      for (std::uint32_t n = 0; n < dc.nodes_per_rack; ++n) {
        NodeInfo info;
        info.datacenter = d;
        info.rack = rack_number;
        info.dc_name = dc.name;
        info.rack_name = dc.name + "-r" + std::to_string(r);
        info.host_name = info.rack_name + "-n" + std::to_string(n);
        nodes_.push_back(std::move(info));
        for (std::uint32_t e = 0; e < endpoints_per_node_; ++e) {
          endpoint_up_.push_back(add_link(network, endpoint_rate_, LinkClass::kNicUp));
          endpoint_down_.push_back(add_link(network, endpoint_rate_, LinkClass::kNicDown));
        }
        nvlink_.push_back(add_link(network, spec.nvlink_bytes_per_second, LinkClass::kNvlink));
      }
    }
  }
  if (spec.storage_bytes_per_second > 0) {
    if (endpoints_per_node_ != 1) throw std::logic_error("a storage node needs pooled NICs");
    const double rate = spec.storage_bytes_per_second;
    NodeInfo info;
    info.storage = true;
    info.rack = rack_number;
    info.dc_name = spec.datacenters[0].name;
    info.rack_name = info.dc_name + "-storage";
    info.host_name = info.rack_name + "-n0";
    storage_ = static_cast<std::uint32_t>(nodes_.size());
    nodes_.push_back(std::move(info));
    tor_up_.push_back(add_link(network, rate, LinkClass::kTorUp));
    tor_down_.push_back(add_link(network, rate, LinkClass::kTorDown));
    endpoint_up_.push_back(add_link(network, rate, LinkClass::kNicUp));
    endpoint_down_.push_back(add_link(network, rate, LinkClass::kNicDown));
    nvlink_.push_back(add_link(network, rate, LinkClass::kNvlink));
  }
  network.seal(endpoint_count(), [this](std::uint32_t from, std::uint32_t to) { return path(from, to).links; });
}

std::uint32_t ClusterTopology::endpoint(std::uint32_t node, std::uint32_t gpu) const {
  return endpoints_per_node_ == 1 ? node : node * endpoints_per_node_ + gpu;
}

std::uint32_t ClusterTopology::node_of(std::uint32_t endpoint) const { return endpoint / endpoints_per_node_; }

std::vector<LinkId> ClusterTopology::node_links(std::uint32_t n) const {
  std::vector<LinkId> links;
  for (std::uint32_t e = endpoint(n, 0); e < endpoint(n, 0) + endpoints_per_node_; ++e) {
    links.push_back(endpoint_up_[e]);
    links.push_back(endpoint_down_[e]);
  }
  return links;
}

LinkId ClusterTopology::add_link(NetworkModel& network, double bytes_per_second, LinkClass link_class) {
  const LinkId id = network.add_link(bytes_per_second, link_class);
  if (link_classes_.size() <= id.value) link_classes_.resize(id.value + 1);
  link_classes_[id.value] = link_class;
  return id;
}

Path ClusterTopology::path(std::uint32_t from_endpoint, std::uint32_t to_endpoint) const {
  const std::uint32_t from = node_of(from_endpoint), to = node_of(to_endpoint);
  const NodeInfo& a = nodes_[from];
  const NodeInfo& b = nodes_[to];
  const LinkId up = endpoint_up_[from_endpoint], down = endpoint_down_[to_endpoint];
  Path p;
  if (from == to) {
    p.links = {nvlink_[from]};
  } else if (a.rack == b.rack) {
    p.links = {up, down};
  } else if (a.datacenter == b.datacenter) {
    p.links = {up, tor_up_[a.rack], tor_down_[b.rack], down};
  } else {
    p.links = {up, tor_up_[a.rack], wan_[a.datacenter][b.datacenter], tor_down_[b.rack], down};
  }
  p.latency = latency(from, to);
  return p;
}

Duration ClusterTopology::latency(std::uint32_t from, std::uint32_t to) const {
  const NodeInfo& a = nodes_[from];
  const NodeInfo& b = nodes_[to];
  // Hops as path() lays the links out: NVLink; node up and down; and the
  // ToR up and down; and the WAN link.
  const std::int64_t hops = from == to ? 1 : a.rack == b.rack ? 2 : a.datacenter == b.datacenter ? 4 : 5;
  const Duration wan = a.datacenter == b.datacenter ? Duration{} : spec_.wan_latency;
  return wan + spec_.hop_latency * hops;
}

}  // namespace tensorhub::sim
