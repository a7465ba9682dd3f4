// The cluster's paths: which links a flow crosses, and the delay a message takes.
#include <doctest/doctest.h>

#include <algorithm>

#include "sim/cluster_topology.hpp"
#include "sim/fluid_network.hpp"

using namespace tensorhub;
using namespace tensorhub::sim;
using namespace std::chrono_literals;

TEST_CASE("cluster topology: a message's latency is its path's, for every pair of nodes") {
  TopologySpec spec;
  spec.datacenters = {{"dc1", 2, 2}, {"dc2", 2, 2}};
  spec.hop_latency = 3us;
  spec.wan_latency = 7ms;
  FluidNetwork network;
  ClusterTopology topology(spec, network);
  REQUIRE(topology.node_count() == 8);
  for (std::uint32_t a = 0; a < topology.node_count(); ++a) {
    for (std::uint32_t b = 0; b < topology.node_count(); ++b) {
      const Path path = topology.path(a, b);
      CHECK(topology.latency(a, b) == path.latency);
      const bool wan = topology.node(a).datacenter != topology.node(b).datacenter;
      CHECK(path.latency == spec.hop_latency * static_cast<std::int64_t>(path.links.size()) + (wan ? spec.wan_latency : 0us));
    }
  }
  CHECK(topology.latency(0, 0) == 3us);      // NVLink
  CHECK(topology.latency(0, 1) == 6us);      // one rack
  CHECK(topology.latency(0, 2) == 12us);     // through the ToRs
  CHECK(topology.latency(0, 4) == 7015us);   // and the WAN
}

TEST_CASE("cluster topology: with a NIC per GPU, each GPU is an endpoint with links of its own") {
  TopologySpec spec;
  spec.datacenters = {{"dc1", 2, 2}};
  spec.gpus_per_node = 4;
  spec.nics_per_node = 8;
  spec.nic_bytes_per_second = 100;
  spec.nic_per_gpu = true;
  FluidNetwork network;
  ClusterTopology topology(spec, network);
  REQUIRE(topology.node_count() == 4);
  REQUIRE(topology.endpoint_count() == 16);
  CHECK(topology.node_rate() == 800);
  CHECK(topology.endpoint_rate() == 200);  // two NICs a GPU
  CHECK(topology.endpoint(1, 2) == 6);
  CHECK(topology.node_of(6) == 1);
  // GPUs of one node meet over NVLink; across nodes each GPU sends on its
  // own uplink and receives on its own downlink.
  CHECK(topology.path(topology.endpoint(0, 0), topology.endpoint(0, 3)).links.size() == 1);
  const Path a = topology.path(topology.endpoint(0, 0), topology.endpoint(1, 0));
  const Path b = topology.path(topology.endpoint(0, 1), topology.endpoint(1, 1));
  REQUIRE(a.links.size() == 2);
  REQUIRE(b.links.size() == 2);
  CHECK(a.links[0] != b.links[0]);
  CHECK(a.links[1] != b.links[1]);
  CHECK(topology.link_class(a.links[0]) == LinkClass::kNicUp);
  CHECK(topology.link_class(a.links[1]) == LinkClass::kNicDown);
  // Across racks, the ToRs are the GPUs' too; latency is the nodes'.
  const Path far = topology.path(topology.endpoint(0, 1), topology.endpoint(3, 2));
  REQUIRE(far.links.size() == 4);
  CHECK(far.links[0] == b.links[0]);
  CHECK(far.latency == topology.latency(0, 3));
  // A node's network failing takes down every GPU's NIC.
  const std::vector<LinkId> links = topology.node_links(2);
  CHECK(links.size() == 8);
  CHECK(std::count(links.begin(), links.end(), topology.path(topology.endpoint(2, 3), topology.endpoint(0, 0)).links[0]) == 1);
}

TEST_CASE("cluster topology: pooled NICs make the node the endpoint") {
  TopologySpec spec;
  spec.datacenters = {{"dc1", 1, 3}};
  spec.gpus_per_node = 8;
  spec.nics_per_node = 8;
  FluidNetwork network;
  ClusterTopology topology(spec, network);
  CHECK(topology.endpoint_count() == 3);
  CHECK(topology.endpoint(2, 5) == 2);
  CHECK(topology.endpoint_rate() == topology.node_rate());
  CHECK(topology.node_links(1).size() == 2);
}
