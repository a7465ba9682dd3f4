// tensorhub-sim: runs a scenario (sim/scenarios/*.json) through the swarm's
// real cores over a network model and reports when every worker had each
// version.
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "sim/baseline_simulation.hpp"
#include "sim/fluid_network.hpp"
#include "sim/report.hpp"
#include "sim/simgrid_network.hpp"
#include "sim/swarm_simulation.hpp"

using namespace tensorhub;
using namespace tensorhub::sim;

int main(int argc, char** argv) {
  CLI::App app("tensorhub-sim: what-if runs of the swarm at cluster scale, on the real scheduler");
  std::string scenario_path, json_path;
  std::optional<std::uint64_t> seed;
  bool reproducible = false, quiet = false;
  app.add_option("scenario", scenario_path, "Scenario file (JSON; see sim/scenario.hpp)")->required();
  app.add_option("--json", json_path, "Write the JSON summary here ('-': standard output)");
  app.add_option("--seed", seed, "Override the scenario's seed");
  std::string network_name, scheme_text, membership;
  app.add_option("--network", network_name, "Override the scenario's network model: fluid or simgrid");
  app.add_option("--scheme", scheme_text, "Override the scenario's scheme: swarm, direct_pull, storage or broadcast");
  app.add_option("--membership", membership, "Override the scenario's membership: ideal or gossip")
      ->check(CLI::IsMember({"ideal", "gossip"}));
  app.add_flag("--reproducible", reproducible, "Leave wall time and memory out of the JSON (same seed, same bytes)");
  app.add_flag("--quiet", quiet, "No progress line");
  std::string csv_prefix;
  app.add_option("--csv", csv_prefix, "Write PREFIX-completions.csv and PREFIX-timeline.csv (sim/plot renders them)");
  CLI11_PARSE(app, argc, argv);

  std::ifstream in(scenario_path);
  if (!in) {
    std::fprintf(stderr, "tensorhub-sim: cannot read %s\n", scenario_path.c_str());
    return 2;
  }
  std::stringstream text;
  text << in.rdbuf();
  auto scenario = parse_scenario(text.str());
  if (!scenario) {
    std::fprintf(stderr, "tensorhub-sim: %s: %s\n", scenario_path.c_str(), scenario.status().message().c_str());
    return 2;
  }
  if (seed) scenario->seed = *seed;
  if (!network_name.empty()) scenario->network = network_name;
  if (!membership.empty()) scenario->membership = membership;
  if (!scheme_text.empty()) {
    auto scheme = parse_scheme(scheme_text);
    if (!scheme) {
      std::fprintf(stderr, "tensorhub-sim: --scheme: %s\n", scheme.status().message().c_str());
      return 2;
    }
    scenario->scheme = *scheme;
  }
  if (scenario->scheme == Scheme::kStorage && scenario->topology.storage_bytes_per_second <= 0) {
    std::fprintf(stderr, "tensorhub-sim: the storage scheme needs storage_gbps in the scenario\n");
    return 2;
  }
  std::unique_ptr<NetworkModel> network;
  if (scenario->network == "fluid") {
    network = std::make_unique<FluidNetwork>();
  } else if (scenario->network == "simgrid" && simgrid_available()) {
    network = std::make_unique<SimgridNetwork>(scenario->simgrid_model);
  } else if (scenario->network == "simgrid") {
    std::fprintf(stderr, "tensorhub-sim: this build has no SimGrid (install libsimgrid-dev and reconfigure)\n");
    return 2;
  } else {
    std::fprintf(stderr, "tensorhub-sim: unknown network model '%s' (fluid or simgrid)\n", scenario->network.c_str());
    return 2;
  }
  const bool show_progress = !quiet && isatty(STDERR_FILENO);
  const auto start = std::chrono::steady_clock::now();
  auto show = [&](const auto& s) {
    if (!show_progress) return;
    std::fprintf(stderr, "\r[%8.3f s simulated] v%u: %zu/%zu workers done, %llu events, %.0f s wall   ",
                 to_seconds(s.now()), s.latest_version(), s.workers_done_with_latest(), s.workers(),
                 static_cast<unsigned long long>(s.events_processed()),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  };
  SimulationResult result;
  double bound = 0;
  if (scenario->scheme == Scheme::kSwarm) {
    SwarmSimulation simulation(*scenario, *network);
    bound = lower_bound_seconds(*scenario, simulation.topology());
    result = simulation.run(show);
  } else {
    BaselineSimulation simulation(*scenario, *network);
    bound = lower_bound_seconds(*scenario, simulation.topology());
    result = simulation.run(show);
  }
  if (show_progress) std::fprintf(stderr, "\n");
  RunInfo run;
  run.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  run.peak_rss_bytes = static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;

  const std::string json = report_json(*scenario, result, bound, reproducible ? nullptr : &run);
  if (json_path == "-") {
    std::cout << json;
  } else if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << json;
    if (!out) {
      std::fprintf(stderr, "tensorhub-sim: cannot write %s\n", json_path.c_str());
      return 1;
    }
  }
  if (!csv_prefix.empty()) {
    for (const auto& [suffix, csv] : {std::pair{"-completions.csv", completions_csv(*scenario, result)},
                                       std::pair{"-timeline.csv", timeline_csv(result)}}) {
      std::ofstream out(csv_prefix + suffix);
      out << csv;
      if (!out) {
        std::fprintf(stderr, "tensorhub-sim: cannot write %s%s\n", csv_prefix.c_str(), suffix);
        return 1;
      }
    }
  }
  if (json_path != "-") std::printf("%s\n", report_line(*scenario, result, bound, run).c_str());
  return result.timed_out || result.stalled ? 1 : 0;
}
