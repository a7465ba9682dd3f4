// Model-parallel instances in the simulator: which shards each slice
// fetches, the bound, and whole runs.
#include <doctest/doctest.h>

#include <algorithm>

#include "sim/fluid_network.hpp"
#include "sim/report.hpp"
#include "sim/slice_plan.hpp"
#include "sim/swarm_simulation.hpp"
#include "support/scenario_fixture.hpp"

using namespace tensorhub;
using namespace tensorhub::sim;
using tensorhub::testing::scenario_of;

namespace {

std::string error_of(const std::string& json) {
  auto s = parse_scenario(json);
  REQUIRE_FALSE(s.is_ok());
  return s.status().message();
}

// 2 trainer nodes (one rank each) and 6 rollout nodes: 2 instances of 3.
std::string eight_hosts(const std::string& inference, const std::string& size = "96MiB") {
  return R"({"topology": {"datacenters": [{"nodes_per_rack": 8}], "nic_gbps": 1, "hop_latency_us": 50},
             "model": {"size": ")" + size + R"(", "shard_size": "1MiB", "flow_size": "256KiB", "trainer_ranks": 2},
             "workload": {"trainer_nodes": 2}, "inference": )" + inference + "}";
}

}  // namespace

TEST_CASE("slice plan: views give each slice its own images, every byte once") {
  const Scenario s = scenario_of(eight_hosts(R"({"instances": 2, "gpus_per_instance": 3})"));
  const SlicePlan plan(s);
  REQUIRE(plan.images().size() == 6);  // 2 parts x 3 views
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < plan.images().size(); ++i) {
    const auto& image = plan.images()[i];
    total += image.layout.total_size;
    for (std::uint32_t k = 0; k < 3; ++k) {
      const core::Bitfield w = plan.wanted(i, k);
      CHECK(w.size() == (image.slice == k ? image.layout.shard_count() : 0));
      if (image.slice == k) CHECK(w.all());
    }
  }
  CHECK(total == s.model.size);
  for (std::uint32_t k = 0; k < 3; ++k) CHECK(plan.fetched_bytes(k) == (32u << 20));
  const std::uint32_t all[] = {0, 1, 2, 0};
  CHECK(plan.distinct_bytes(all) == s.model.size);
}

TEST_CASE("slice plan: shards move whole, so strided layers go to every slice") {
  // 2 parts of 48 MiB, 4 layers of 12 MiB: the first quarter of each layer
  // is strided (3 MiB, every slice), the rest 3 chunks of 3 MiB, each on
  // whole shards; 1 MiB shards cut nothing else.
  const Scenario s = scenario_of(
      eight_hosts(R"({"instances": 2, "gpus_per_instance": 3, "layout": "shards", "layers": 4, "strided_fraction": 0.25})"));
  const SlicePlan plan(s);
  REQUIRE(plan.images().size() == 2);
  for (std::uint32_t k = 0; k < 3; ++k) CHECK(plan.fetched_bytes(k) == 2 * 4 * (6u << 20));
  const std::uint32_t all[] = {0, 1, 2};
  CHECK(plan.distinct_bytes(all) == s.model.size);
  // A chunk that ends mid-shard takes the whole shard, and so does the next.
  const Scenario odd = scenario_of(eight_hosts(R"({"instances": 2, "gpus_per_instance": 3, "layout": "shards"})", "100MiB"));
  const SlicePlan cut(odd);
  std::uint64_t sum = 0;
  for (std::uint32_t k = 0; k < 3; ++k) sum += cut.fetched_bytes(k);
  CHECK(sum > odd.model.size);
}

TEST_CASE("scenario: inference mistakes are named") {
  CHECK(error_of(eight_hosts(R"({"instances": 2, "gpus_per_instance": 4})")) ==
        "inference asks for 2 x 4 GPUs; the rollout nodes have 6");
  CHECK(error_of(eight_hosts(R"({"instances": 2, "gpus_per_instance": 3, "layers": 4})")) ==
        "inference.layout \"views\" moves each slice's bytes alone: layers and strided_fraction are for \"shards\"");
  CHECK(error_of(eight_hosts(R"({"instances": 2, "gpus_per_instance": 3, "layout": "rows"})")) ==
        "inference.layout 'rows' is not one of views, shards");
  CHECK(error_of(eight_hosts(R"({"gpus_per_instance": 3})")) == "inference.instances is required");
  CHECK(error_of(eight_hosts(R"({"instances": 2, "gpus_per_instance": 3, "reference": {"system": "x"}})")) ==
        "inference.reference needs both system and seconds");
}

TEST_CASE("simulation: two instances of three fetch their slices, bytes equal to the slice, near the bound") {
  const Scenario s = scenario_of(eight_hosts(R"({"instances": 2, "gpus_per_instance": 3,
                                                  "reference": {"system": "someone", "seconds": 2}})"));
  FluidNetwork network;
  SwarmSimulation simulation(s, network);
  const SimulationResult result = simulation.run();
  const double bound = lower_bound_seconds(s, simulation.topology());
  // Each trainer node uploads its 48 MiB part once at least; a slice (32
  // MiB) in is less: the trainers' uplinks bound it.
  CHECK(bound == doctest::Approx(48.0 * (1 << 20) / (1e9 / 8) + 2 * 50e-6));
  CHECK_FALSE(result.timed_out);
  CHECK_FALSE(result.stalled);
  REQUIRE(result.versions.size() == 1);
  const VersionOutcome& v = result.versions[0];
  REQUIRE(std::all_of(v.worker_done.begin(), v.worker_done.end(), [](auto& t) { return t.has_value(); }));
  TimePoint last = kTimeZero;
  for (const auto& t : v.worker_done) last = std::max(last, *t);
  CHECK(to_seconds(last - v.published) >= bound);
  CHECK(to_seconds(last - v.published) <= 1.1 * bound);
  for (std::size_t w = 0; w < result.workers; ++w) {
    CHECK(result.worker_wanted[w] == (32u << 20));
    CHECK(result.worker_received[w] >= result.worker_wanted[w]);
    CHECK(result.worker_received[w] <= 1.05 * static_cast<double>(result.worker_wanted[w]));
  }
  const std::string json = report_json(s, result, bound, nullptr);
  CHECK(json.find("\"received_over_slice_max\"") != std::string::npos);
  CHECK(json.find("\"system\": \"someone\"") != std::string::npos);
  CHECK(json.find("\"over_bound\"") != std::string::npos);
}

TEST_CASE("simulation: sliced by shards, every slice takes the strided layers too") {
  const Scenario s = scenario_of(eight_hosts(
      R"({"instances": 2, "gpus_per_instance": 3, "layout": "shards", "layers": 4, "strided_fraction": 0.25})"));
  FluidNetwork network;
  SwarmSimulation simulation(s, network);
  const SimulationResult result = simulation.run();
  REQUIRE(result.versions.size() == 1);
  const VersionOutcome& v = result.versions[0];
  CHECK(std::all_of(v.worker_done.begin(), v.worker_done.end(), [](auto& t) { return t.has_value(); }));
  for (std::size_t w = 0; w < result.workers; ++w) {
    CHECK(result.worker_wanted[w] == (48u << 20));  // 1.5 slices
    CHECK(result.worker_received[w] >= result.worker_wanted[w]);
  }
}
