// The baselines, in the same engine, topology and workload as the swarm:
//
// * direct_pull: every worker reads each trainer rank's part straight from
//   that rank, all workers at once (the UCX / plain RDMA shape). One flow
//   per (rank, worker) pair; the network shares the trainer's NICs fairly.
//   The trainer keeps the version until the last worker has it.
// * storage: the trainer ranks write their parts to a storage service (one
//   node whose links run at storage_gbps), then every worker reads the whole
//   version from it. The trainer is free once the write is done. Every
//   byte moves twice.
// * broadcast: a pipelined ring per trainer rank over a static group (the
//   NCCL shape): the rank sends its part in chunks to the first worker, each
//   worker forwards every chunk it has received to the next, one chunk at a
//   time per hop, store-and-forward. Workers are ordered by node, so hops
//   inside a node use NVLink. With broadcast.root "rank0", rank 0 alone
//   broadcasts the whole version in one ring, as RL frameworks that gather
//   the weights on rank 0 do; its GPU is the only one of its node in the
//   group, so it sends through that GPU's own NICs (nics_per_node /
//   gpus_per_node of them, at least one): the node's links run at that
//   share, which a fault on the node lowers no further unless it is lower
//   (faults overlap as NodeLinkFaults says). The gather is taken as free.
//   A crashed worker breaks the group: every flow of the version stops, and
//   after broadcast.rebuild_s (building a new communicator) the version is
//   broadcast again to the workers that lack it.
//   A joining worker breaks it the same way (the static group must grow).
//   The trainer takes part until the last worker has it.
//
// What they assume, so that the comparison is fair: the same links and
// latencies as the swarm (a flow's bytes arrive one path latency after they
// leave), no hashing (the swarm hashes every shard), no protocol overhead
// (no request precedes a pull or a read; the swarm asks for every block),
// perfect pipelining, and no straggler effects beyond the flows' fair
// shares. A worker buffers broadcast.buffer_chunks chunks it has not yet
// passed on (NCCL's fixed buffers; default 2, double buffering), and its
// sender learns of a freed slot one path latency after it is freed (NCCL's
// credits): a hop carries at most buffer_chunks chunks per round trip, so a
// ring across a long link is window-limited as NCCL's is, and a slow worker
// (a slow_node fault) holds back the whole ring. With 0 the hops buffer
// without bound: no window, and only the workers after a slow one wait.
// Deterministic, like the swarm driver.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

#include "core/virtual_time_queue.hpp"
#include "sim/cluster_topology.hpp"
#include "sim/network_model.hpp"
#include "sim/node_link_faults.hpp"
#include "sim/progress_throttle.hpp"
#include "sim/scenario.hpp"
#include "sim/swarm_simulation.hpp"
#include "sim/version_ledger.hpp"

namespace tensorhub::sim {

class BaselineSimulation final : public FlowDriver {
 public:
  // REQUIRES: scenario.scheme is a baseline; as SwarmSimulation otherwise.
  BaselineSimulation(const Scenario& scenario, NetworkModel& network);

  SimulationResult run(const std::function<void(const BaselineSimulation&)>& progress = {});

  TimePoint now() const { return events_.now(); }
  std::uint64_t events_processed() const { return events_processed_; }
  std::size_t workers() const { return worker_nodes_.size(); }
  std::size_t workers_done_with_latest() const { return ledger_.done_with_latest(); }
  std::uint32_t latest_version() const { return ledger_.latest(); }
  const ClusterTopology& topology() const { return topology_; }

  TimePoint next_event() const override { return events_.empty() ? kTimeNever : events_.next_at(); }
  void run_events_due(TimePoint now) override;
  void on_flows_done(TimePoint now, std::span<const FlowId> flows) override;
  bool done() const override { return finished_; }

 private:
  // Where a flow's bytes go when it completes.
  struct Transfer {
    enum class Kind { kPull, kWrite, kRead, kChunk } kind = Kind::kPull;
    std::uint32_t version = 0;
    std::uint32_t worker = 0;  // kPull, kRead: the reader; kChunk: the receiver
    std::uint32_t rank = 0;    // kPull, kWrite: whose part
    std::uint32_t ring = 0;    // kChunk: which ring
    std::uint32_t hop = 0;     // kChunk: position in the ring (0: from its source)
    std::uint32_t rings_built = 0;  // kChunk: the rings_ it belongs to (see rings_built_)
    std::uint32_t from_node = 0, to_node = 0;
    std::uint64_t bytes = 0;
  };
  // One ring of the broadcast: a rank's part (or, broadcast from rank 0,
  // the whole version) from `source` through `order`.
  struct Ring {
    std::uint32_t source = 0;              // node
    std::uint64_t bytes = 0;
    std::uint32_t parts = 1;               // the ranks' parts it carries
    std::vector<std::uint32_t> order;      // workers
    std::uint32_t chunks = 0;
    std::vector<std::uint32_t> received;   // per position: chunks it holds
    std::vector<std::uint32_t> sent;       // per hop: chunks sent on it
    // Per hop: buffer slots its receiver has freed (passed the chunk on, or,
    // the last, taken it), as far as the hop's sender knows so far.
    std::vector<std::uint32_t> freed;
    std::vector<bool> busy;                // per hop: a chunk leaving the sender
  };
  // What a kArrival event brings: a completed flow's bytes, or (credit) a
  // freed buffer slot's credit on its way back to the hop's sender.
  struct InTransit {
    Transfer transfer;
    bool credit = false;
  };
  enum class Kind { kPublish, kFault, kLinkRestore, kRebroadcast, kJoin, kArrival };
  struct Event {
    TimePoint at;
    Kind kind = Kind::kPublish;
    std::uint64_t number = 0;
  };

  void publish(std::uint32_t version);
  void start_pulls(std::uint32_t version);
  void start_reads(std::uint32_t version);
  void start_broadcast(std::uint32_t version);
  void pump_ring(std::uint32_t ring_index, std::uint32_t hop);
  // The chunk transfer of hop `hop`, from its sender to its receiver.
  Transfer hop_transfer(std::uint32_t ring_index, std::uint32_t hop) const;
  FlowId start(std::uint32_t from_node, std::uint32_t to_node, std::uint64_t bytes, Transfer transfer);
  // The flow of `t` has left its sender; its bytes arrive a path latency later.
  void flow_done(const Transfer& t);
  void transfer_done(const Transfer& t);
  void chunk_arrived(const Transfer& t);
  // Hop `hop` of the ring's receiver freed a slot: its sender learns of it
  // one path latency later.
  void send_credit(const Transfer& hop_transfer);
  void deliver_later(const Transfer& t, bool credit);
  void clear_rings();
  void worker_has_parts(std::uint32_t version, std::uint32_t worker, std::uint32_t parts = 1);
  void crash_node(std::uint32_t node);
  void join(std::size_t index);
  // Broadcast: the group changed; stop the collective and rebuild it.
  void rebuild_group();
  void advance_workload();
  std::uint64_t part_bytes(std::uint32_t rank) const;
  bool alive(std::size_t worker) const { return worker_alive_[worker]; }

  const Scenario& scenario_;
  NetworkModel& network_;
  ClusterTopology topology_;
  std::vector<std::uint32_t> trainer_nodes_, worker_nodes_;
  std::vector<bool> worker_alive_;
  std::vector<std::size_t> join_first_worker_;  // see Placement
  std::size_t joins_done_ = 0;
  TimePoint rebuilt_at_;                        // broadcast: the group is usable again
  std::vector<std::uint32_t> parts_received_;  // per worker, of the current version
  std::uint32_t parts_written_ = 0;            // storage: ranks done writing the current version
  std::vector<Ring> rings_;
  std::uint32_t rings_built_ = 0;  // bumped whenever rings_ is cleared: chunks still on their way belong to no ring
  std::map<std::uint64_t, InTransit> in_transit_;  // by kArrival event number
  std::uint64_t next_in_transit_ = 0;
  std::unordered_map<std::uint64_t, Transfer> transfers_;
  VersionLedger ledger_;
  Timeline timeline_;
  NodeLinkFaults link_faults_;
  core::VirtualTimeQueue<Event> events_;
  std::uint64_t events_processed_ = 0, flows_started_ = 0;
  bool finished_ = false;
  std::function<void(const BaselineSimulation&)> progress_;
  ProgressThrottle throttle_;
};

}  // namespace tensorhub::sim
