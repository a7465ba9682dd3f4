// The simulator end to end: the real swarm cores over the fluid model.
#include <doctest/doctest.h>

#include "sim/fluid_network.hpp"
#include "sim/report.hpp"
#include "sim/swarm_simulation.hpp"
#include "support/scenario_fixture.hpp"

using namespace tensorhub;
using namespace tensorhub::sim;
using tensorhub::testing::scenario_of;

namespace {

struct Run {
  SimulationResult result;
  double bound = 0;
  std::string json;
};

Run run(const Scenario& s) {
  FluidNetwork network;
  SwarmSimulation simulation(s, network);
  Run r;
  r.result = simulation.run();
  r.bound = lower_bound_seconds(s, simulation.topology());
  r.json = report_json(s, r.result, r.bound, nullptr);
  return r;
}

std::size_t completed(const VersionOutcome& v) {
  return static_cast<std::size_t>(std::count_if(v.worker_done.begin(), v.worker_done.end(), [](auto& t) { return t.has_value(); }));
}

}  // namespace

TEST_CASE("simulation: two hosts, one link: the version takes size / rate plus the latency") {
  const Scenario s = scenario_of(R"({
    "topology": {"datacenters": [{"nodes_per_rack": 2}], "nic_gbps": 1, "hop_latency_us": 100},
    "model": {"size": "64MiB", "shard_size": "4MiB", "flow_size": "1MiB"}})");
  const Run r = run(s);
  REQUIRE(r.result.versions.size() == 1);
  const VersionOutcome& v = r.result.versions[0];
  REQUIRE(completed(v) == 1);
  const double analytic = (64.0 * (1 << 20)) / (1e9 / 8) + 2 * 100e-6;
  CHECK(r.bound == doctest::Approx(analytic));
  const double took = to_seconds(*v.worker_done[0] - v.published);
  // The handshake and the first request add a few round trips (0.2 ms each).
  CHECK(took >= analytic);
  CHECK(took <= analytic + 0.005);
  CHECK(v.publisher_bytes == s.model.size);
}

TEST_CASE("simulation: with a NIC per GPU, one trainer rank uploads through its GPU's NIC alone") {
  // One rank on a node of two GPUs and two NICs, one rollout GPU: pooled,
  // the rank sends through both NICs; with a NIC per GPU through one, at
  // half the rate.
  auto scenario = [](bool per_gpu) {
    return scenario_of(std::string(R"({
      "topology": {"datacenters": [{"nodes_per_rack": 2}], "gpus_per_node": 2, "nics_per_node": 2,
                   "nic_gbps": 1, "hop_latency_us": 100, "nic_per_gpu": )") + (per_gpu ? "true" : "false") + R"(},
      "model": {"size": "64MiB", "shard_size": "4MiB", "flow_size": "1MiB", "trainer_ranks": 1}})");
  };
  const Run pooled = run(scenario(false));
  const Run per_gpu = run(scenario(true));
  REQUIRE(completed(pooled.result.versions[0]) == 2);
  REQUIRE(completed(per_gpu.result.versions[0]) == 2);
  auto last = [](const VersionOutcome& v) {
    TimePoint t = kTimeZero;
    for (const auto& done : v.worker_done) t = std::max(t, *done);
    return to_seconds(t - v.published);
  };
  const double one_nic = (64.0 * (1 << 20)) / (1e9 / 8);
  CHECK(last(per_gpu.result.versions[0]) >= one_nic);
  CHECK(last(per_gpu.result.versions[0]) <= 1.05 * one_nic + 0.005);
  CHECK(last(pooled.result.versions[0]) <= 0.55 * one_nic + 0.005);
  CHECK(per_gpu.json.find("\"nics\": \"per_gpu\"") != std::string::npos);
  CHECK(pooled.json.find("\"nics\": \"pooled\"") != std::string::npos);
}

TEST_CASE("simulation: two hosts, the worker's NIC slow from the start: size / (rate x fraction) plus the latency") {
  const Scenario s = scenario_of(R"({
    "topology": {"datacenters": [{"nodes_per_rack": 2}], "nic_gbps": 1, "hop_latency_us": 100},
    "model": {"size": "64MiB", "shard_size": "4MiB", "flow_size": "1MiB"},
    "faults": [{"at_s": 0, "slow_node": 1, "rate_fraction": 0.25}]})");
  const Run r = run(s);
  const VersionOutcome& v = r.result.versions[0];
  REQUIRE(completed(v) == 1);
  const double analytic = (64.0 * (1 << 20)) / (0.25e9 / 8) + 2 * 100e-6;
  const double took = to_seconds(*v.worker_done[0] - v.published);
  CHECK(took >= analytic);
  CHECK(took <= analytic + 0.005);
}

TEST_CASE("simulation: two hosts, the worker's hashing slow: the first shard's arrival plus size / (hash rate x fraction)") {
  // Hashing at 2 Gbit/s outruns the 1 Gbit/s link; at a tenth of that it is
  // the bottleneck: each shard waits for the one before it in the hasher.
  const std::string base = R"({
    "topology": {"datacenters": [{"nodes_per_rack": 2}], "nic_gbps": 1, "hop_latency_us": 100},
    "model": {"size": "64MiB", "shard_size": "4MiB", "flow_size": "1MiB"}, "hash_gbps": 2)";
  const Run healthy = run(scenario_of(base + "}"));
  const Run slowed = run(scenario_of(base + R"(, "faults": [{"at_s": 0, "slow_node": 1, "hash_fraction": 0.1}]})"));
  const VersionOutcome& h = healthy.result.versions[0];
  const VersionOutcome& v = slowed.result.versions[0];
  REQUIRE(completed(h) == 1);
  REQUIRE(completed(v) == 1);
  const double healthy_took = to_seconds(*h.worker_done[0] - h.published);
  CHECK(healthy_took <= (64.0 * (1 << 20)) / (1e9 / 8) + (4.0 * (1 << 20)) / (2e9 / 8) + 0.005);
  const double analytic = (4.0 * (1 << 20)) / (1e9 / 8) + (64.0 * (1 << 20)) / (0.2e9 / 8) + 2 * 100e-6;
  const double took = to_seconds(*v.worker_done[0] - v.published);
  CHECK(took >= analytic);
  CHECK(took <= analytic + 0.005);
}

TEST_CASE("simulation: a slow node for a while: the swarm routes around it, and it completes once it is fast again") {
  // 9 workers at 1 Gbit/s; node 5's NICs run at a twentieth from the start
  // for 3 s. The others must not wait for it: each takes at most a little
  // over the time of a run without it, while node 5 takes about the 3 s.
  const std::string base = R"({
    "topology": {"datacenters": [{"nodes_per_rack": 10}], "nic_gbps": 1},
    "model": {"size": "64MiB", "shard_size": "2MiB", "flow_size": "512KiB"})";
  const Run healthy = run(scenario_of(base + "}"));
  const Run slowed = run(scenario_of(base + R"(, "faults": [{"at_s": 0, "slow_node": 5, "rate_fraction": 0.05, "for_s": 3}]})"));
  CHECK_FALSE(slowed.result.stalled);
  const VersionOutcome& h = healthy.result.versions[0];
  const VersionOutcome& v = slowed.result.versions[0];
  REQUIRE(completed(v) == 9);
  double healthy_last = 0;
  for (const auto& t : h.worker_done) healthy_last = std::max(healthy_last, to_seconds(*t - h.published));
  for (std::size_t w = 0; w < 9; ++w) {
    const double took = to_seconds(*v.worker_done[w] - v.published);
    if (w == 4) {  // node 5 hosts worker 4: 64 MiB at 50 Mbit/s would be 10.7 s; it gets 3 s of that, then full speed
      CHECK(took > 3.0);
      CHECK(took < 3.0 + healthy_last);
    } else {
      CHECK(took <= 1.25 * healthy_last);
    }
  }
}

TEST_CASE("simulation: every worker of a 16-node, 2-rack cluster completes, and the swarm spares the trainer") {
  const Scenario s = scenario_of(R"({
    "topology": {"datacenters": [{"racks": 2, "nodes_per_rack": 8}], "gpus_per_node": 2, "nic_gbps": 10},
    "model": {"size": "256MiB", "shard_size": "8MiB", "flow_size": "1MiB"},
    "workload": {"versions": 2, "replicas": 3}})");
  const Run r = run(s);
  CHECK_FALSE(r.result.timed_out);
  CHECK_FALSE(r.result.stalled);
  CHECK(r.result.workers == 30);
  REQUIRE(r.result.versions.size() == 2);
  for (const VersionOutcome& v : r.result.versions) {
    CHECK(completed(v) == 30);
    CHECK(v.replicated.has_value());
    // 30 workers, yet the trainer sends under 2 copies (super-seeding), not 30.
    CHECK(static_cast<double>(v.publisher_bytes) < 2.0 * static_cast<double>(s.model.size));
  }
  CHECK(r.result.bytes_by_class[static_cast<std::size_t>(LinkClass::kNvlink)] > 0);  // GPU pairs share a node
}

TEST_CASE("simulation: a crashed node and a link down: the others still complete") {
  const Scenario s = scenario_of(R"({
    "topology": {"datacenters": [{"nodes_per_rack": 10}], "nic_gbps": 1},
    "model": {"size": "128MiB", "shard_size": "4MiB", "flow_size": "1MiB"},
    "failure_detection_s": 1,
    "faults": [{"at_s": 0.4, "crash_node": 3}, {"at_s": 0.5, "link_down_node": 5, "for_s": 1.5}]})");
  const Run r = run(s);
  CHECK_FALSE(r.result.stalled);
  CHECK_FALSE(r.result.timed_out);
  const VersionOutcome& v = r.result.versions[0];
  CHECK(completed(v) == 8);                      // all but the crashed node's worker
  CHECK_FALSE(v.worker_done[2].has_value());     // node 3 hosts worker 2
}

TEST_CASE("simulation: the same seed gives the same report, byte for byte, another seed may not") {
  const std::string text = R"({
    "topology": {"datacenters": [{"racks": 2, "nodes_per_rack": 6}], "nic_gbps": 1},
    "model": {"size": "64MiB", "shard_size": "2MiB", "flow_size": "512KiB"},
    "faults": [{"at_s": 0.2, "crash_node": 4}]})";
  Scenario s = scenario_of(text);
  const std::string first = run(s).json;
  CHECK(run(s).json == first);
  s.seed = 99;
  const std::string other = run(s).json;
  CHECK(other.find("\"seed\": 99") != std::string::npos);
}

TEST_CASE("simulation: the CSV series have every worker and the bytes of every completed flow") {
  const Scenario s = scenario_of(R"({
    "topology": {"datacenters": [{"racks": 2, "nodes_per_rack": 3}], "gpus_per_node": 2, "nic_gbps": 10},
    "model": {"size": "64MiB", "shard_size": "4MiB", "flow_size": "1MiB"}, "workload": {"versions": 2}})");
  const Run r = run(s);
  const std::string completions = completions_csv(s, r.result);
  CHECK(std::count(completions.begin(), completions.end(), '\n') == 1 + 2 * 10);  // header, 2 versions x 10 workers
  CHECK(completions.find(",\n") == std::string::npos);                            // every worker finished
  const std::string timeline = timeline_csv(r.result);
  // The last row's cumulative NIC bytes: every completed flow's. The model
  // also counts the partial bytes of cancelled flows (endgame), a little more.
  const std::string last_row = timeline.substr(timeline.rfind('\n', timeline.size() - 2) + 1);
  const auto cumulative = static_cast<double>(std::stoull(last_row.substr(last_row.rfind(',') + 1)));
  const auto carried = static_cast<double>(r.result.bytes_by_class[static_cast<std::size_t>(LinkClass::kNicUp)]);
  CHECK(cumulative <= carried);
  CHECK(cumulative >= 0.99 * carried);
}

TEST_CASE("simulation with full gossip: workers learn the head from gossip, fetch it, and the run is deterministic") {
  const std::string text = R"({
    "membership": "gossip",
    "topology": {"datacenters": [{"racks": 2, "nodes_per_rack": 4}], "gpus_per_node": 2, "nic_gbps": 10,
                 "hop_latency_us": 50},
    "model": {"size": "128MiB", "shard_size": "4MiB", "flow_size": "1MiB"},
    "workload": {"versions": 2}})";
  const Scenario s = scenario_of(text);
  const Run r = run(s);
  CHECK_FALSE(r.result.stalled);
  CHECK_FALSE(r.result.timed_out);
  REQUIRE(r.result.versions.size() == 2);
  for (const VersionOutcome& v : r.result.versions) CHECK(completed(v) == 14);
  CHECK(r.result.gossip_datagrams > 0);
  CHECK(r.json.find("\"membership\": \"gossip\"") != std::string::npos);
  // A worker fetches only once its gossip core reports the head, so every
  // completion above came through gossip. Since the eager head push the
  // news arrives microseconds after ideal membership's, and which run ends
  // first follows the swarm's choices, not the news; the runs still differ.
  Scenario ideal = s;
  ideal.membership = "ideal";
  CHECK(run(ideal).json != r.json);
  CHECK(run(s).json == r.json);
}

TEST_CASE("simulation with full gossip: a holder crashes mid-version and the others still complete") {
  const Scenario s = scenario_of(R"({
    "membership": "gossip",
    "topology": {"datacenters": [{"nodes_per_rack": 10}], "nic_gbps": 1},
    "model": {"size": "128MiB", "shard_size": "4MiB", "flow_size": "1MiB"},
    "faults": [{"at_s": 0.6, "crash_node": 3}]})");
  const Run r = run(s);
  CHECK_FALSE(r.result.stalled);
  CHECK_FALSE(r.result.timed_out);
  const VersionOutcome& v = r.result.versions[0];
  CHECK(completed(v) == 8);
  CHECK_FALSE(v.worker_done[2].has_value());
}

TEST_CASE("simulation with full gossip: spot workers join through a trainer and get the head") {
  const Scenario s = scenario_of(R"({
    "membership": "gossip",
    "topology": {"datacenters": [{"nodes_per_rack": 8}], "gpus_per_node": 2, "nic_gbps": 10},
    "model": {"size": "128MiB", "shard_size": "4MiB", "flow_size": "1MiB"},
    "workload": {"kind": "elastic", "versions": 2, "interval_s": 2, "spot_nodes": 2,
                 "joins": [{"at_s": 0.5, "nodes": 2}]}})");
  const Run r = run(s);
  CHECK_FALSE(r.result.stalled);
  CHECK_FALSE(r.result.timed_out);
  for (const VersionOutcome& v : r.result.versions) CHECK(completed(v) == v.worker_done.size());
  REQUIRE(r.result.versions.size() == 2);
  CHECK(r.result.versions[1].worker_done.size() == 14);  // the 4 joiners are there for the second
}

TEST_CASE("simulation: the lower bound counts a node's GPUs taking copies through NICs and NVLink together") {
  // 8 GPUs per node, NIC 10 Gbit/s, NVLink 30 Gbit/s: 8 copies of 1 GB need
  // at least 8 GB / 5 GB/s = 1.6 s, more than the NIC's own 0.8 s.
  const Scenario s = scenario_of(R"({
    "topology": {"datacenters": [{"nodes_per_rack": 3}], "gpus_per_node": 8, "nic_gbps": 10, "nvlink_gbps": 30,
                 "hop_latency_us": 0},
    "model": {"size": "1GB", "shard_size": "64MiB", "flow_size": "16MiB"},
    "hash_gbps": 1000})");
  FluidNetwork network;
  SwarmSimulation simulation(s, network);
  CHECK(lower_bound_seconds(s, simulation.topology()) == doctest::Approx(8 * 1e9 / (10e9 / 8 + 30e9 / 8)));
}

TEST_CASE("simulation: spot churn: nodes come and go, and every worker there at the end holds the last version") {
  const Scenario s = scenario_of(R"({"seed": 4,
    "topology": {"datacenters": [{"racks": 2, "nodes_per_rack": 8}], "nic_gbps": 4},
    "model": {"size": "64MiB", "shard_size": "4MiB", "flow_size": "1MiB"},
    "failure_detection_s": 0.5,
    "workload": {"kind": "elastic", "versions": 4, "interval_s": 1, "spot_nodes": 12,
                 "churn": {"joins_per_s": 1.5, "leaves_per_s": 1.5, "until_s": 3.5}}})");
  REQUIRE(s.faults.size() >= 2);
  REQUIRE(s.workload.joins.size() >= 2);
  const Run r = run(s);
  CHECK_FALSE(r.result.stalled);
  CHECK_FALSE(r.result.timed_out);
  const VersionOutcome& last = r.result.versions.back();
  REQUIRE(last.number == 4);
  for (std::size_t w = 0; w < last.worker_done.size(); ++w) {
    const bool there = r.result.joined[w] != kTimeNever && !r.result.left[w];
    CHECK_MESSAGE(last.worker_done[w].has_value() == there, "worker ", w);
  }
}
