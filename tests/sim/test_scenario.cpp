#include <doctest/doctest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "sim/scenario.hpp"
#include "support/mutator.hpp"

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
  // Every simulated version has a real manifest, whose shards are a power of two.
  CHECK(error_of(R"({"topology": {"datacenters": [{"nodes_per_rack": 2}]}, "model": {"size": "1GB", "shard_size": "10MB"}})") ==
        "model.shard_size must be a power of two (64KiB to 1GiB), as in a manifest");
  CHECK(error_of(R"({"topology": {"datacenters": [{"nodes_per_rack": 2}]}, "model": {"size": "1GB", "shard_size": "32KiB"}})")
            .find("model.shard_size must be between 64.0 KiB and 1.00 GiB") == 0);
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
  CHECK(error_of(R"({"topology": {"datacenters": [{"racks": 100000, "nodes_per_rack": 100000}]}, "model": {"size": 4096}})") ==
        "topology.datacenters hold 10000000000 nodes, more than 1,000,000");
  CHECK(error_of(R"({"topology": {"datacenters": [{"racks": 1000, "nodes_per_rack": 1000}], "gpus_per_node": 8},
                     "model": {"size": 4096}})") == "topology.gpus_per_node gives 8000000 GPUs, more than 1,048,576");
  CHECK(error_of(R"({"topology": {"datacenters": [{"nodes_per_rack": 2}], "gpus_per_node": 4, "nics_per_node": 2,
                                  "nic_per_gpu": true}, "model": {"size": 4096}})") ==
        "topology.nic_per_gpu needs nics_per_node (2) a multiple of gpus_per_node (4)");
  CHECK(error_of(R"({"topology": {"datacenters": [{"nodes_per_rack": 2}], "nic_per_gpu": true}, "model": {"size": 4096},
                     "scheme": "direct_pull"})") ==
        "topology.nic_per_gpu works with the swarm scheme only (the baselines' flows run node to node)");
}

TEST_CASE("scenario: churn is drawn from the seed into joins and crashes of nodes present at the time") {
  // 1 trainer node and 31 rollout nodes; the last 20 are spot nodes, absent
  // until they join. Over 20 s, about 10 join and 10 leave.
  const std::string churned = R"({"seed": 9, "topology": {"datacenters": [{"racks": 4, "nodes_per_rack": 8}]},
      "model": {"size": "1GiB"}, "faults": [{"at_s": 3, "crash_node": 2}],
      "workload": {"kind": "elastic", "spot_nodes": 20, "joins": [{"at_s": 1, "nodes": 2}],
                   "churn": {"joins_per_s": 0.5, "leaves_per_s": 0.5, "from_s": 2, "until_s": 22}}})";
  auto s = parse_scenario(churned);
  REQUIRE_MESSAGE(s.is_ok(), s.status().to_string());
  const auto& joins = s->workload.joins;
  REQUIRE(joins.size() > 3);
  CHECK(joins.size() < 1 + 25);
  CHECK(joins[0].nodes == 2);  // the listed join first: it takes the first spot nodes
  for (std::size_t j = 1; j < joins.size(); ++j) {
    CHECK(joins[j].nodes == 1);
    CHECK(joins[j].at >= TimePoint(std::chrono::seconds(2)));
    CHECK(joins[j].at < TimePoint(std::chrono::seconds(22)));
    CHECK(joins[j - 1].at <= joins[j].at);
  }
  REQUIRE(s->faults.size() > 3);
  // Replay: every crash names a rollout node present at its time (spot node
  // k, 0-based, is node 12 + k and is present once its join has come).
  const std::vector<std::uint32_t> rollout = s->rollout_nodes();
  REQUIRE(rollout.size() == 31);
  CHECK(rollout.front() == 1);
  std::map<std::uint32_t, TimePoint> arrived, crashed;
  for (std::uint32_t n = 1; n < 12; ++n) arrived[n] = kTimeZero;
  std::uint32_t next_spot = 12;
  for (const auto& join : joins) {
    for (std::uint32_t k = 0; k < join.nodes; ++k) arrived[next_spot++] = join.at;
  }
  for (const FaultSpec& f : s->faults) {
    REQUIRE(f.kind == FaultSpec::Kind::kCrashNode);
    REQUIRE(arrived.count(f.node) == 1);
    CHECK(arrived[f.node] <= f.at);
    CHECK(crashed.count(f.node) == 0);  // no node leaves twice
    crashed[f.node] = f.at;
  }
  // The same seed draws the same churn; another draws another.
  auto again = parse_scenario(churned);
  REQUIRE(again.is_ok());
  CHECK(again->faults.size() == s->faults.size());
  CHECK(again->workload.joins.size() == joins.size());
  auto other = parse_scenario(std::string(churned).replace(churned.find("\"seed\": 9"), 9, "\"seed\": 8"));
  REQUIRE(other.is_ok());
  CHECK((other->workload.joins.size() != joins.size() || other->workload.joins.back().at != joins.back().at));
}

TEST_CASE("scenario: churn's mistakes are named") {
  const std::string cluster = R"({"topology": {"datacenters": [{"racks": 1, "nodes_per_rack": 8}]}, "model": {"size": "1GiB"},
      "workload": {"kind": "elastic", "spot_nodes": 2, "churn": )";
  CHECK(error_of(cluster + R"({"joins_per_s": 1}}})") == "workload.churn.until_s is required");
  CHECK(error_of(cluster + R"({"until_s": 5}}})") == "workload.churn.joins_per_s or leaves_per_s must be above 0");
  CHECK(error_of(cluster + R"({"joins_per_s": 1, "from_s": 5, "until_s": 5}}})") == "workload.churn.until_s must be after from_s");
  CHECK(error_of(cluster + R"({"joins_per_s": 1000000, "until_s": 5}}})").find("more than 1,000,000") != std::string::npos);
  CHECK(error_of(cluster + R"({"joins_per_s": 10, "until_s": 5}}})").find("more than spot_nodes (2)") != std::string::npos);
  CHECK(error_of(R"({"topology": {"datacenters": [{"nodes_per_rack": 8}]}, "model": {"size": "1GiB"},
                     "workload": {"churn": {"leaves_per_s": 1, "until_s": 5}}})") == "workload.churn needs kind \"elastic\"");
}

namespace {

// A mutant either parses to a scenario whose sizes are bounded, whose joins
// fit its spot nodes and whose faults name its nodes, or is refused with a
// one-line reason. Returns whether it parsed.
bool parsed_or_refused(std::string_view text) {
  auto parsed = parse_scenario(text);
  if (!parsed.is_ok()) {
    CHECK(!parsed.status().message().empty());
    CHECK(parsed.status().message().find('\n') == std::string::npos);
    return false;
  }
  const std::uint32_t nodes = parsed->node_count();
  CHECK(nodes <= 1'000'000);
  CHECK(std::uint64_t{nodes} * parsed->topology.gpus_per_node <= (1u << 20));
  CHECK(parsed->rollout_nodes().size() <= nodes);
  std::uint64_t joining = 0;
  for (const auto& join : parsed->workload.joins) joining += join.nodes;
  CHECK(joining <= parsed->workload.spot_nodes);
  for (const FaultSpec& fault : parsed->faults) CHECK(fault.node < nodes);
  return true;
}

}  // namespace

TEST_CASE("mutation: scenario parser") {
  // Mutants of scenarios that use most fields: each parses to a scenario
  // whose sizes are bounded and whose nodes exist, or to a one-line error.
  const std::vector<std::string> scenarios = {
      R"({"name": "churn", "seed": 3, "topology": {"datacenters": [{"name": "dc1", "racks": 4, "nodes_per_rack": 8}],
          "gpus_per_node": 4, "nic_gbps": 100, "hop_latency_us": 10},
          "model": {"size": "8GiB", "shard_size": "64MiB", "flow_size": "4MiB"},
          "workload": {"kind": "elastic", "versions": 4, "interval_s": 4, "spot_nodes": 10,
                       "joins": [{"at_s": 1, "nodes": 2}],
                       "churn": {"joins_per_s": 0.3, "leaves_per_s": 0.3, "from_s": 0, "until_s": 16}},
          "storage_gbps": 400, "broadcast": {"chunk": "4MiB", "rebuild_s": 10, "buffer_chunks": 2},
          "faults": [{"at_s": 2, "crash_node": 3}, {"at_s": 1, "slow_node": 4, "rate_fraction": 0.5, "for_s": 2}],
          "hash_gbps": 4000})",
      R"({"name": "wan", "topology": {"datacenters": [{"name": "train", "racks": 1, "nodes_per_rack": 2},
          {"name": "rollout", "racks": 4, "nodes_per_rack": 8}], "gpus_per_node": 8, "nics_per_node": 8,
          "nic_gbps": 200, "hop_latency_us": 5, "wan_gbps": 400, "wan_latency_ms": 10},
          "model": {"size": "28GB", "shard_size": "32MiB", "flow_size": "32MiB", "trainer_ranks": 8},
          "workload": {"kind": "cross_datacenter", "versions": 2, "trainer_nodes": 2, "rollout_datacenters": ["rollout"]},
          "broadcast": {"chunk": "32MiB", "root": "rank0"}, "membership": "gossip",
          "faults": [{"at_s": 0.1, "link_down_node": 5, "for_s": 0.2}]})"};
  const std::uint64_t seed = testing::mutation_seed(0x5eed0005);
  INFO("seed " << seed << " (replay with TENSORHUB_MUTATION_SEED)");
  core::SplitMix64 rng(seed);
  constexpr int kMutants = 3000;
  int accepted = 0;
  for (int i = 0; i < kMutants; ++i) {
    const std::string& original = scenarios[static_cast<std::size_t>(i) % scenarios.size()];
    const std::vector<char> mutant = testing::mutate(std::vector<char>(original.begin(), original.end()), rng);
    accepted += parsed_or_refused(std::string_view(mutant.data(), mutant.size()));
  }
  MESSAGE(kMutants << " scenario mutants, " << accepted << " accepted");
  // Byte mutants mostly break the JSON; these keep it and put boundary
  // values, wrong types or nothing in place of one or two of its values.
  const std::vector<nlohmann::json> values = {0, -1, 1, 2, 0.5, 1e-9, 100000, 1e6, 1e9, 4294967296.0, 1e18, -1e18, 1e300,
                                              "", "x", "0GiB", "1e30GiB", "-1MiB", "rank0", true, nullptr,
                                              nlohmann::json::array(), nlohmann::json::object()};
  int value_accepted = 0;
  for (int i = 0; i < kMutants; ++i) {
    nlohmann::json j = nlohmann::json::parse(scenarios[static_cast<std::size_t>(i) % scenarios.size()]);
    std::vector<nlohmann::json*> leaves;
    std::vector<nlohmann::json*> stack = {&j};
    while (!stack.empty()) {
      nlohmann::json* node = stack.back();
      stack.pop_back();
      if (node->is_structured()) {
        for (auto& child : *node) stack.push_back(&child);
      } else {
        leaves.push_back(node);
      }
    }
    const int changes = 1 + static_cast<int>(rng.below(2));
    for (int c = 0; c < changes; ++c) *leaves[rng.below(leaves.size())] = values[rng.below(values.size())];
    value_accepted += parsed_or_refused(j.dump());
  }
  MESSAGE(kMutants << " value mutants, " << value_accepted << " accepted");
}
