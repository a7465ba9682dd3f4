// A what-if question for the simulator, read from a JSON file.
//
// The format (every field but topology.datacenters and model.size has a
// default; unknown keys are errors, so a typo is never silently ignored; a
// cluster of more than 1,000,000 nodes or 1,048,576 GPUs is refused):
//
//   {
//     "name": "standalone-64",
//     "seed": 1,
//     "network": "fluid",                  // the network model: "fluid" or "simgrid"
//     "simgrid_model": "CM02",             // with simgrid: "CM02" (max-min) or "LV08" (TCP)
//     "topology": {
//       "datacenters": [{"name": "dc1", "racks": 2, "nodes_per_rack": 4}],
//       "gpus_per_node": 1,                // one rollout peer per GPU
//       "nics_per_node": 1, "nic_gbps": 1, // a node's NICs, pooled into one up and one down link...
//       "nic_per_gpu": false,              // ...or each GPU with its own share of them (rails, as
//                                          // GPUDirect RDMA clusters are built; swarm scheme only)
//       "nvlink_gbps": 28800,              // a node's NVSwitch, all GPUs together, each direction
//       "tor_oversubscription": 1,         // rack uplink = nodes x NIC rate / this
//       "hop_latency_us": 5,               // per link crossed
//       "wan_gbps": 400, "wan_latency_ms": 10  // between datacenters, each direction
//     },
//     "model": {"size": "2GiB", "shard_size": "16MiB", "flow_size": "1MiB", "trainer_ranks": 1},
//                                         // shard_size: a power of two, 64KiB to 1GiB (a manifest's)
//     "workload": {
//       "kind": "standalone",             // "elastic" (with joins) or "cross_datacenter" (rollouts remote)
//       "versions": 1, "interval_s": 0,   // 0: the next version once every worker has the last
//       "replicas": 1,                    // the trainer's stall lasts until this many workers hold it
//       "trainer_nodes": 1,               // the first nodes of the first datacenter train
//       "rollout_datacenters": [],        // where rollout workers run (default: every node not training)
//       "spot_nodes": 0,                  // elastic: the last rollout nodes start absent...
//       "joins": [{"at_s": 5, "nodes": 2}], // ...and join like this,
//       "churn": {"joins_per_s": 0.5,       // and/or one at a time at random, with rollout
//                 "leaves_per_s": 0.5,      // nodes reclaimed (crashed) at random, as Poisson
//                 "from_s": 0, "until_s": 12} // arrivals drawn from the seed
//     },
//     "inference": {"instances": 8,         // rollout GPUs form instances that each hold the
//                   "gpus_per_instance": 16, // model once, split into this many equal slices;
//                   "layout": "views",       // "views": each slice is shards of its own (a part's
//                                            // view of a declared selection, docs/parts.md);
//                   "layers": 61,            // "shards": slices cut a layer's bytes, and the
//                   "strided_fraction": 0,   // shards they touch move whole; this fraction of each
//                                            // layer is strided (row-parallel): every slice wants it
//                   "reference": {"system": "Perplexity", "seconds": 1.3}},  // a published time
//                                            // (or a list of them)
//     "swarm": {"max_neighbours": 16, "upload_slots": 8, "pipeline_blocks": 8, "super_seed": true},
//     "membership": "ideal",              // swarm: "ideal" (told at once) or "gossip" (the real gossip cores)
//     "manifest_round_trip": true,        // gossip: a new head's manifest costs a round trip to a peer naming it
//     "scheme": "swarm",                  // or a baseline: "direct_pull", "storage", "broadcast"
//     "storage_gbps": 400,                // the storage service's aggregate rate (storage scheme)
//     "broadcast": {"chunk": "4MiB", "rebuild_s": 10,   // the ring's chunk; a failure's rebuild cost;
//                   "buffer_chunks": 2,                  // chunks a worker buffers, the hop's window
//                                                        // per round trip (0: without bound);
//                   "root": "every_rank"},               // or "rank0": one ring from rank 0's GPU
//     "hash_gbps": 100,                   // shard verification rate per peer
//     "failure_detection_s": 2,          // how long until the others drop a crashed peer
//     "faults": [{"at_s": 1.5, "crash_node": 3},
//                {"at_s": 2, "link_down_node": 4, "for_s": 3},
//                {"at_s": 0, "slow_node": 5, "rate_fraction": 0.25},   // NICs at a quarter; "for_s" optional
//                {"at_s": 0, "slow_node": 6, "hash_fraction": 0.1}],   // hashing at a tenth (a busy CPU)
//     "time_limit_s": 3600
//   }
//
// Sizes take the usual suffixes ("16MiB", "2GiB", "140GB"); rates are in
// Gbit/s. Node numbers count from 0 across datacenters, racks, then nodes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/time.hpp"
#include "tensorhub/status.hpp"

namespace tensorhub::sim {

struct TopologySpec {
  struct Datacenter {
    std::string name;
    std::uint32_t racks = 1;
    std::uint32_t nodes_per_rack = 1;
  };
  std::vector<Datacenter> datacenters;
  std::uint32_t gpus_per_node = 1;
  std::uint32_t nics_per_node = 1;
  double nic_bytes_per_second = 1e9 / 8;
  // Each GPU sends and receives through nics_per_node / gpus_per_node NICs
  // of its own, rather than all of them sharing the node's.
  bool nic_per_gpu = false;
  // 8 x H100 at 450 GB/s each way: NVSwitch carries the sum, so one
  // pooled link per node models it (per-GPU ports are not modelled).
  double nvlink_bytes_per_second = 3.6e12;
  double tor_oversubscription = 1;
  Duration hop_latency = std::chrono::microseconds(5);
  double wan_bytes_per_second = 400e9 / 8;
  Duration wan_latency = std::chrono::milliseconds(10);
  // The storage baseline's service: one more node in the first datacenter,
  // in a rack of its own, whose links carry this aggregate rate (0: none).
  double storage_bytes_per_second = 0;
};

struct ModelSpec {
  std::uint64_t size = 0;
  std::uint64_t shard_size = 16u << 20;
  std::uint32_t flow_size = 1u << 20;  // the swarm's block: one request, one flow
  std::uint32_t trainer_ranks = 1;
};

// Rollout GPUs as model-parallel instances: GPU w is slice w mod
// gpus_per_instance of instance w / gpus_per_instance, and fetches only the
// shards its slice needs (sim/slice_plan.hpp).
struct InferenceSpec {
  std::uint32_t instances = 0;  // 0: every rollout GPU fetches the whole version
  std::uint32_t gpus_per_instance = 1;
  enum class Layout { kViews, kShards };
  Layout layout = Layout::kViews;
  std::uint32_t layers = 1;
  double strided_fraction = 0;
  // Published times for the same set-up, reported beside ours and the bound.
  struct Reference {
    std::string system;
    double seconds = 0;
  };
  std::vector<Reference> references;

  bool enabled() const { return instances > 0; }
};

struct WorkloadSpec {
  std::string kind = "standalone";  // or "elastic" (spot nodes join) or "cross_datacenter"
  std::uint32_t versions = 1;
  Duration interval{0};
  std::uint32_t replicas = 1;
  std::uint32_t trainer_nodes = 1;
  std::vector<std::string> rollout_datacenters;
  // Elastic: the last `spot_nodes` rollout nodes start absent and join, a
  // few nodes at a time, as `joins` says; each joining worker must get the
  // current head.
  struct Join {
    TimePoint at;
    std::uint32_t nodes = 1;
  };
  std::uint32_t spot_nodes = 0;
  std::vector<Join> joins;
  // Spot churn: spot nodes join at joins_per_s and rollout nodes present at
  // the time are reclaimed at leaves_per_s, as Poisson arrivals drawn from
  // the scenario's seed, from `from` until `until`. parse_scenario draws
  // them into one-node joins (after those listed, so they take the spot
  // nodes those leave) and crash faults; what the simulations see is only
  // `joins` and `faults`.
  struct Churn {
    double joins_per_s = 0, leaves_per_s = 0;
    TimePoint from, until;
  };
  std::optional<Churn> churn;
};

struct SwarmSpec {
  std::size_t max_neighbours = 16;
  std::size_t upload_slots = 8;
  std::size_t pipeline_blocks = 8;
  bool super_seed = true;
};

// Which way a version travels: our swarm, or one of the baselines
// (sim/baseline_simulation.hpp says what each assumes).
enum class Scheme { kSwarm, kDirectPull, kStorage, kBroadcast };

struct BaselineSpec {
  std::uint32_t broadcast_chunk = 4u << 20;         // the ring's pipelining unit
  Duration broadcast_rebuild = std::chrono::seconds(10);  // a failure: stop the world, build a new group
  // Chunks a worker holds before it has passed them on (NCCL's fixed
  // buffers; 2 is double buffering); 0 buffers without bound. A freed slot
  // is known upstream a path latency later, so each hop carries at most
  // buffer_chunks x chunk per round trip.
  std::uint32_t broadcast_buffer_chunks = 2;
  // Who broadcasts: every trainer rank its own part, each in a ring of its
  // own (the best NCCL shape), or rank 0 alone, the whole version in one
  // ring from its one GPU (the shape of RL frameworks that gather the
  // weights on rank 0 and broadcast from there).
  enum class Root { kEveryRank, kRankZero };
  Root broadcast_root = Root::kEveryRank;
};

struct FaultSpec {
  // kLinkDown and kSlowNode act on the node's NIC links: down, or running
  // at rate_fraction of their rate (a degraded NIC, a host that is slow).
  // kSlowNode may also slow the node's hashing (hash_fraction).
  enum class Kind { kCrashNode, kLinkDown, kSlowNode };
  Kind kind = Kind::kCrashNode;
  TimePoint at;
  std::uint32_t node = 0;
  Duration length{0};        // kLinkDown, kSlowNode: how long; Duration::max() for the rest of the run
  double rate_fraction = 0;  // kLinkDown: 0; kSlowNode: in (0, 1], 1 leaving the NICs as they are
  double hash_fraction = 1;  // kSlowNode: its peers verify shards at this fraction of hash_gbps (a busy CPU)
};

struct Scenario {
  std::string name = "unnamed";
  std::uint64_t seed = 1;
  std::string network = "fluid";       // or "simgrid" (the reference)
  std::string simgrid_model = "CM02";  // SimGrid's network model (simgrid_network.hpp)
  TopologySpec topology;
  ModelSpec model;
  InferenceSpec inference;
  WorkloadSpec workload;
  SwarmSpec swarm;
  Scheme scheme = Scheme::kSwarm;
  // How the swarm's peers learn who holds what: "ideal" (told at once, no
  // traffic) or "gossip" (every peer runs the real gossip core; records,
  // SWIM probes and push-pull travel with the topology's latency).
  std::string membership = "ideal";
  // Gossip membership: a worker asks a peer that names a new head for its
  // manifest over the data plane, one round trip (false: the manifest
  // comes with the record that names the head, as if free).
  bool manifest_round_trip = true;
  BaselineSpec baseline;
  double hash_bytes_per_second = 100e9 / 8;
  Duration failure_detection = std::chrono::seconds(2);
  std::vector<FaultSpec> faults;
  Duration time_limit = std::chrono::hours(1);

  std::uint32_t node_count() const;
  // The nodes that run rollout workers, in node order: every node past the
  // trainer nodes, only in rollout_datacenters when those are named. The
  // last workload.spot_nodes of them are the spot nodes.
  std::vector<std::uint32_t> rollout_nodes() const;
};

std::string_view scheme_name(Scheme scheme);
Result<Scheme> parse_scheme(std::string_view name);

// Parses and checks a scenario; errors name the field and say what is wrong.
Result<Scenario> parse_scenario(std::string_view json_text);

}  // namespace tensorhub::sim
