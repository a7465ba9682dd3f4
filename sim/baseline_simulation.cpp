#include "sim/baseline_simulation.hpp"

#include <algorithm>

#include "sim/placement.hpp"

namespace tensorhub::sim {

using namespace std::chrono_literals;

BaselineSimulation::BaselineSimulation(const Scenario& scenario, NetworkModel& network)
    : scenario_(scenario),
      network_(network),
      topology_(scenario.topology, network),
      ledger_(scenario.workload, place_peers(scenario).worker_nodes.size(),
              place_peers(scenario).first_spot_worker),
      link_faults_(topology_, network) {
  const Placement placement = place_peers(scenario);
  trainer_nodes_ = placement.trainer_nodes;
  worker_nodes_ = placement.worker_nodes;
  worker_alive_.assign(worker_nodes_.size(), true);
  for (std::size_t s = placement.first_spot_worker; s < worker_alive_.size(); ++s) worker_alive_[s] = false;
  join_first_worker_ = placement.join_first_worker;
  const WorkloadSpec& w = scenario.workload;
  for (std::size_t j = 0; j < w.joins.size(); ++j) events_.schedule(Event{w.joins[j].at, Kind::kJoin, j});
  if (w.interval.count() > 0) {
    for (std::uint32_t v = 1; v <= w.versions; ++v) events_.schedule(Event{TimePoint(w.interval * (v - 1)), Kind::kPublish, v});
  } else {
    events_.schedule(Event{kTimeZero, Kind::kPublish, 1});
  }
  for (std::size_t f = 0; f < scenario.faults.size(); ++f) events_.schedule(Event{scenario.faults[f].at, Kind::kFault, f});
  if (scenario.scheme == Scheme::kBroadcast && scenario.baseline.broadcast_root == BaselineSpec::Root::kRankZero) {
    const TopologySpec& t = scenario.topology;
    const double gpu_nics = std::max<std::uint32_t>(1, t.nics_per_node / t.gpus_per_node);
    const double share = std::min(1.0, gpu_nics / t.nics_per_node);
    if (share < 1) link_faults_.degrade(kTimeZero, trainer_nodes_[0], share, NodeLinkFaults::kForGood);
  }
}

std::uint64_t BaselineSimulation::part_bytes(std::uint32_t rank) const {
  // The shards whose index is rank mod T, as the swarm's trainer ranks hold them.
  const std::uint64_t size = scenario_.model.size, shard = scenario_.model.shard_size;
  const std::uint64_t shards = (size + shard - 1) / shard;
  std::uint64_t bytes = 0;
  for (std::uint64_t s = rank; s < shards; s += scenario_.model.trainer_ranks) bytes += std::min(shard, size - s * shard);
  return bytes;
}

// --------------------------------------------------------------------------
// Versions

void BaselineSimulation::publish(std::uint32_t version) {
  // The trainer's weights are the new version now: transfers of the old one
  // stop (its stored copy, in the storage scheme, is replaced too).
  std::vector<std::uint64_t> stale;
  for (const auto& [flow, t] : transfers_) stale.push_back(flow);
  std::sort(stale.begin(), stale.end());
  for (std::uint64_t flow : stale) network_.cancel_flow(now(), FlowId{flow});
  transfers_.clear();
  clear_rings();
  ledger_.publish(version, now());
  parts_received_.assign(worker_nodes_.size(), 0);
  parts_written_ = 0;
  switch (scenario_.scheme) {
    case Scheme::kDirectPull: start_pulls(version); break;
    case Scheme::kStorage:
      for (std::uint32_t r = 0; r < trainer_nodes_.size(); ++r) {
        if (part_bytes(r) > 0) start(trainer_nodes_[r], *topology_.storage_node(), part_bytes(r), {Transfer::Kind::kWrite, version, 0, r, 0});
        else ++parts_written_;
      }
      break;
    case Scheme::kBroadcast:
      if (now() >= rebuilt_at_) start_broadcast(version);  // else the rebuild's end starts it
      break;
    case Scheme::kSwarm: break;
  }
}

void BaselineSimulation::start_pulls(std::uint32_t version) {
  for (std::uint32_t w = 0; w < worker_nodes_.size(); ++w) {
    if (!alive(w)) continue;
    for (std::uint32_t r = 0; r < trainer_nodes_.size(); ++r) {
      if (part_bytes(r) > 0) {
        start(trainer_nodes_[r], worker_nodes_[w], part_bytes(r), {Transfer::Kind::kPull, version, w, r, 0});
      } else {
        worker_has_parts(version, w);
      }
    }
  }
}

void BaselineSimulation::start_reads(std::uint32_t version) {
  for (std::uint32_t w = 0; w < worker_nodes_.size(); ++w) {
    if (!alive(w) || ledger_.outcomes()[version - 1].worker_done[w]) continue;
    start(*topology_.storage_node(), worker_nodes_[w], scenario_.model.size, {Transfer::Kind::kRead, version, w, 0, 0});
  }
}

void BaselineSimulation::start_broadcast(std::uint32_t version) {
  const VersionOutcome& outcome = ledger_.outcomes()[version - 1];
  std::vector<std::uint32_t> order;
  for (std::uint32_t w = 0; w < worker_nodes_.size(); ++w) {
    if (alive(w) && !outcome.worker_done[w]) order.push_back(w);  // node order: hops inside a node use NVLink
  }
  std::fill(parts_received_.begin(), parts_received_.end(), 0);
  clear_rings();
  auto add_ring = [&](std::uint32_t source, std::uint64_t bytes, std::uint32_t parts) {
    Ring ring;
    ring.source = source;
    ring.bytes = bytes;
    ring.parts = parts;
    ring.order = order;
    const std::uint64_t chunk = scenario_.baseline.broadcast_chunk;
    ring.chunks = static_cast<std::uint32_t>((bytes + chunk - 1) / chunk);
    ring.received.assign(order.size(), 0);
    ring.sent.assign(order.size(), 0);
    ring.freed.assign(order.size(), 0);
    ring.busy.assign(order.size(), false);
    rings_.push_back(std::move(ring));
    if (bytes == 0) {
      for (std::uint32_t w : order) worker_has_parts(version, w, parts);
    }
  };
  if (scenario_.baseline.broadcast_root == BaselineSpec::Root::kRankZero) {
    add_ring(trainer_nodes_[0], scenario_.model.size, static_cast<std::uint32_t>(trainer_nodes_.size()));
  } else {
    for (std::uint32_t r = 0; r < trainer_nodes_.size(); ++r) add_ring(trainer_nodes_[r], part_bytes(r), 1);
  }
  for (std::uint32_t r = 0; r < rings_.size(); ++r) {
    if (!order.empty()) pump_ring(r, 0);
  }
}

void BaselineSimulation::pump_ring(std::uint32_t ring_index, std::uint32_t hop) {
  Ring& ring = rings_[ring_index];
  if (hop >= ring.order.size() || ring.busy[hop] || ring.sent[hop] == ring.chunks) return;
  // The sender forwards only chunks it holds whole (store and forward).
  if (hop > 0 && ring.received[hop - 1] <= ring.sent[hop]) return;
  // Fixed buffers: the receiver keeps each chunk until it has passed it on,
  // and has room for buffer_chunks (0: without bound); the sender counts a
  // chunk in flight as taking a slot, and a slot as free once the credit
  // is back. So a slow hop holds back the hops before it too, and a hop
  // carries at most buffer_chunks chunks per round trip, as NCCL's do.
  const std::uint32_t buffer = scenario_.baseline.broadcast_buffer_chunks;
  if (buffer > 0 && ring.sent[hop] - ring.freed[hop] >= buffer) return;
  const std::uint64_t chunk = scenario_.baseline.broadcast_chunk;
  const std::uint64_t offset = std::uint64_t{ring.sent[hop]} * chunk;
  const std::uint64_t bytes = std::min(chunk, ring.bytes - offset);
  ring.busy[hop] = true;
  ++ring.sent[hop];
  const Transfer transfer = hop_transfer(ring_index, hop);
  start(transfer.from_node, transfer.to_node, bytes, transfer);
}

BaselineSimulation::Transfer BaselineSimulation::hop_transfer(std::uint32_t ring_index, std::uint32_t hop) const {
  const Ring& ring = rings_[ring_index];
  Transfer transfer{Transfer::Kind::kChunk, ledger_.latest(), ring.order[hop]};
  transfer.ring = ring_index;
  transfer.hop = hop;
  transfer.rings_built = rings_built_;
  transfer.from_node = hop == 0 ? ring.source : worker_nodes_[ring.order[hop - 1]];
  transfer.to_node = worker_nodes_[ring.order[hop]];
  return transfer;
}

void BaselineSimulation::clear_rings() {
  rings_.clear();
  ++rings_built_;
}

FlowId BaselineSimulation::start(std::uint32_t from_node, std::uint32_t to_node, std::uint64_t bytes, Transfer transfer) {
  const Path path = topology_.path(from_node, to_node);
  const FlowId flow = network_.start_flow(now(), from_node, to_node, path.links, bytes);
  ++flows_started_;
  transfer.from_node = from_node;
  transfer.to_node = to_node;
  transfer.bytes = bytes;
  transfers_[flow.value] = transfer;
  if ((transfer.kind == Transfer::Kind::kPull || transfer.kind == Transfer::Kind::kWrite ||
       (transfer.kind == Transfer::Kind::kChunk && transfer.hop == 0))) {
    ledger_.add_publisher_bytes(transfer.version, bytes);
  }
  return flow;
}

void BaselineSimulation::flow_done(const Transfer& t) {
  if (t.kind == Transfer::Kind::kChunk && t.rings_built == rings_built_) {
    rings_[t.ring].busy[t.hop] = false;
    // The hop's sender (a worker, past the first hop) has passed a chunk on.
    if (t.hop > 0) send_credit(hop_transfer(t.ring, t.hop - 1));
    pump_ring(t.ring, t.hop);
  }
  deliver_later(t, false);
}

void BaselineSimulation::deliver_later(const Transfer& t, bool credit) {
  const std::uint64_t number = next_in_transit_++;
  in_transit_.emplace(number, InTransit{t, credit});
  events_.schedule(Event{now() + topology_.latency(t.from_node, t.to_node), Kind::kArrival, number});
}

void BaselineSimulation::send_credit(const Transfer& hop_transfer) { deliver_later(hop_transfer, true); }

void BaselineSimulation::chunk_arrived(const Transfer& t) {
  if (t.rings_built != rings_built_) return;  // the ring was stopped
  Ring& ring = rings_[t.ring];
  const bool complete = ++ring.received[t.hop] == ring.chunks;
  // The last worker takes each chunk out of its buffer at once.
  if (t.hop + 1 == ring.order.size()) send_credit(t);
  pump_ring(t.ring, t.hop + 1);
  if (complete) worker_has_parts(t.version, t.worker, ring.parts);
}

void BaselineSimulation::transfer_done(const Transfer& t) {
  if (t.version != ledger_.latest()) return;  // a version given up on
  switch (t.kind) {
    case Transfer::Kind::kPull: worker_has_parts(t.version, t.worker); break;
    case Transfer::Kind::kWrite:
      if (++parts_written_ == trainer_nodes_.size()) {
        ledger_.trainer_free(t.version, now());
        start_reads(t.version);
      }
      break;
    case Transfer::Kind::kRead:
      parts_received_[t.worker] = static_cast<std::uint32_t>(trainer_nodes_.size()) - 1;
      worker_has_parts(t.version, t.worker);
      break;
    case Transfer::Kind::kChunk: chunk_arrived(t); break;
  }
}

void BaselineSimulation::worker_has_parts(std::uint32_t version, std::uint32_t worker, std::uint32_t parts) {
  if (!alive(worker)) return;
  parts_received_[worker] += parts;
  if (parts_received_[worker] < trainer_nodes_.size()) return;
  ledger_.worker_done(version, worker, now());
  if (scenario_.scheme != Scheme::kStorage && ledger_.all_hold(version, [this](std::size_t w) { return alive(w); })) {
    ledger_.trainer_free(version, now());
  }
  advance_workload();
}

void BaselineSimulation::advance_workload() {
  switch (ledger_.next([this](std::size_t w) { return alive(w); }, joins_done_ < scenario_.workload.joins.size())) {
    case VersionLedger::Next::kPublishNext: events_.schedule(Event{now(), Kind::kPublish, ledger_.latest() + 1u}); break;
    case VersionLedger::Next::kFinished: finished_ = true; break;
    case VersionLedger::Next::kWait: break;
  }
}

// --------------------------------------------------------------------------
// Faults

void BaselineSimulation::crash_node(std::uint32_t node) {
  bool any = false;
  for (std::uint32_t w = 0; w < worker_nodes_.size(); ++w) {
    if (worker_nodes_[w] == node && alive(w)) {
      worker_alive_[w] = false;
      ledger_.worker_left(w, now());
      any = true;
    }
  }
  if (!any) return;  // trainer nodes do not crash in the baselines
  std::vector<std::uint64_t> stopped;
  for (const auto& [flow, t] : transfers_) {
    if (t.kind != Transfer::Kind::kWrite && !alive(t.worker)) stopped.push_back(flow);
  }
  std::sort(stopped.begin(), stopped.end());  // deterministic order
  for (std::uint64_t flow : stopped) {
    network_.cancel_flow(now(), FlowId{flow});
    transfers_.erase(flow);
  }
  if (scenario_.scheme == Scheme::kBroadcast) rebuild_group();  // a broken ring stops the whole collective
  advance_workload();
}

void BaselineSimulation::rebuild_group() {
  std::vector<std::uint64_t> stopped;
  for (const auto& [flow, t] : transfers_) {
    if (t.kind == Transfer::Kind::kChunk) stopped.push_back(flow);
  }
  std::sort(stopped.begin(), stopped.end());
  for (std::uint64_t flow : stopped) {
    network_.cancel_flow(now(), FlowId{flow});
    transfers_.erase(flow);
  }
  clear_rings();
  rebuilt_at_ = now() + scenario_.baseline.broadcast_rebuild;
  if (ledger_.latest() > 0) events_.schedule(Event{rebuilt_at_, Kind::kRebroadcast, ledger_.latest()});
}

void BaselineSimulation::join(std::size_t index) {
  ++joins_done_;
  const std::uint32_t version = ledger_.latest();
  for (std::size_t w = join_first_worker_[index]; w < join_first_worker_[index + 1]; ++w) {
    worker_alive_[w] = true;
    ledger_.worker_joined(w, now());
    if (w < parts_received_.size()) parts_received_[w] = 0;
    if (version == 0) continue;
    if (scenario_.scheme == Scheme::kDirectPull) {
      for (std::uint32_t r = 0; r < trainer_nodes_.size(); ++r) {
        if (part_bytes(r) > 0) start(trainer_nodes_[r], worker_nodes_[w], part_bytes(r), {Transfer::Kind::kPull, version, static_cast<std::uint32_t>(w), r, 0});
      }
    } else if (scenario_.scheme == Scheme::kStorage && parts_written_ == trainer_nodes_.size()) {
      start(*topology_.storage_node(), worker_nodes_[w], scenario_.model.size, {Transfer::Kind::kRead, version, static_cast<std::uint32_t>(w), 0, 0});
    }
  }
  if (scenario_.scheme == Scheme::kBroadcast) rebuild_group();  // the static group must grow: stop the world
  advance_workload();
}

// --------------------------------------------------------------------------
// Running

void BaselineSimulation::run_events_due(TimePoint now) {
  events_.run_until(now, [this](Event& e) {
    ++events_processed_;
    switch (e.kind) {
      case Kind::kPublish: publish(static_cast<std::uint32_t>(e.number)); break;
      case Kind::kRebroadcast:
        // The last rebuild's event starts the collective (an earlier one was
        // overtaken), with the newest version.
        if (ledger_.latest() > 0 && this->now() >= rebuilt_at_) start_broadcast(ledger_.latest());
        break;
      case Kind::kJoin: join(e.number); break;
      case Kind::kFault: {
        const FaultSpec& f = scenario_.faults[e.number];
        if (f.kind == FaultSpec::Kind::kCrashNode) {
          crash_node(f.node);
        } else if (f.rate_fraction < 1) {  // the baselines do not hash: a slow hasher costs them nothing
          const TimePoint until = link_faults_.degrade(this->now(), f.node, f.rate_fraction, f.length);
          if (until != kTimeNever) events_.schedule(Event{until, Kind::kLinkRestore, f.node});
        }
        break;
      }
      case Kind::kLinkRestore: link_faults_.restore(this->now(), static_cast<std::uint32_t>(e.number)); break;
      case Kind::kArrival: {
        auto it = in_transit_.find(e.number);
        const InTransit item = std::move(it->second);
        in_transit_.erase(it);
        if (!item.credit) {
          transfer_done(item.transfer);
        } else if (item.transfer.rings_built == rings_built_) {
          ++rings_[item.transfer.ring].freed[item.transfer.hop];
          pump_ring(item.transfer.ring, item.transfer.hop);
        }
        break;
      }
    }
  });
  if (progress_ && throttle_.due()) progress_(*this);
}

void BaselineSimulation::on_flows_done(TimePoint now, std::span<const FlowId> flows) {
  events_.advance_to(now);
  ++events_processed_;
  for (FlowId flow : flows) {
    auto it = transfers_.find(flow.value);
    if (it == transfers_.end()) continue;
    const Transfer t = it->second;
    transfers_.erase(it);
    for (LinkId link : topology_.path(t.from_node, t.to_node).links) timeline_.add(now, topology_.link_class(link), t.bytes);
    flow_done(t);
  }
}

SimulationResult BaselineSimulation::run(const std::function<void(const BaselineSimulation&)>& progress) {
  progress_ = progress;
  const RunEnd end = network_.run(*this, kTimeZero + scenario_.time_limit);
  events_.advance_to(end.at);
  if (progress) progress(*this);
  SimulationResult result = SimulationResult::of_run(end, finished_, ledger_, timeline_, network_, worker_nodes_);
  result.events = events_processed_;
  result.flows = flows_started_;
  result.trainer_ranks = trainer_nodes_.size();
  return result;
}

}  // namespace tensorhub::sim
