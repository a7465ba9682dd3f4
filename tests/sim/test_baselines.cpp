// The baselines against their closed forms on a flat cluster: 1 trainer node
// and N worker nodes behind one switch, links of rate B, a version of size S.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "sim/baseline_simulation.hpp"
#include "sim/fluid_network.hpp"
#include "sim/report.hpp"

using namespace tensorhub;
using namespace tensorhub::sim;

namespace {

Scenario flat(const std::string& extra = "") {
  auto s = parse_scenario(R"({"topology": {"datacenters": [{"nodes_per_rack": 5}], "nic_gbps": 8, "hop_latency_us": 1},
                              "model": {"size": "1000MB", "shard_size": "8MiB", "flow_size": "1MB"})" + extra + "}");
  REQUIRE_MESSAGE(s.is_ok(), s.status().to_string());
  return *s;
}

SimulationResult run(Scenario s, Scheme scheme) {
  s.scheme = scheme;
  FluidNetwork network;
  BaselineSimulation simulation(s, network);
  return simulation.run();
}

double last_of(const VersionOutcome& v) {
  double last = 0;
  for (const auto& t : v.worker_done) {
    REQUIRE(t.has_value());
    last = std::max(last, to_seconds(*t - v.published));
  }
  return last;
}

constexpr double kSeconds = 1e9 / 1e9;  // S / B: 1000 MB at 8 Gbit/s (1 GB/s)

}  // namespace

TEST_CASE("baselines: direct pull shares the trainer's uplink: N x S / B") {
  const SimulationResult r = run(flat(), Scheme::kDirectPull);
  REQUIRE(r.workers == 4);
  CHECK(last_of(r.versions[0]) == doctest::Approx(4 * kSeconds).epsilon(0.001));
  CHECK(r.versions[0].publisher_bytes == 4 * 1'000'000'000ull);
  CHECK(to_seconds(*r.versions[0].trainer_free - r.versions[0].published) == doctest::Approx(4 * kSeconds).epsilon(0.001));
}

TEST_CASE("baselines: storage writes once, then every worker reads through the storage's links") {
  // Storage at 16 Gbit/s: the write takes S / B (the trainer's NIC), then 4
  // readers share 2 GB/s: 4 S / 2 GB/s = 2 s more.
  const SimulationResult r = run(flat(R"(, "storage_gbps": 16)"), Scheme::kStorage);
  const VersionOutcome& v = r.versions[0];
  CHECK(to_seconds(*v.trainer_free - v.published) == doctest::Approx(kSeconds).epsilon(0.001));
  CHECK(last_of(v) == doctest::Approx(3 * kSeconds).epsilon(0.001));
  CHECK(v.publisher_bytes == 1'000'000'000ull);
}

TEST_CASE("baselines: a pipelined ring takes S / B plus a chunk per hop") {
  const SimulationResult r = run(flat(R"(, "broadcast": {"chunk": "1MB"})"), Scheme::kBroadcast);
  // 4 hops; the last worker gets the last chunk (N - 1) chunk times after the first worker.
  CHECK(last_of(r.versions[0]) == doctest::Approx(kSeconds + 3 * 0.001).epsilon(0.001));
  CHECK(r.versions[0].publisher_bytes == 1'000'000'000ull);
}

TEST_CASE("baselines: a crash breaks the ring: stop the world, rebuild, broadcast again to the rest") {
  const SimulationResult r =
      run(flat(R"(, "broadcast": {"chunk": "1MB", "rebuild_s": 5}, "faults": [{"at_s": 0.5, "crash_node": 4}])"),
          Scheme::kBroadcast);
  const VersionOutcome& v = r.versions[0];
  CHECK_FALSE(v.worker_done[3].has_value());  // node 4's worker
  double last = 0;
  for (std::size_t w = 0; w < 3; ++w) {
    REQUIRE(v.worker_done[w].has_value());
    last = std::max(last, to_seconds(*v.worker_done[w] - v.published));
  }
  // 0.5 s lost, 5 s to rebuild, then the whole version again over 3 hops.
  CHECK(last == doctest::Approx(0.5 + 5 + kSeconds + 2 * 0.001).epsilon(0.001));
  CHECK_FALSE(r.stalled);
}

TEST_CASE("elastic: joiners get the head, the swarm serves them at once, the ring stops the world to grow") {
  auto parsed = parse_scenario(R"({"topology": {"datacenters": [{"nodes_per_rack": 7}], "nic_gbps": 8, "hop_latency_us": 1},
      "model": {"size": "1000MB", "shard_size": "8MiB", "flow_size": "1MB"}, "hash_gbps": 1000,
      "workload": {"kind": "elastic", "spot_nodes": 2, "joins": [{"at_s": 3, "nodes": 2}]},
      "broadcast": {"chunk": "1MB", "rebuild_s": 5}})");
  REQUIRE_MESSAGE(parsed.is_ok(), parsed.status().to_string());
  const Scenario s = *parsed;
  // 6 workers; workers 4 and 5 (nodes 5, 6) join at 3 s, after the version is everywhere else.
  Scenario swarm = s;
  FluidNetwork network;
  SwarmSimulation simulation(swarm, network);
  const SimulationResult r = simulation.run();
  CHECK_FALSE(r.stalled);
  REQUIRE(r.joined[4].has_value());
  CHECK(to_seconds(*r.joined[4]) == doctest::Approx(3.0));
  for (std::size_t w : {4u, 5u}) {
    REQUIRE(r.versions[0].worker_done[w].has_value());
    // About S / B from the four holders, well under the ring's rebuild.
    CHECK(to_seconds(*r.versions[0].worker_done[w]) - 3.0 < 1.5 * kSeconds);
  }
  const SimulationResult ring = run(s, Scheme::kBroadcast);
  for (std::size_t w : {4u, 5u}) {
    REQUIRE(ring.versions[0].worker_done[w].has_value());
    // The rebuild (5 s), then the whole version down a 2-hop ring.
    CHECK(to_seconds(*ring.versions[0].worker_done[w]) - 3.0 == doctest::Approx(5 + kSeconds + 0.001).epsilon(0.002));
  }
}

TEST_CASE("baselines: a slow node in a ring with fixed buffers holds back every worker, before it too") {
  // Node 2 (the second worker in ring order) at a quarter of the rate. The
  // first worker may run at most two chunks ahead of what it has passed on
  // to the slow one, so every worker takes S / (B/4).
  const SimulationResult r = run(flat(R"(, "broadcast": {"chunk": "1MB"}, "faults": [{"at_s": 0, "slow_node": 2, "rate_fraction": 0.25}])"),
                                 Scheme::kBroadcast);
  const VersionOutcome& v = r.versions[0];
  for (std::size_t w = 0; w < 4; ++w) {
    CHECK(to_seconds(*v.worker_done[w] - v.published) == doctest::Approx(4 * kSeconds).epsilon(0.01));
  }
}

TEST_CASE("baselines: with buffers without bound a slow node holds back the workers after it, not those before") {
  const SimulationResult r =
      run(flat(R"(, "broadcast": {"chunk": "1MB", "buffer_chunks": 0}, "faults": [{"at_s": 0, "slow_node": 2, "rate_fraction": 0.25}])"),
          Scheme::kBroadcast);
  const VersionOutcome& v = r.versions[0];
  CHECK(to_seconds(*v.worker_done[0] - v.published) == doctest::Approx(kSeconds).epsilon(0.002));
  for (std::size_t w = 1; w < 4; ++w) {
    CHECK(to_seconds(*v.worker_done[w] - v.published) == doctest::Approx(4 * kSeconds).epsilon(0.01));
  }
}

TEST_CASE("baselines: broadcast from rank 0 sends the whole version through that one GPU's NICs") {
  // 2 GPUs and 4 NICs of 2 Gbit/s a node (1 GB/s pooled; a GPU's own two
  // NICs give 0.5 GB/s), 2 trainer ranks on the trainer node.
  const std::string cluster = R"({"topology": {"datacenters": [{"nodes_per_rack": 5}], "gpus_per_node": 2,
      "nics_per_node": 4, "nic_gbps": 2, "hop_latency_us": 1},
      "model": {"size": "1000MB", "shard_size": "8MiB", "flow_size": "1MB", "trainer_ranks": 2},
      "broadcast": {"chunk": "1MB", "root": ")";
  auto every_rank = parse_scenario(cluster + R"(every_rank"}})");
  auto rank0 = parse_scenario(cluster + R"(rank0"}})");
  REQUIRE_MESSAGE(every_rank.is_ok(), every_rank.status().to_string());
  REQUIRE_MESSAGE(rank0.is_ok(), rank0.status().to_string());
  // Every rank: two rings of 500 MB share the trainer node's 1 GB/s.
  const SimulationResult both = run(*every_rank, Scheme::kBroadcast);
  REQUIRE(both.workers == 8);
  CHECK(last_of(both.versions[0]) == doctest::Approx(kSeconds).epsilon(0.02));
  // Rank 0: one ring of 1000 MB out of a GPU's 0.5 GB/s.
  const SimulationResult one = run(*rank0, Scheme::kBroadcast);
  CHECK(last_of(one.versions[0]) == doctest::Approx(2 * kSeconds).epsilon(0.02));
  CHECK(one.versions[0].publisher_bytes == 1'000'000'000ull);
  CHECK(to_seconds(*one.versions[0].trainer_free - one.versions[0].published) == doctest::Approx(last_of(one.versions[0])));
}

TEST_CASE("baselines: a ring's fixed buffers over a long link carry buffer x chunk per round trip") {
  // 5 ms a link, so 10 ms each way between two nodes. A chunk (1 MB) leaves
  // in 1 ms, arrives 10 ms later, is passed on in 1 ms, and the credit for
  // its slot is back 10 ms after that: a hop carries `buffer` chunks per
  // 22 ms, however fast its links.
  auto ring_over_long_links = [](int buffer_chunks) {
    auto s = parse_scenario(R"({"topology": {"datacenters": [{"nodes_per_rack": 5}], "nic_gbps": 8, "hop_latency_us": 5000},
        "model": {"size": "1000MB", "shard_size": "8MiB", "flow_size": "1MB"},
        "broadcast": {"chunk": "1MB", "buffer_chunks": )" + std::to_string(buffer_chunks) + "}}");
    REQUIRE_MESSAGE(s.is_ok(), s.status().to_string());
    return last_of(run(*s, Scheme::kBroadcast).versions[0]);
  };
  CHECK(ring_over_long_links(2) == doctest::Approx(1000 / 2 * 0.022).epsilon(0.02));
  CHECK(ring_over_long_links(8) == doctest::Approx(1000 / 8 * 0.022).epsilon(0.02));
  // Without bound the ring streams at the links' rate: S / B, then a chunk
  // and a latency per hop.
  CHECK(ring_over_long_links(0) == doctest::Approx(kSeconds + 3 * 0.001 + 4 * 0.010).epsilon(0.002));
}

TEST_CASE("baselines: a pulled part arrives one path latency after it leaves") {
  auto s = parse_scenario(R"({"topology": {"datacenters": [{"nodes_per_rack": 5}], "nic_gbps": 8, "hop_latency_us": 5000},
      "model": {"size": "1000MB", "shard_size": "8MiB", "flow_size": "1MB"}})");
  REQUIRE_MESSAGE(s.is_ok(), s.status().to_string());
  CHECK(last_of(run(*s, Scheme::kDirectPull).versions[0]) == doctest::Approx(4 * kSeconds + 0.010).epsilon(0.0005));
}

namespace {

nlohmann::json report_of(const Scenario& s, const SimulationResult& r) {
  return nlohmann::json::parse(report_json(s, r, 1.0, nullptr));
}

}  // namespace

TEST_CASE("report: a worker waiting when the next version comes waits for that one, no second counts twice") {
  // Direct pull takes 4 s a version; the second version comes at 1 s and
  // replaces the first, so every worker waits from 0 to 5 s: 4 x 5 GPU-s.
  Scenario s = flat(R"(, "workload": {"versions": 2, "interval_s": 1})");
  s.scheme = Scheme::kDirectPull;
  const SimulationResult r = run(s, Scheme::kDirectPull);
  const nlohmann::json j = report_of(s, r);
  REQUIRE(j["versions"].size() == 2);
  CHECK(j["versions"][0]["completed"] == 0);
  CHECK(j["versions"][0]["rollout_gpu_stall_s"].get<double>() == doctest::Approx(4 * 1.0).epsilon(0.001));
  CHECK(j["versions"][1]["last_s"].get<double>() == doctest::Approx(4 * kSeconds).epsilon(0.001));
  CHECK(j["gpu_stall_s"]["rollout"].get<double>() == doctest::Approx(4 * 5.0).epsilon(0.001));
  // The trainer serves the first version until the second comes, then the second.
  CHECK(j["gpu_stall_s"]["trainer"].get<double>() == doctest::Approx(5.0).epsilon(0.001));
}

TEST_CASE("report: a worker whose node crashes while it waits stops waiting and is not expected to complete") {
  // Node 4's worker crashes at 0.5 s, when each worker holds 125 MB; the
  // other three take the remaining 3 x 875 MB at 1 GB/s: done at 3.125 s.
  Scenario s = flat(R"(, "faults": [{"at_s": 0.5, "crash_node": 4}])");
  s.scheme = Scheme::kDirectPull;
  const SimulationResult r = run(s, Scheme::kDirectPull);
  const nlohmann::json v = report_of(s, r)["versions"][0];
  CHECK(v["workers"] == 3);
  CHECK(v["completed"] == 3);
  CHECK(v["crashed_waiting"] == 1);
  CHECK(v["last_s"].get<double>() == doctest::Approx(3.125).epsilon(0.001));
  CHECK(v["rollout_gpu_stall_s"].get<double>() == doctest::Approx(3 * 3.125 + 0.5).epsilon(0.001));
}
