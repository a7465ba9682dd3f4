#include "sim/report.hpp"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>

#include "core/byte_size.hpp"
#include "sim/placement.hpp"
#include "sim/slice_plan.hpp"

namespace tensorhub::sim {
namespace {

struct VersionSummary {
  std::size_t completed = 0, expected = 0;
  std::optional<double> first, median, last;
  std::optional<double> trainer_stall;
  double rollout_gpu_stall = 0;  // GPU-seconds
  std::size_t left = 0;          // workers whose node crashed while they waited for it
  // Spot workers that joined while this version was the newest: from their
  // join to holding it (the elastic workload's weight update).
  std::size_t joiners = 0;
  std::optional<double> joiner_median, joiner_last;
};

// `until`: when the next version was published (or the run ended). A worker
// counts for this version if it was there before then, and is expected to
// complete it unless its node crashed first. Its wait for this version runs
// from the later of the publication and its join to the earliest of its
// completion, its crash and `until`: from then on it waits for the next
// version, which counts that wait, so no second of it counts twice.
VersionSummary summarize(const VersionOutcome& v, TimePoint until, const std::vector<std::optional<TimePoint>>& joined,
                         const std::vector<std::optional<TimePoint>>& left) {
  VersionSummary s;
  std::vector<double> done, joiner_waits;
  for (std::size_t w = 0; w < v.worker_done.size(); ++w) {
    const TimePoint arrived = w < joined.size() && joined[w] ? *joined[w] : kTimeZero;
    const TimePoint departed = w < left.size() && left[w] ? *left[w] : kTimeNever;
    const auto& t = v.worker_done[w];
    if (!t && (arrived >= until || departed <= v.published)) continue;  // not there while this version was the newest
    const TimePoint start = std::max(v.published, arrived);
    const TimePoint waited_until = std::min({t.value_or(kTimeNever), departed, until});
    if (waited_until > start) s.rollout_gpu_stall += to_seconds(waited_until - start);
    if (!t && departed < until) {
      ++s.left;  // crashed waiting: expected no more
      continue;
    }
    if (arrived > v.published) ++s.joiners;
    ++s.expected;
    if (t) {
      done.push_back(to_seconds(*t - v.published));
      if (arrived > v.published) joiner_waits.push_back(to_seconds(*t - start));
    }
  }
  s.completed = done.size();
  std::sort(done.begin(), done.end());
  if (!done.empty()) {
    s.first = done.front();
    s.median = done[(done.size() - 1) / 2];
  }
  if (!done.empty() && done.size() == s.expected) s.last = done.back();
  std::sort(joiner_waits.begin(), joiner_waits.end());
  if (!joiner_waits.empty()) {
    s.joiner_median = joiner_waits[(joiner_waits.size() - 1) / 2];
    if (joiner_waits.size() == s.joiners) s.joiner_last = joiner_waits.back();
  }
  if (v.trainer_free) {
    s.trainer_stall = to_seconds(*v.trainer_free - v.published);
  } else if (v.replicated) {
    s.trainer_stall = to_seconds(*v.replicated - v.published);
  }
  return s;
}

// Bytes per rollout GPU against its slice, when the GPUs form instances.
struct SliceFigures {
  double slice_bytes = 0;
  double wanted_x = 0;           // the most a GPU fetches, over its slice
  double received_max_x = 0;     // payload that reached a GPU, over its slice, every version
  double received_mean_x = 0;
};

SliceFigures slice_figures(const Scenario& scenario, const SimulationResult& result) {
  SliceFigures f;
  f.slice_bytes = SlicePlan(scenario).slice_bytes();
  const double versions = static_cast<double>(result.versions.size());
  double received_sum = 0;
  for (std::size_t w = 0; w < result.worker_received.size(); ++w) {
    const double received = static_cast<double>(result.worker_received[w]) / (versions * f.slice_bytes);
    f.received_max_x = std::max(f.received_max_x, received);
    received_sum += received;
    f.wanted_x = std::max(f.wanted_x, static_cast<double>(result.worker_wanted[w]) / f.slice_bytes);
  }
  if (!result.worker_received.empty()) f.received_mean_x = received_sum / static_cast<double>(result.worker_received.size());
  return f;
}

nlohmann::ordered_json optional_number(const std::optional<double>& v) {
  return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
}

}  // namespace

double lower_bound_seconds(const Scenario& scenario, const ClusterTopology& topology) {
  const double size = static_cast<double>(scenario.model.size);
  const WorkloadSpec& w = scenario.workload;
  const InferenceSpec& inference = scenario.inference;
  const std::uint32_t trainer_nodes = std::min(w.trainer_nodes, scenario.model.trainer_ranks);
  // Every byte leaves the trainer nodes once at least.
  double bound = size / (topology.node_rate() * trainer_nodes);
  // What the rollout GPUs of a set of nodes need: `distinct` bytes that must
  // come in from outside (each image's shards any of them fetches, once),
  // `total` what they take in altogether. Whole versions: the model, and a
  // model per GPU.
  std::optional<SlicePlan> plan;
  if (inference.enabled()) plan.emplace(scenario);
  const Placement placement = place_peers(scenario);
  auto needs_of = [&](auto&& in_set) {
    std::vector<std::uint32_t> slices;
    for (std::size_t worker = 0; worker < placement.worker_nodes.size(); ++worker) {
      if (in_set(placement.worker_nodes[worker])) slices.push_back(static_cast<std::uint32_t>(worker % (plan ? plan->slices() : 1)));
    }
    if (!plan) return std::pair{slices.empty() ? 0.0 : size, size * static_cast<double>(slices.size())};
    double total = 0;
    for (std::uint32_t k : slices) total += static_cast<double>(plan->fetched_bytes(k));
    return std::pair{static_cast<double>(plan->distinct_bytes(slices)), total};
  };
  // Every worker hashes what it fetches (one shard at a time).
  double most_fetched = size;
  if (plan) {
    most_fetched = 0;
    for (std::uint32_t k = 0; k < plan->slices(); ++k) most_fetched = std::max(most_fetched, static_cast<double>(plan->fetched_bytes(k)));
  }
  bound = std::max(bound, most_fetched / scenario.hash_bytes_per_second);
  // Racks and datacenters that hold rollout workers but no trainer must take
  // their distinct bytes in through their ToR downlink, and across the WAN.
  std::set<std::uint32_t> trainer_racks, trainer_dcs;
  for (std::uint32_t n = 0; n < trainer_nodes; ++n) {
    trainer_racks.insert(topology.node(n).rack);
    trainer_dcs.insert(topology.node(n).datacenter);
  }
  std::set<std::uint32_t> racks_done, dcs_done;
  Duration farthest{0};
  std::uint32_t last_node = UINT32_MAX;
  for (std::uint32_t n : placement.worker_nodes) {
    if (n == last_node) continue;  // the node's other GPUs
    last_node = n;
    // A node's GPUs take their bytes in through its NICs or from each
    // other over NVLink, and the two together carry at most their sum.
    // With a NIC per GPU the node's NICs still bound it together: a GPU's
    // bytes may come in through a node-mate's NIC and over NVLink.
    const auto [distinct, total] = needs_of([&](std::uint32_t node) { return node == n; });
    bound = std::max(bound, distinct / topology.node_rate());
    if (scenario.topology.gpus_per_node > 1) {
      bound = std::max(bound, total / (topology.node_rate() + scenario.topology.nvlink_bytes_per_second));
    }
    const NodeInfo& node = topology.node(n);
    const auto& dc = scenario.topology.datacenters[node.datacenter];
    if (!trainer_racks.count(node.rack) && racks_done.insert(node.rack).second) {
      const double rack_in = needs_of([&](std::uint32_t m) { return topology.node(m).rack == node.rack; }).first;
      bound = std::max(bound, rack_in / (topology.node_rate() * dc.nodes_per_rack / scenario.topology.tor_oversubscription));
    }
    if (!trainer_dcs.count(node.datacenter) && dcs_done.insert(node.datacenter).second) {
      const double dc_in = needs_of([&](std::uint32_t m) { return topology.node(m).datacenter == node.datacenter; }).first;
      bound = std::max(bound, dc_in / scenario.topology.wan_bytes_per_second);
    }
    farthest = std::max(farthest, topology.latency(0, n));
  }
  return bound + to_seconds(farthest);
}

std::string report_json(const Scenario& scenario, const SimulationResult& result, double lower_bound,
                        const RunInfo* run) {
  using json = nlohmann::ordered_json;
  json j;
  j["scenario"] = scenario.name;
  j["seed"] = scenario.seed;
  j["network_model"] = scenario.network == "simgrid" ? "simgrid/" + scenario.simgrid_model : scenario.network;
  j["scheme"] = scheme_name(scenario.scheme);
  if (scenario.scheme == Scheme::kSwarm) j["membership"] = scenario.membership;
  if (scenario.scheme == Scheme::kSwarm && scenario.membership == "gossip") j["gossip_datagrams"] = result.gossip_datagrams;
  j["workers"] = result.workers;
  j["trainer_ranks"] = result.trainer_ranks;
  j["nics"] = scenario.topology.nic_per_gpu ? "per_gpu" : "pooled";
  j["model"] = {{"bytes", scenario.model.size},
                {"shard_size", scenario.model.shard_size},
                {"flow_size", scenario.model.flow_size}};
  j["lower_bound_s"] = lower_bound;
  if (const InferenceSpec& inference = scenario.inference; inference.enabled()) {
    const SliceFigures f = slice_figures(scenario, result);
    json i{{"instances", inference.instances},
           {"gpus_per_instance", inference.gpus_per_instance},
           {"layout", inference.layout == InferenceSpec::Layout::kViews ? "views" : "shards"},
           {"slice_bytes", f.slice_bytes},
           {"wanted_over_slice", f.wanted_x},
           {"received_over_slice_max", f.received_max_x},
           {"received_over_slice_mean", f.received_mean_x}};
    if (inference.layout == InferenceSpec::Layout::kShards) {
      i["layers"] = inference.layers;
      i["strided_fraction"] = inference.strided_fraction;
    }
    json references = json::array();
    for (const InferenceSpec::Reference& r : inference.references) {
      references.push_back({{"system", r.system}, {"seconds", r.seconds}, {"over_bound", r.seconds / lower_bound}});
    }
    i["references"] = std::move(references);
    j["inference"] = std::move(i);
  }
  json versions = json::array();
  double rollout_stall = 0, trainer_stall = 0;
  for (std::size_t i = 0; i < result.versions.size(); ++i) {
    const VersionOutcome& v = result.versions[i];
    const TimePoint until = i + 1 < result.versions.size() ? result.versions[i + 1].published : result.end;
    const VersionSummary s = summarize(v, until, result.joined, result.left);
    rollout_stall += s.rollout_gpu_stall;
    // As a worker's, the trainer's wait for a version ends when the next is
    // published at the latest.
    const double window = to_seconds(until - v.published);
    trainer_stall += std::min(s.trainer_stall.value_or(window), window) * static_cast<double>(result.trainer_ranks);
    versions.push_back({{"version", v.number},
                        {"published_s", to_seconds(v.published)},
                        {"completed", s.completed},
                        {"workers", s.expected},
                        {"crashed_waiting", s.left},
                        {"first_s", optional_number(s.first)},
                        {"median_s", optional_number(s.median)},
                        {"last_s", optional_number(s.last)},
                        {"last_over_bound", s.last ? json(*s.last / lower_bound) : json(nullptr)},
                        {"trainer_stall_s", optional_number(s.trainer_stall)},
                        {"rollout_gpu_stall_s", s.rollout_gpu_stall},
                        {"joiners", s.joiners},
                        {"joiner_median_s", optional_number(s.joiner_median)},
                        {"joiner_last_s", optional_number(s.joiner_last)},
                        {"publisher_bytes", v.publisher_bytes},
                        {"publisher_upload_x", static_cast<double>(v.publisher_bytes) / static_cast<double>(scenario.model.size)}});
  }
  j["versions"] = std::move(versions);
  j["gpu_stall_s"] = {{"rollout", rollout_stall}, {"trainer", trainer_stall}, {"total", rollout_stall + trainer_stall}};
  j["bytes"] = {{"nvlink", result.bytes_by_class[static_cast<std::size_t>(LinkClass::kNvlink)]},
                {"nic", result.bytes_by_class[static_cast<std::size_t>(LinkClass::kNicUp)]},
                {"tor_uplink", result.bytes_by_class[static_cast<std::size_t>(LinkClass::kTorUp)]},
                {"wan", result.bytes_by_class[static_cast<std::size_t>(LinkClass::kWan)]}};
  j["discarded_piece_bytes"] = result.discarded_piece_bytes;
  j["requests_timed_out"] = result.requests_timed_out;
  if (!result.actions_ignored.empty()) j["actions_ignored"] = result.actions_ignored;
  j["events"] = result.events;
  j["flows"] = result.flows;
  j["rate_updates"] = result.model_work;
  j["simulated_s"] = to_seconds(result.end);
  j["timed_out"] = result.timed_out;
  j["stalled"] = result.stalled;
  if (run) {
    j["run"] = {{"wall_s", run->wall_seconds},
                {"peak_rss_bytes", run->peak_rss_bytes},
                {"events_per_s", run->wall_seconds > 0 ? static_cast<double>(result.events) / run->wall_seconds : 0.0},
                {"flows_per_s", run->wall_seconds > 0 ? static_cast<double>(result.flows) / run->wall_seconds : 0.0}};
  }
  return j.dump(2) + "\n";
}

std::string completions_csv(const Scenario& scenario, const SimulationResult& result) {
  std::string out = "scheme,version,worker,node,published_s,joined_s,done_s,wait_s\n";
  char row[256];
  for (const VersionOutcome& v : result.versions) {
    for (std::size_t w = 0; w < v.worker_done.size(); ++w) {
      const auto& joined = w < result.joined.size() ? result.joined[w] : std::optional<TimePoint>{};
      if (joined && *joined == kTimeNever && !v.worker_done[w]) continue;  // never joined
      const TimePoint start = std::max(v.published, joined.value_or(kTimeZero));
      std::snprintf(row, sizeof row, "%s,%u,%zu,%u,%.6f,", std::string(scheme_name(scenario.scheme)).c_str(), v.number, w,
                    w < result.worker_nodes.size() ? result.worker_nodes[w] : 0u, to_seconds(v.published));
      out += row;
      if (joined) out += std::to_string(to_seconds(*joined));
      out += ',';
      if (v.worker_done[w]) {
        std::snprintf(row, sizeof row, "%.6f,%.6f", to_seconds(*v.worker_done[w]), to_seconds(*v.worker_done[w] - start));
        out += row;
      } else {
        out += ',';
      }
      out += '\n';
    }
  }
  return out;
}

std::string timeline_csv(const SimulationResult& result) {
  std::string out = "t_s,nvlink_bytes,nic_bytes,tor_uplink_bytes,wan_bytes,nic_gbps,wan_gbps,nic_cumulative_bytes\n";
  const double width = to_seconds(result.timeline.bucket());
  std::uint64_t cumulative = 0;
  char row[256];
  const auto& buckets = result.timeline.buckets();
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    const auto& b = buckets[i];
    const std::uint64_t nic = b[static_cast<std::size_t>(LinkClass::kNicUp)];
    const std::uint64_t wan = b[static_cast<std::size_t>(LinkClass::kWan)];
    cumulative += nic;
    std::snprintf(row, sizeof row, "%.3f,%llu,%llu,%llu,%llu,%.3f,%.3f,%llu\n", static_cast<double>(i) * width,
                  static_cast<unsigned long long>(b[static_cast<std::size_t>(LinkClass::kNvlink)]),
                  static_cast<unsigned long long>(nic),
                  static_cast<unsigned long long>(b[static_cast<std::size_t>(LinkClass::kTorUp)]),
                  static_cast<unsigned long long>(wan), 8e-9 * static_cast<double>(nic) / width,
                  8e-9 * static_cast<double>(wan) / width, static_cast<unsigned long long>(cumulative));
    out += row;
  }
  return out;
}

std::string report_line(const Scenario& scenario, const SimulationResult& result, double lower_bound,
                        const RunInfo& run) {
  const std::string how = scenario.scheme == Scheme::kSwarm ? "swarm, " + scenario.membership + " membership"
                                                            : std::string(scheme_name(scenario.scheme));
  const std::string nics = scenario.topology.nic_per_gpu ? ", a NIC per GPU" : "";
  std::string line = scenario.name + " (" + how + ", " + scenario.network + nics + "): " + std::to_string(result.workers) +
                     " workers, " + core::format_byte_size(scenario.model.size) + ", bound " + std::to_string(lower_bound).substr(0, 6) + " s";
  char buffer[256];
  for (std::size_t i = 0; i < result.versions.size(); ++i) {
    const VersionOutcome& v = result.versions[i];
    const TimePoint until = i + 1 < result.versions.size() ? result.versions[i + 1].published : result.end;
    const VersionSummary s = summarize(v, until, result.joined, result.left);
    if (s.last) {
      std::snprintf(buffer, sizeof buffer, "; v%u first %.3f s, median %.3f s, last %.3f s (%.3fx), publisher sent %.2fx",
                    v.number, *s.first, *s.median, *s.last, *s.last / lower_bound,
                    static_cast<double>(v.publisher_bytes) / static_cast<double>(scenario.model.size));
    } else {
      std::snprintf(buffer, sizeof buffer, "; v%u: %zu of %zu workers complete", v.number, s.completed, s.expected);
    }
    line += buffer;
    if (s.left > 0) {
      std::snprintf(buffer, sizeof buffer, " (%zu crashed waiting)", s.left);
      line += buffer;
    }
    if (s.joiner_last) {
      std::snprintf(buffer, sizeof buffer, " (%zu joiners: median %.3f s, last %.3f s after joining)", s.joiners,
                    *s.joiner_median, *s.joiner_last);
      line += buffer;
    }
  }
  if (const InferenceSpec& inference = scenario.inference; inference.enabled()) {
    const SliceFigures f = slice_figures(scenario, result);
    std::snprintf(buffer, sizeof buffer, "; %u instances x %u GPUs (%s), received %.3fx a slice at most (%.3fx mean)",
                  inference.instances, inference.gpus_per_instance,
                  inference.layout == InferenceSpec::Layout::kViews ? "views" : "shards", f.received_max_x,
                  f.received_mean_x);
    line += buffer;
    for (const InferenceSpec::Reference& r : inference.references) {
      std::snprintf(buffer, sizeof buffer, "; %s published %.2f s (%.3fx)", r.system.c_str(), r.seconds,
                    r.seconds / lower_bound);
      line += buffer;
    }
  }
  std::snprintf(buffer, sizeof buffer, "; %llu events, %llu flows in %.2f s wall%s",
                static_cast<unsigned long long>(result.events), static_cast<unsigned long long>(result.flows),
                run.wall_seconds, result.timed_out ? " (TIME LIMIT)" : result.stalled ? " (STALLED)" : "");
  return line + buffer;
}

}  // namespace tensorhub::sim
