// The cluster's paths: which links a flow crosses, and the delay a message takes.
#include <doctest/doctest.h>

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
