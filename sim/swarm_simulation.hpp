// The simulator's driver: the real swarm cores of every peer, over a
// network model, in virtual time.
//
// One SwarmCore per peer (a trainer rank or a rollout worker), exactly as
// the runtime runs it. The driver carries control messages after the path's
// latency (they are small; their bytes are not modelled), and every piece a
// core serves as a flow of its length through the network model. Pieces
// between two peers go one after another, like the bytes of one TCP
// connection: the next starts when the previous has left. Verification
// takes shard bytes / hash rate, one shard after another per peer.
//
// Every peer runs the real peer core (src/peer/peer_core.hpp), the same
// glue of gossip, head tracking and swarm that the runtime runs; this
// driver plays the application: trainer ranks publish each version (rank r
// the shards r, r+ranks, ...; a manifest signed by the trainer), and each
// worker fetches every new head its core reports, keeping a double buffer.
//
// Membership is "ideal" or "gossip". Ideal: instead of running gossip,
// every worker is handed the manifest and told of every trainer rank and
// every other worker of a version the moment it is published, and of a
// crashed peer failure_detection later (what gossip would say, without its
// traffic). Gossip: every peer also runs the real gossip core
// (sim/gossip_network.hpp, messages delayed by the path's latency; their
// bytes are not put on the links), and the peer cores ask each other for
// manifests over their data connections, as in the runtime. Deterministic
// either way: a seed gives the same run.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "core/rng.hpp"
#include "core/virtual_time_queue.hpp"
#include "core/virtual_timer.hpp"
#include "sim/cluster_topology.hpp"
#include "sim/gossip_network.hpp"
#include "sim/network_model.hpp"
#include "sim/node_link_faults.hpp"
#include "sim/slice_plan.hpp"
#include "sim/slowdowns.hpp"
#include "sim/progress_throttle.hpp"
#include "sim/scenario.hpp"
#include "sim/simulation_result.hpp"
#include "sim/timeline.hpp"
#include "sim/version_ledger.hpp"
#include "peer/peer_core.hpp"

namespace tensorhub::sim {

class SwarmSimulation final : public FlowDriver {
 public:
  // REQUIRES: `scenario` and `network` outlive the simulation; nothing has
  // been added to `network` yet.
  SwarmSimulation(const Scenario& scenario, NetworkModel& network);
  ~SwarmSimulation() override;

  // Runs to the end of the workload or the scenario's time limit. `progress`
  // (may be empty) is called now and then with the simulation so far.
  SimulationResult run(const std::function<void(const SwarmSimulation&)>& progress = {});

  TimePoint now() const { return events_.now(); }
  std::uint64_t events_processed() const { return events_processed_; }
  std::size_t workers() const { return workers_.size(); }
  // Workers holding the newest published version.
  std::size_t workers_done_with_latest() const { return ledger_->done_with_latest(); }
  std::uint32_t latest_version() const { return ledger_->latest(); }
  const ClusterTopology& topology() const { return topology_; }

  // FlowDriver: called by the network model as the run goes.
  TimePoint next_event() const override {
    const TimePoint own = events_.empty() ? kTimeNever : events_.next_at();
    return gossip_ ? std::min(own, gossip_->next_event()) : own;
  }
  void run_events_due(TimePoint now) override;
  void on_flows_done(TimePoint now, std::span<const FlowId> flows) override;
  bool done() const override { return finished_; }

 private:
  struct SimPeer {
    PeerId id;
    std::uint32_t node = 0;
    std::uint32_t endpoint = 0;  // where its flows start and end (ClusterTopology::endpoint)
    swarm::Location location;
    std::uint64_t seed = 0;  // its core's random stream
    std::unique_ptr<peer::PeerCore> core;
    bool trainer = false;
    std::uint32_t rank = 0;    // trainers: which part of each version
    std::uint32_t worker = 0;  // workers: index in workers_
    std::uint64_t bytes_sent = 0;
    core::VirtualTimer timer;
    TimePoint hasher_free;  // when its hasher finishes the shards queued so far
    std::uint32_t newest = 0;  // the newest version it fetched or fetches (gossip mode)
    std::uint32_t slice = 0;   // workers of an instance: which slice it holds
    std::map<std::uint32_t, std::size_t> images_left;  // per version being fetched: images not complete yet
    std::uint64_t bytes_received = 0;  // payload of pieces that reached it
  };
  // One direction of a connection: pieces leave one after another.
  struct QueuedPiece {
    swarm::SwarmMessage header;
    std::uint32_t length = 0;
  };
  struct Pipe {
    std::deque<QueuedPiece> queue;
    std::optional<FlowId> flow;
    std::optional<QueuedPiece> sending;
  };
  enum class Kind { kMessage, kPiece, kConnected, kConnectFailed, kDisconnected, kPeerGone, kTimer, kVerified,
                    kPublish, kFault, kLinkRestore, kJoin };
  struct Event {
    TimePoint at;
    Kind kind = Kind::kTimer;
    std::uint32_t to = 0, from = 0;
    swarm::SwarmMessage message;  // kMessage, kPiece (the header)
    std::uint64_t number = 0;     // kTimer: generation; kVerified: shard; kPublish: version; kFault, kJoin: index; kLinkRestore: node
  };

  void add_peers();
  std::uint32_t add_peer(std::uint32_t node, std::uint32_t gpu, bool trainer, std::uint32_t rank);
  // The signed manifest of version `number` (built on first use).
  const std::shared_ptr<const Manifest>& manifest(std::uint32_t number);
  ManifestId version_id(std::uint32_t number) { return manifest(number)->id(); }
  std::shared_ptr<const Manifest> signed_manifest(const std::string& model, std::uint32_t number,
                                                  const ManifestId& parent, const swarm::ShardLayout& layout,
                                                  std::uint64_t digest_seed) const;
  void publish(std::uint32_t number);
  // Model-parallel instances (swarm_simulation_slices.cpp): each trainer
  // rank publishes its images of the version (SlicePlan) as versions of
  // their own, and a worker holds the version once it holds its share of
  // every image it needs.
  const std::vector<std::shared_ptr<const Manifest>>& images(std::uint32_t number);
  void publish_images(std::uint32_t number);
  void fetch_image(std::uint32_t peer, const VersionInfo& head);
  void on_image_done(std::uint32_t peer, const ManifestId& image_id, const Status& status);
  void release_images(std::uint32_t peer, std::uint32_t number);
  void fault(const FaultSpec& spec);
  // The fraction of hash_gbps the node's peers verify at now (slow hosts).
  double hash_fraction(std::uint32_t node) const;
  void crash(std::uint32_t peer);
  void join(std::size_t index);  // the workload's join `index`: its spot workers arrive
  std::unique_ptr<peer::PeerCore> new_core(std::uint32_t peer);
  // The application's part: a worker fetches each new head.
  void on_head(std::uint32_t peer, const VersionInfo& head);
  void drain(std::uint32_t peer);
  void arm(std::uint32_t peer);
  void dispatch(Event& e);
  void deliver_later(Event e);  // after the path's latency, and after a down link is back
  Pipe& pipe(std::uint32_t from, std::uint32_t to);
  void send_next(std::uint32_t from, std::uint32_t to);
  void close_pipes(std::uint32_t a, std::uint32_t b);
  void on_flow_done(FlowId flow);
  void on_worker_done(std::uint32_t peer, const ManifestId& version_id, const Status& status);
  // After a completion or a crash: the next version, or the end.
  void advance_workload();
  // The version `peer` holds, released at once (nothing happens when it holds none).
  void release(std::uint32_t peer, std::uint32_t number);
  void start_gossip();
  bool alive(std::uint32_t peer) const { return peers_[peer].core != nullptr; }

  const Scenario& scenario_;
  NetworkModel& network_;
  ClusterTopology topology_;
  swarm::ShardLayout layout_;
  core::SplitMix64 rng_;
  std::shared_ptr<swarm::LocationBook> locations_ = std::make_shared<swarm::LocationBook>();  // shared by every core
  std::vector<SimPeer> peers_;
  std::unordered_map<PeerId, std::uint32_t> by_id_;
  std::vector<std::uint32_t> trainers_, workers_;  // peer indices
  std::map<std::pair<std::uint32_t, std::uint32_t>, Pipe> pipes_;
  std::unordered_map<std::uint64_t, std::pair<std::uint32_t, std::uint32_t>> flow_pipe_;
  NodeLinkFaults link_faults_;
  // Per node, the slow_node faults that slow its hashing.
  std::vector<Slowdowns> slow_hashing_;
  std::optional<VersionLedger> ledger_;  // once the workers are placed
  std::vector<std::size_t> join_first_worker_;  // see Placement
  std::size_t joins_done_ = 0;
  std::map<ManifestId, std::uint32_t> version_numbers_;
  std::vector<std::shared_ptr<const Manifest>> manifests_;  // [number - 1]
  std::optional<SlicePlan> plan_;  // model-parallel instances
  std::vector<std::vector<std::shared_ptr<const Manifest>>> images_;  // [number - 1][image]
  std::map<ManifestId, std::size_t> image_index_;  // an image's place in SlicePlan::images()
  std::optional<Identity> trainer_key_;  // signs every version
  std::shared_ptr<peer::ManifestDecoder> decoder_;  // shared by every core: each manifest decoded once
  core::VirtualTimeQueue<Event> events_;
  std::unique_ptr<GossipNetwork> gossip_;  // gossip mode: peer i is gossip peer i
  std::uint64_t events_processed_ = 0;
  std::uint64_t flows_started_ = 0;
  std::uint64_t requests_timed_out_ = 0;
  std::map<std::string, std::uint64_t> actions_ignored_;  // peer actions this driver does not carry out, by kind
  Timeline timeline_;
  std::function<void(const SwarmSimulation&)> progress_;
  ProgressThrottle throttle_;
  bool finished_ = false;
};

}  // namespace tensorhub::sim
