#include <doctest/doctest.h>

#include "sim/scenario.hpp"

using namespace tensorhub;
using namespace tensorhub::sim;

namespace {

std::string error_of(const std::string& json) {
  auto s = parse_scenario(json);
  REQUIRE_FALSE(s.is_ok());
  return s.status().message();
}

const char* kMinimal = R"({"topology": {"datacenters": [{"racks": 2, "nodes_per_rack": 4}]}, "model": {"size": "1GiB"}})";

}  // namespace

TEST_CASE("scenario: a minimal file takes the defaults") {
  auto s = parse_scenario(kMinimal);
  REQUIRE_MESSAGE(s.is_ok(), s.status().to_string());
  CHECK(s->node_count() == 8);
  CHECK(s->model.size == (1ull << 30));
  CHECK(s->model.shard_size == (16u << 20));
  CHECK(s->topology.nic_bytes_per_second == doctest::Approx(1e9 / 8));
  CHECK(s->topology.datacenters[0].name == "dc1");
  CHECK(s->workload.kind == "standalone");
}

TEST_CASE("scenario: every mistake is named") {
  CHECK(error_of("{").find("not valid JSON") != std::string::npos);
  CHECK(error_of(R"({"model": {"size": "1GiB"}})") == "topology is required");
  CHECK(error_of(R"({"topology": {"datacenters": []}, "model": {"size": 1}})") ==
        "topology.datacenters must be a non-empty list");
  CHECK(error_of(R"({"topology": {"datacenters": [{}], "nic_gbs": 1}, "model": {"size": 1}})") ==
        "topology.nic_gbs is not a known field");
  CHECK(error_of(R"({"topology": {"datacenters": [{}, {}]}, "model": {"size": "1 parsec"}})").find("model.size") == 0);
  CHECK(error_of(R"({"topology": {"datacenters": [{"nodes_per_rack": 2}]}, "model": {"size": 4096, "flow_size": 1024}})") ==
        "model.flow_size must be between 4.00 KiB and 2.00 GiB");
  CHECK(error_of(R"({"topology": {"datacenters": [{"nodes_per_rack": 1}]}, "model": {"size": 4096}})").find(
            "leaves no node for rollout workers") != std::string::npos);
  CHECK(error_of(R"({"topology": {"datacenters": [{"nodes_per_rack": 2}]}, "model": {"size": 4096},
                     "faults": [{"at_s": 1, "crash_node": 7}]})") == "faults names node 7 of 2");
  CHECK(error_of(R"({"topology": {"datacenters": [{"nodes_per_rack": 2}]}, "model": {"size": 4096},
                     "faults": [{"at_s": 1, "slow_node": 1}]})") ==
        "faults[0].rate_fraction or hash_fraction is required with slow_node (its NICs' or its hashing's rate over the full rate, e.g. 0.25)");
  CHECK(error_of(R"({"topology": {"datacenters": [{"nodes_per_rack": 2}]}, "model": {"size": 4096},
                     "faults": [{"at_s": 1, "slow_node": 1, "hash_fraction": 0}]})").find("faults[0].hash_fraction must be between") == 0);
  CHECK(error_of(R"({"topology": {"datacenters": [{"nodes_per_rack": 2}]}, "model": {"size": 4096},
                     "faults": [{"at_s": 1, "slow_node": 1, "rate_fraction": 1.5}]})").find("faults[0].rate_fraction must be between") == 0);
  CHECK(error_of(R"({"topology": {"datacenters": [{"nodes_per_rack": 2}]}, "model": {"size": 4096},
                     "faults": [{"at_s": 1}]})") == "faults[0] needs crash_node, link_down_node or slow_node");
  CHECK(error_of(R"({"topology": {"datacenters": [{"nodes_per_rack": 2}]}, "model": {"size": 4096},
                     "network": "ns3"})").find("network 'ns3' is not available") == 0);
  CHECK(error_of(R"({"topology": {"datacenters": [{"nodes_per_rack": 2}]}, "model": {"size": 4096},
                     "simgrid_model": "LV09"})") == "simgrid_model must be \"CM02\" or \"LV08\"");
  CHECK(error_of(R"({"topology": {"datacenters": [{"nodes_per_rack": 2}]}, "model": {"size": 4096},
                     "broadcast": {"buffer_chunks": -1}})") == "broadcast.buffer_chunks must be a whole number");
  CHECK(error_of(R"({"topology": {"datacenters": [{"nodes_per_rack": 2}]}, "model": {"size": 4096},
                     "broadcast": {"root": "rank1"}})") == "broadcast.root 'rank1' is not one of every_rank, rank0");
}
