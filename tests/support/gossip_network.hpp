// The in-process gossip network lives with the simulator, which runs it in
// its full-gossip mode; tests and benchmarks use the same one.
#pragma once

#include "sim/datagram_forger.hpp"
#include "sim/gossip_network.hpp"

namespace tensorhub::testing {
using sim::DatagramForger;
using sim::GossipNetwork;
using sim::NetworkConditions;
}  // namespace tensorhub::testing
