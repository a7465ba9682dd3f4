#include "sim/scenario.hpp"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "core/byte_size.hpp"
#include "core/rng.hpp"
#include "tensorhub/manifest.hpp"

namespace tensorhub::sim {
namespace {

using nlohmann::json;

// Reading one JSON object: each field is taken by name, with a check, and
// whatever was not taken is an error (a misspelt field must not be ignored).
class Fields {
 public:
  Fields(const json& object, std::string where) : object_(object), where_(std::move(where)) {
    if (!object_.is_object()) fail("", "must be an object");
  }

  bool has(const std::string& key) const { return object_.contains(key); }

  const json& take(const std::string& key) {
    taken_.insert(key);
    return object_.at(key);
  }

  void number(const std::string& key, double& out, double min, double max) {
    if (!has(key)) return;
    const json& v = take(key);
    if (!v.is_number()) fail(key, "must be a number");
    const double d = v.get<double>();
    if (!(d >= min && d <= max)) fail(key, "must be between " + fmt(min) + " and " + fmt(max) + ", not " + fmt(d));
    out = d;
  }

  template <typename Int>
  void integer(const std::string& key, Int& out, std::uint64_t min, std::uint64_t max) {
    if (!has(key)) return;
    const json& v = take(key);
    if (!v.is_number_unsigned()) fail(key, "must be a whole number");
    const auto n = v.get<std::uint64_t>();
    if (n < min || n > max) fail(key, "must be between " + std::to_string(min) + " and " + std::to_string(max));
    out = static_cast<Int>(n);
  }

  void text(const std::string& key, std::string& out) {
    if (!has(key)) return;
    const json& v = take(key);
    if (!v.is_string()) fail(key, "must be a string");
    out = v.get<std::string>();
  }

  void boolean(const std::string& key, bool& out) {
    if (!has(key)) return;
    const json& v = take(key);
    if (!v.is_boolean()) fail(key, "must be true or false");
    out = v.get<bool>();
  }

  template <typename Int>
  void size(const std::string& key, Int& out, std::uint64_t min, std::uint64_t max) {
    if (!has(key)) return;
    const json& v = take(key);
    std::uint64_t n = 0;
    if (v.is_number_unsigned()) {
      n = v.get<std::uint64_t>();
    } else if (v.is_string()) {
      auto parsed = core::parse_byte_size(v.get<std::string>());
      if (!parsed) fail(key, parsed.status().message());
      n = *parsed;
    } else {
      fail(key, "must be a size such as \"16MiB\"");
    }
    if (n < min || n > max) {
      fail(key, "must be between " + core::format_byte_size(min) + " and " + core::format_byte_size(max));
    }
    out = static_cast<Int>(n);
  }

  void seconds(const std::string& key, Duration& out, double scale, double max) {
    double value = -1;
    number(key, value, 0, max);
    if (value >= 0) out = Duration(static_cast<std::int64_t>(std::llround(value * scale * 1e6)));
  }

  void gbps(const std::string& key, double& bytes_per_second) {
    double g = -1;
    number(key, g, 1e-6, 1e6);
    if (g > 0) bytes_per_second = g * 1e9 / 8;
  }

  void finish() const {
    for (const auto& [key, value] : object_.items()) {
      if (!taken_.count(key)) fail(key, "is not a known field");
    }
  }

  [[noreturn]] void fail(const std::string& key, const std::string& why) const {
    throw std::invalid_argument(where_ + (key.empty() ? "" : (where_.empty() ? "" : ".") + key) + " " + why);
  }

 private:
  static std::string fmt(double d) {
    std::string s = std::to_string(d);
    while (s.size() > 1 && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
  }
  const json& object_;
  std::string where_;
  std::set<std::string> taken_;
};

void read_topology(const json& j, TopologySpec& t) {
  Fields f(j, "topology");
  if (!f.has("datacenters")) f.fail("datacenters", "is required");
  const json& dcs = f.take("datacenters");
  if (!dcs.is_array() || dcs.empty()) f.fail("datacenters", "must be a non-empty list");
  std::set<std::string> names;
  for (std::size_t i = 0; i < dcs.size(); ++i) {
    Fields d(dcs[i], "topology.datacenters[" + std::to_string(i) + "]");
    TopologySpec::Datacenter dc;
    dc.name = "dc" + std::to_string(i + 1);
    d.text("name", dc.name);
    d.integer("racks", dc.racks, 1, 100000);
    d.integer("nodes_per_rack", dc.nodes_per_rack, 1, 100000);
    d.finish();
    if (!names.insert(dc.name).second) d.fail("name", "'" + dc.name + "' is used twice");
    t.datacenters.push_back(dc);
  }
  f.integer("gpus_per_node", t.gpus_per_node, 1, 64);
  f.integer("nics_per_node", t.nics_per_node, 1, 64);
  f.gbps("nic_gbps", t.nic_bytes_per_second);
  f.boolean("nic_per_gpu", t.nic_per_gpu);
  if (t.nic_per_gpu && t.nics_per_node % t.gpus_per_node != 0) {
    f.fail("nic_per_gpu", "needs nics_per_node (" + std::to_string(t.nics_per_node) + ") a multiple of gpus_per_node (" +
                              std::to_string(t.gpus_per_node) + ")");
  }
  f.gbps("nvlink_gbps", t.nvlink_bytes_per_second);
  f.number("tor_oversubscription", t.tor_oversubscription, 1, 1000);
  f.seconds("hop_latency_us", t.hop_latency, 1e-6, 1e6);
  f.gbps("wan_gbps", t.wan_bytes_per_second);
  f.seconds("wan_latency_ms", t.wan_latency, 1e-3, 1e5);
  f.finish();
  // Bounds what a run allocates per node and per GPU before any of it is
  // (the largest scenario measured has 1,288 nodes and 10,304 GPUs).
  std::uint64_t nodes = 0;
  for (const auto& dc : t.datacenters) nodes += std::uint64_t{dc.racks} * dc.nodes_per_rack;
  if (nodes > 1'000'000) f.fail("datacenters", "hold " + std::to_string(nodes) + " nodes, more than 1,000,000");
  if (nodes * t.gpus_per_node > (1u << 20)) {
    f.fail("gpus_per_node", "gives " + std::to_string(nodes * t.gpus_per_node) + " GPUs, more than 1,048,576");
  }
}

void read_model(const json& j, ModelSpec& m) {
  Fields f(j, "model");
  if (!f.has("size")) f.fail("size", "is required");
  f.size("size", m.size, 1, 1ull << 50);
  f.size("shard_size", m.shard_size, kMinShardSize, kMaxShardSize);
  if ((m.shard_size & (m.shard_size - 1)) != 0) f.fail("shard_size", "must be a power of two (64KiB to 1GiB), as in a manifest");
  f.size("flow_size", m.flow_size, 4096, 1ull << 31);
  f.integer("trainer_ranks", m.trainer_ranks, 1, 65536);
  f.finish();
  if (m.flow_size > m.shard_size) f.fail("flow_size", "must not exceed shard_size");
  if ((m.size + m.shard_size - 1) / m.shard_size > (1u << 24)) f.fail("shard_size", "gives more than 2^24 shards");
}

void read_workload(const json& j, WorkloadSpec& w) {
  Fields f(j, "workload");
  f.text("kind", w.kind);
  if (w.kind != "standalone" && w.kind != "elastic" && w.kind != "cross_datacenter") {
    f.fail("kind", "'" + w.kind + "' is not one of standalone, elastic, cross_datacenter");
  }
  f.integer("versions", w.versions, 1, 100000);
  f.seconds("interval_s", w.interval, 1, 1e6);
  f.integer("replicas", w.replicas, 0, 1u << 20);
  f.integer("trainer_nodes", w.trainer_nodes, 1, 1u << 20);
  if (f.has("rollout_datacenters")) {
    const json& list = f.take("rollout_datacenters");
    if (!list.is_array()) f.fail("rollout_datacenters", "must be a list of datacenter names");
    for (const json& name : list) {
      if (!name.is_string()) f.fail("rollout_datacenters", "must be a list of datacenter names");
      w.rollout_datacenters.push_back(name.get<std::string>());
    }
  }
  f.integer("spot_nodes", w.spot_nodes, 0, 1u << 20);
  if (f.has("joins")) {
    const json& list = f.take("joins");
    if (!list.is_array()) f.fail("joins", "must be a list");
    std::uint64_t joining = 0;
    for (std::size_t i = 0; i < list.size(); ++i) {
      Fields entry(list[i], "workload.joins[" + std::to_string(i) + "]");
      WorkloadSpec::Join join;
      Duration at{0};
      if (!entry.has("at_s")) entry.fail("at_s", "is required");
      entry.seconds("at_s", at, 1, 1e7);
      join.at = TimePoint(at);
      entry.integer("nodes", join.nodes, 1, 1u << 20);
      entry.finish();
      joining += join.nodes;
      w.joins.push_back(join);
    }
    if (joining > w.spot_nodes) f.fail("joins", "bring " + std::to_string(joining) + " nodes, more than spot_nodes");
  }
  if (f.has("churn")) {
    Fields c(f.take("churn"), "workload.churn");
    WorkloadSpec::Churn churn;
    c.number("joins_per_s", churn.joins_per_s, 0, 1e6);
    c.number("leaves_per_s", churn.leaves_per_s, 0, 1e6);
    Duration from{0}, until{0};
    c.seconds("from_s", from, 1, 1e7);
    if (!c.has("until_s")) c.fail("until_s", "is required");
    c.seconds("until_s", until, 1, 1e7);
    c.finish();
    if (until <= from) c.fail("until_s", "must be after from_s");
    if (churn.joins_per_s <= 0 && churn.leaves_per_s <= 0) c.fail("joins_per_s", "or leaves_per_s must be above 0");
    // Bounds the draws (and the memory they take) before any is made.
    const double expected = (churn.joins_per_s + churn.leaves_per_s) * to_seconds(until - from);
    if (expected > 1e6) c.fail("", "expects " + std::to_string(static_cast<std::uint64_t>(expected)) + " arrivals, more than 1,000,000");
    churn.from = TimePoint(from);
    churn.until = TimePoint(until);
    w.churn = churn;
  }
  f.finish();
  if (w.kind == "elastic" && w.joins.empty() && !w.churn) f.fail("joins", "or churn are required by an elastic workload");
  if (w.kind != "elastic" && w.churn) f.fail("churn", "needs kind \"elastic\"");
  if (w.kind != "elastic" && w.spot_nodes > 0) f.fail("spot_nodes", "needs kind \"elastic\"");
  if (w.kind == "cross_datacenter" && w.rollout_datacenters.empty()) {
    f.fail("rollout_datacenters", "must name the remote datacenters of a cross_datacenter workload");
  }
}

void read_swarm(const json& j, SwarmSpec& s) {
  Fields f(j, "swarm");
  f.integer("max_neighbours", s.max_neighbours, 1, 1024);
  f.integer("upload_slots", s.upload_slots, 1, 1024);
  f.integer("pipeline_blocks", s.pipeline_blocks, 1, 1024);
  f.boolean("super_seed", s.super_seed);
  f.finish();
}

void read_inference(const json& j, InferenceSpec& inference) {
  Fields f(j, "inference");
  if (!f.has("instances")) f.fail("instances", "is required");
  f.integer("instances", inference.instances, 1, 1u << 20);
  f.integer("gpus_per_instance", inference.gpus_per_instance, 1, 4096);
  std::string layout = "views";
  f.text("layout", layout);
  if (layout == "shards") {
    inference.layout = InferenceSpec::Layout::kShards;
  } else if (layout != "views") {
    f.fail("layout", "'" + layout + "' is not one of views, shards");
  }
  f.integer("layers", inference.layers, 1, 1u << 16);
  f.number("strided_fraction", inference.strided_fraction, 0, 1);
  if (f.has("reference")) {
    const json& given = f.take("reference");
    const json list = given.is_array() ? given : json::array({given});
    if (list.size() > 16) f.fail("reference", "lists more than 16 systems");
    for (const json& entry : list) {
      Fields r(entry, "inference.reference");
      InferenceSpec::Reference reference;
      if (!r.has("system") || !r.has("seconds")) r.fail("", "needs both system and seconds");
      r.text("system", reference.system);
      r.number("seconds", reference.seconds, 1e-6, 1e7);
      r.finish();
      inference.references.push_back(std::move(reference));
    }
  }
  f.finish();
  if (inference.layout == InferenceSpec::Layout::kViews && (inference.layers != 1 || inference.strided_fraction != 0)) {
    f.fail("layout", "\"views\" moves each slice's bytes alone: layers and strided_fraction are for \"shards\"");
  }
}

void read_faults(const json& j, std::vector<FaultSpec>& faults) {
  if (!j.is_array()) throw std::invalid_argument("faults must be a list");
  for (std::size_t i = 0; i < j.size(); ++i) {
    Fields f(j[i], "faults[" + std::to_string(i) + "]");
    FaultSpec fault;
    Duration at{0};
    if (!f.has("at_s")) f.fail("at_s", "is required");
    f.seconds("at_s", at, 1, 1e7);
    fault.at = TimePoint(at);
    if (f.has("crash_node")) {
      fault.kind = FaultSpec::Kind::kCrashNode;
      f.integer("crash_node", fault.node, 0, UINT32_MAX);
    } else if (f.has("link_down_node")) {
      fault.kind = FaultSpec::Kind::kLinkDown;
      f.integer("link_down_node", fault.node, 0, UINT32_MAX);
      if (!f.has("for_s")) f.fail("for_s", "is required with link_down_node");
      f.seconds("for_s", fault.length, 1, 1e7);
    } else if (f.has("slow_node")) {
      fault.kind = FaultSpec::Kind::kSlowNode;
      f.integer("slow_node", fault.node, 0, UINT32_MAX);
      if (!f.has("rate_fraction") && !f.has("hash_fraction")) {
        f.fail("rate_fraction", "or hash_fraction is required with slow_node (its NICs' or its hashing's rate over the full rate, e.g. 0.25)");
      }
      fault.rate_fraction = 1;
      f.number("rate_fraction", fault.rate_fraction, 1e-6, 0.999999);
      f.number("hash_fraction", fault.hash_fraction, 1e-6, 0.999999);
      fault.length = Duration::max();
      if (f.has("for_s")) f.seconds("for_s", fault.length, 1, 1e7);
    } else {
      f.fail("", "needs crash_node, link_down_node or slow_node");
    }
    f.finish();
    faults.push_back(fault);
  }
}

// Poisson arrivals at `rate` per second in [from, until).
std::vector<TimePoint> draw_arrivals(core::SplitMix64& rng, double rate, TimePoint from, TimePoint until) {
  std::vector<TimePoint> at;
  if (rate <= 0) return at;
  double t = to_seconds(from);
  const double end = to_seconds(until);
  for (;;) {
    t -= std::log(1 - rng.unit()) / rate;  // unit() < 1, so the log is finite
    if (t >= end) return at;
    at.push_back(TimePoint(Duration(static_cast<std::int64_t>(std::llround(t * 1e6)))));
  }
}

// Draws workload.churn into joins and crash faults (WorkloadSpec::Churn).
// A leave takes a node present at its time: a rollout node that is not a
// spot node still absent and has not crashed (listed crashes count).
// Model-parallel instances fill the rollout GPUs exactly, each slice has a
// shard to itself at least, and only the swarm fetches by slice.
void check_inference(const Scenario& s, Fields& f) {
  const InferenceSpec& inference = s.inference;
  if (s.scheme != Scheme::kSwarm) f.fail("inference", "works with the swarm scheme only");
  if (s.workload.kind != "standalone" || s.workload.spot_nodes != 0) {
    f.fail("inference", "works with a standalone workload without spot nodes");
  }
  const std::uint64_t gpus = std::uint64_t{s.rollout_nodes().size()} * s.topology.gpus_per_node;
  const std::uint64_t wanted = std::uint64_t{inference.instances} * inference.gpus_per_instance;
  if (gpus != wanted) {
    f.fail("inference", "asks for " + std::to_string(inference.instances) + " x " +
                            std::to_string(inference.gpus_per_instance) + " GPUs; the rollout nodes have " +
                            std::to_string(gpus));
  }
  const std::uint64_t shards = (s.model.size + s.model.shard_size - 1) / s.model.shard_size;
  if (shards < inference.gpus_per_instance) {
    f.fail("inference.gpus_per_instance", "exceeds the model's " + std::to_string(shards) + " shards");
  }
}

void draw_churn(Scenario& s, Fields& f) {
  WorkloadSpec& w = s.workload;
  const WorkloadSpec::Churn& churn = *w.churn;
  core::SplitMix64 rng(s.seed ^ 0x636875726e2d7631ull);  // its own stream: "churn-v1"
  const std::vector<TimePoint> joins = draw_arrivals(rng, churn.joins_per_s, churn.from, churn.until);
  const std::vector<TimePoint> leaves = draw_arrivals(rng, churn.leaves_per_s, churn.from, churn.until);
  std::uint64_t joining = joins.size();
  for (const auto& join : w.joins) joining += join.nodes;
  if (joining > w.spot_nodes) {
    f.fail("workload.churn", "draws " + std::to_string(joins.size()) + " joins, which with the listed joins bring " +
                                 std::to_string(joining) + " nodes, more than spot_nodes (" + std::to_string(w.spot_nodes) + ")");
  }
  for (TimePoint at : joins) w.joins.push_back({at, 1});
  // Replay every join and crash in time order to know who is present.
  const std::vector<std::uint32_t> rollout = s.rollout_nodes();
  if (w.spot_nodes > rollout.size()) f.fail("workload.spot_nodes", "exceeds the rollout nodes (" + std::to_string(rollout.size()) + ")");
  const std::size_t first_spot = rollout.size() - w.spot_nodes;
  enum class Step { kJoin, kCrash, kLeave };  // at the same moment, in this order
  struct Event {
    TimePoint at;
    Step step;
    std::size_t index;  // kJoin: into w.joins; kCrash: into s.faults; kLeave: into leaves
  };
  std::vector<Event> events;
  for (std::size_t j = 0; j < w.joins.size(); ++j) events.push_back({w.joins[j].at, Step::kJoin, j});
  for (std::size_t c = 0; c < s.faults.size(); ++c) {
    if (s.faults[c].kind == FaultSpec::Kind::kCrashNode) events.push_back({s.faults[c].at, Step::kCrash, c});
  }
  for (std::size_t l = 0; l < leaves.size(); ++l) events.push_back({leaves[l], Step::kLeave, l});
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    return a.at != b.at ? a.at < b.at : a.step < b.step;
  });
  std::vector<std::size_t> join_first(w.joins.size());  // as place_peers assigns them: in list order
  for (std::size_t j = 0, next = first_spot; j < w.joins.size(); next += w.joins[j].nodes, ++j) join_first[j] = next;
  std::set<std::uint32_t> present(rollout.begin(), rollout.begin() + static_cast<std::ptrdiff_t>(first_spot));
  for (const Event& e : events) {
    if (e.step == Step::kJoin) {
      for (std::size_t n = 0; n < w.joins[e.index].nodes; ++n) present.insert(rollout[join_first[e.index] + n]);
    } else if (e.step == Step::kCrash) {
      present.erase(s.faults[e.index].node);
    } else if (!present.empty()) {  // a leave with nobody present reclaims nothing
      auto reclaimed = present.begin();
      std::advance(reclaimed, static_cast<std::ptrdiff_t>(rng.below(present.size())));
      FaultSpec crash;
      crash.kind = FaultSpec::Kind::kCrashNode;
      crash.at = e.at;
      crash.node = *reclaimed;
      s.faults.push_back(crash);
      present.erase(reclaimed);
    }
  }
}

}  // namespace

std::string_view scheme_name(Scheme scheme) {
  switch (scheme) {
    case Scheme::kSwarm: return "swarm";
    case Scheme::kDirectPull: return "direct_pull";
    case Scheme::kStorage: return "storage";
    case Scheme::kBroadcast: return "broadcast";
  }
  return "?";
}

Result<Scheme> parse_scheme(std::string_view name) {
  for (Scheme s : {Scheme::kSwarm, Scheme::kDirectPull, Scheme::kStorage, Scheme::kBroadcast}) {
    if (scheme_name(s) == name) return s;
  }
  return Status::invalid_argument("scheme '" + std::string(name) +
                                  "' is not one of swarm, direct_pull, storage, broadcast");
}

std::vector<std::uint32_t> Scenario::rollout_nodes() const {
  std::vector<std::uint32_t> nodes;
  std::uint32_t node = 0;
  for (const auto& dc : topology.datacenters) {
    const bool rollout = workload.rollout_datacenters.empty() ||
                         std::find(workload.rollout_datacenters.begin(), workload.rollout_datacenters.end(), dc.name) !=
                             workload.rollout_datacenters.end();
    for (std::uint64_t n = 0; n < std::uint64_t{dc.racks} * dc.nodes_per_rack; ++n, ++node) {
      if (rollout && node >= workload.trainer_nodes) nodes.push_back(node);
    }
  }
  return nodes;
}

std::uint32_t Scenario::node_count() const {
  std::uint64_t n = 0;
  for (const auto& dc : topology.datacenters) n += std::uint64_t{dc.racks} * dc.nodes_per_rack;
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(n, UINT32_MAX));
}

Result<Scenario> parse_scenario(std::string_view json_text) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::parse_error& e) {
    return Status::invalid_argument(std::string("scenario is not valid JSON: ") + e.what());
  }
  Scenario s;
  try {
    Fields f(j, "");
    f.text("name", s.name);
    f.integer("seed", s.seed, 0, UINT64_MAX);
    f.text("network", s.network);
    if (s.network != "fluid" && s.network != "simgrid") {
      f.fail("network", "'" + s.network + "' is not available (\"fluid\" or \"simgrid\")");
    }
    f.text("simgrid_model", s.simgrid_model);
    if (s.simgrid_model != "CM02" && s.simgrid_model != "LV08") f.fail("simgrid_model", "must be \"CM02\" or \"LV08\"");
    if (!f.has("topology")) f.fail("topology", "is required");
    read_topology(f.take("topology"), s.topology);
    if (!f.has("model")) f.fail("model", "is required");
    read_model(f.take("model"), s.model);
    if (f.has("workload")) read_workload(f.take("workload"), s.workload);
    if (f.has("inference")) read_inference(f.take("inference"), s.inference);
    if (f.has("swarm")) read_swarm(f.take("swarm"), s.swarm);
    std::string scheme = "swarm";
    f.text("scheme", scheme);
    auto parsed_scheme = parse_scheme(scheme);
    if (!parsed_scheme) f.fail("scheme", "'" + scheme + "' is not one of swarm, direct_pull, storage, broadcast");
    s.scheme = *parsed_scheme;
    f.text("membership", s.membership);
    if (s.membership != "ideal" && s.membership != "gossip") f.fail("membership", "must be \"ideal\" or \"gossip\"");
    f.boolean("manifest_round_trip", s.manifest_round_trip);
    f.gbps("storage_gbps", s.topology.storage_bytes_per_second);
    if (f.has("broadcast")) {
      Fields b(f.take("broadcast"), "broadcast");
      b.size("chunk", s.baseline.broadcast_chunk, 4096, 1u << 30);
      b.seconds("rebuild_s", s.baseline.broadcast_rebuild, 1, 1e6);
      b.integer("buffer_chunks", s.baseline.broadcast_buffer_chunks, 0, 1u << 20);
      std::string root = "every_rank";
      b.text("root", root);
      if (root == "rank0") {
        s.baseline.broadcast_root = BaselineSpec::Root::kRankZero;
      } else if (root != "every_rank") {
        b.fail("root", "'" + root + "' is not one of every_rank, rank0");
      }
      b.finish();
    }
    f.gbps("hash_gbps", s.hash_bytes_per_second);
    f.seconds("failure_detection_s", s.failure_detection, 1, 1e5);
    if (f.has("faults")) read_faults(f.take("faults"), s.faults);
    f.seconds("time_limit_s", s.time_limit, 1, 1e9);
    f.finish();
    if (s.topology.nic_per_gpu && s.scheme != Scheme::kSwarm) {
      f.fail("topology.nic_per_gpu", "works with the swarm scheme only (the baselines' flows run node to node)");
    }
    if (s.scheme == Scheme::kStorage && s.topology.storage_bytes_per_second <= 0) {
      f.fail("storage_gbps", "is required with the storage scheme");
    }
    const std::uint32_t nodes = s.node_count();
    if (s.workload.trainer_nodes >= nodes && s.workload.rollout_datacenters.empty()) {
      f.fail("workload.trainer_nodes", "leaves no node for rollout workers (" + std::to_string(nodes) + " nodes)");
    }
    if (s.model.trainer_ranks > std::uint64_t{s.workload.trainer_nodes} * s.topology.gpus_per_node) {
      f.fail("model.trainer_ranks", "exceeds the trainer nodes' GPUs");
    }
    if (s.inference.enabled()) check_inference(s, f);
    for (const std::string& name : s.workload.rollout_datacenters) {
      bool known = false;
      for (const auto& dc : s.topology.datacenters) known |= dc.name == name;
      if (!known) f.fail("workload.rollout_datacenters", "names an unknown datacenter '" + name + "'");
    }
    for (const FaultSpec& fault : s.faults) {
      if (fault.node >= nodes) f.fail("faults", "names node " + std::to_string(fault.node) + " of " + std::to_string(nodes));
    }
    if (s.workload.churn) draw_churn(s, f);
  } catch (const std::invalid_argument& e) {
    return Status::invalid_argument(e.what());
  } catch (const json::exception& e) {
    return Status::invalid_argument(std::string("scenario: ") + e.what());
  }
  return s;
}

}  // namespace tensorhub::sim
