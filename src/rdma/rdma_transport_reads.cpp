// RdmaTransport's data path: a request for a block of a granted version
// becomes READs planned over the holder's regions and our NICs, posted within
// the queue pairs' credits, and completed into on_piece (or on_piece_lost).
// The sessions, grants and registrations are in rdma_transport.cpp.
#include <algorithm>

#include "core/log.hpp"
#include "rdma/rdma_transport.hpp"
#include "rdma/read_plan.hpp"

namespace tensorhub::rdma {
namespace {

constexpr const char* kLog = "rdma";

std::string short_hex_of(const PeerId& peer) { return peer.short_hex(); }

}  // namespace

// --------------------------------------------------------------------------
// Requests and READs

void RdmaTransport::send(const PeerId& peer, const swarm::SwarmMessage& m) {
  auto it = neighbours_.find(peer);
  if (it == neighbours_.end() || closed_) return tcp_->send(peer, m);
  Neighbour& n = it->second;
  if (m.type == swarm::MessageType::kCancel) {
    // A request waiting for a credit is simply dropped; one whose READ is
    // posted lands anyway (the swarm core keeps a landing's request); one
    // that went over TCP is cancelled there.
    for (auto* queue : {&n.held, &n.waiting}) {
      const auto waiting = std::find_if(queue->begin(), queue->end(), [&](const swarm::SwarmMessage& w) {
        return w.request_id == m.request_id && w.version_id == m.version_id;
      });
      if (waiting != queue->end()) {
        queue->erase(waiting);
        return;
      }
    }
    for (const auto& [tag, b] : blocks_) {
      if (b.peer == peer && b.header.request_id == m.request_id) return;
    }
    return tcp_->send(peer, m);
  }
  if (m.type != swarm::MessageType::kRequest || !n.off_reason.empty() || n.refused.count(m.version_id) ||
      !n.offered || landing(m.version_id) == Landing::kUnreachable) {
    return tcp_->send(peer, m);
  }
  // The neighbour reads by RDMA (or its session is being rebuilt): the
  // request waits for the session and the version's grant.
  n.held.push_back(m);
  pump(peer, n);
}

RdmaTransport::Landing RdmaTransport::landing(const ManifestId& version_id) {
  if (landing_.count(version_id)) return Landing::kReady;
  if (unreachable_.count(version_id)) return Landing::kUnreachable;
  if (registering_.count({version_id, true})) return Landing::kPending;
  auto regions = memory_.landing_regions(version_id);
  if (!regions) {
    unreachable_.insert(version_id);
    return Landing::kUnreachable;
  }
  register_off_thread(version_id, /*landing=*/true, std::move(*regions));
  return Landing::kPending;
}

void RdmaTransport::pump(const PeerId& peer, Neighbour& n) {
  release_held(peer, n);
  if (!reading(n)) return;
  n.planned.resize(n.qps.size());
  // Credits each queue pair has left once its planned blocks are posted.
  std::vector<std::size_t> spare(n.qps.size());
  for (std::size_t k = 0; k < n.qps.size(); ++k) {
    std::size_t pledged = 0;
    for (std::uint64_t tag : n.planned[k]) {
      if (auto b = blocks_.find(tag); b != blocks_.end()) pledged += b->second.work.size();
    }
    spare[k] = n.qps[k]->credits() > pledged ? n.qps[k]->credits() - pledged : 0;
  }
  while (!n.waiting.empty()) {
    // The queue pair with the most to spare on a NIC near the block's
    // landing (or, where this neighbour has none there: those NICs faulted
    // towards it, any), NICs taken in turn on ties.
    const std::vector<bool>& preferred = preferred_for(n.waiting.front().version_id);
    const bool near = std::any_of(n.qp_nic.begin(), n.qp_nic.end(), [&](std::size_t nic) { return preferred[nic]; });
    std::size_t best = n.qps.size();
    for (std::size_t i = 0; i < n.qps.size(); ++i) {
      const std::size_t k = (n.next_qp + i) % n.qps.size();
      if (near && !preferred[n.qp_nic[k]]) continue;
      if (best == n.qps.size() || spare[k] > spare[best]) best = k;
    }
    if (best == n.qps.size() || spare[best] == 0) break;
    n.next_qp = (best + 1) % n.qps.size();
    swarm::SwarmMessage request = std::move(n.waiting.front());
    n.waiting.pop_front();
    const std::size_t reads = start_block(peer, n, request, best);
    spare[best] -= std::min(spare[best], reads);
  }
  for (std::size_t k = 0; k < n.qps.size(); ++k) post_planned(n, k);
}

std::size_t RdmaTransport::start_block(const PeerId& peer, Neighbour& n, const swarm::SwarmMessage& request,
                                       std::size_t k) {
  const swarm::SwarmMessage header = swarm::SwarmMessage::piece(request.version_id, request.request_id, request.length);
  std::vector<std::span<std::byte>> destination;
  memory_.read_destination(peer, header, destination);
  if (destination.empty()) {
    // The peer does not want it (received already, or landing from
    // another): as with a TCP piece it discards, the piece ends unstored.
    asio::post(io_, [this, peer, header] {
      if (!closed_) up_.on_piece(peer, header, false);
    });
    return 0;
  }
  const auto& grant = n.grants[request.version_id];
  auto found = landing_.find(request.version_id);
  const rdma::RegisteredRegions* local = found == landing_.end() ? nullptr : &found->second;
  rdma::VerbsNic& nic = n.qps[k]->nic();
  auto plan = rdma::plan_reads(grant, request.offset, request.length, destination, nic.max_sge());
  Block block;
  block.peer = peer;
  block.header = header;
  block.qp = k;
  bool covered = plan.is_ok() && local != nullptr;
  if (covered) {
    for (const rdma::PlannedRead& p : *plan) {
      rdma::ReadWork w;
      w.wr_id = next_wr_++;
      w.remote_addr = p.remote_addr;
      w.rkey = grant[p.region].rkeys[n.their_qp_nic[k]];
      for (const auto& s : p.local) {
        auto lkey = local->lkey(n.qp_nic[k], s.data(), s.size());
        if (!lkey) {
          covered = false;
          break;
        }
        w.local.push_back(ibv_sge{reinterpret_cast<std::uintptr_t>(s.data()), static_cast<std::uint32_t>(s.size()), *lkey});
      }
      block.work.push_back(std::move(w));
    }
  }
  if (!covered || block.work.size() > n.qps[k]->read_depth()) {
    // The grant does not hold the block, or the destination lies outside
    // the registered landing: this request cannot be READ. It is lost (and
    // asked for again); the version goes over TCP from this neighbour.
    TH_LOG_WARN(kLog, "a block of a granted version cannot be READ from " << short_hex_of(peer)
                                                                           << (plan.is_ok() ? "" : ": " + plan.status().message()));
    n.refused.insert(request.version_id);
    report_lost(peer, {header});
    return 0;
  }
  const std::uint64_t tag = next_tag_++;
  const std::size_t reads = block.work.size();
  block.reads_left = static_cast<std::uint32_t>(reads);
  blocks_.emplace(tag, std::move(block));
  n.planned[k].push_back(tag);
  return reads;
}

void RdmaTransport::post_planned(Neighbour& n, std::size_t k) {
  rdma::RcQueuePair* qp = n.qps[k].get();
  std::vector<rdma::ReadWork> batch;
  std::vector<std::uint64_t> tags;
  auto& planned = n.planned[k];
  while (!planned.empty()) {
    auto b = blocks_.find(planned.front());
    if (b == blocks_.end()) {
      planned.pop_front();
      continue;
    }
    if (batch.size() + b->second.work.size() > qp->credits()) break;
    for (auto& w : b->second.work) {
      reads_[w.wr_id] = Read{b->first, qp};
      batch.push_back(std::move(w));
    }
    b->second.work.clear();
    tags.push_back(b->first);
    planned.pop_front();
  }
  if (batch.empty()) return;
  std::size_t taken = 0;
  if (Status s = qp->post_reads(batch, &taken); !s.is_ok()) {
    // The READs not taken never complete: their blocks fail once the
    // taken ones have.
    TH_LOG_WARN(kLog, s.message());
    for (std::size_t i = taken; i < batch.size(); ++i) {
      auto r = reads_.find(batch[i].wr_id);
      if (r == reads_.end()) continue;
      auto b = blocks_.find(r->second.block);
      reads_.erase(r);
      if (b == blocks_.end()) continue;
      b->second.failed = true;
      b->second.cause = rdma::ReadFailure::kReconnect;
      if (--b->second.reads_left == 0) finish_block(b->first);
    }
  }
}

// --------------------------------------------------------------------------
// Completions

void RdmaTransport::watch(std::size_t nic) {
  watches_[nic].completions->async_wait(asio::posix::stream_descriptor::wait_read, [this, nic](std::error_code ec) {
    if (ec || closed_) return;
    on_completions(nic);
    watch(nic);
  });
}

void RdmaTransport::watch_events(std::size_t nic) {
  watches_[nic].events->async_wait(asio::posix::stream_descriptor::wait_read, [this, nic](std::error_code ec) {
    if (ec || closed_) return;
    ibv_async_event event{};
    while (ibv_get_async_event(nics_[nic]->context(), &event) == 0) {
      const ibv_event_type type = event.event_type;
      ibv_ack_async_event(&event);
      if (type == IBV_EVENT_PORT_ERR || type == IBV_EVENT_DEVICE_FATAL) {
        const std::string why = nics_[nic]->name() + ": " + ibv_event_type_str(type);
        for (auto& [peer, n] : neighbours_) use_tcp(peer, n, why);
      }
    }
    watch_events(nic);
  });
}

void RdmaTransport::on_completions(std::size_t nic) {
  completions_.clear();
  nics_[nic]->drain(completions_);
  std::set<PeerId> touched;
  for (const ibv_wc& wc : completions_) {
    auto r = reads_.find(wc.wr_id);
    if (r == reads_.end()) continue;  // of a block already ended (its queue pairs were dropped)
    const Read read = r->second;
    reads_.erase(r);
    read.qp->on_completion(wc.status == IBV_WC_SUCCESS);
    auto b = blocks_.find(read.block);
    if (b == blocks_.end()) continue;
    Block& block = b->second;
    if (wc.status != IBV_WC_SUCCESS) {
      const rdma::ReadFailure cause = rdma::classify_completion(wc.status);
      if (!block.failed || block.cause == rdma::ReadFailure::kFlushed) block.cause = cause;
      block.failed = true;
    }
    touched.insert(block.peer);
    if (--block.reads_left == 0) finish_block(read.block);
  }
  for (const PeerId& peer : touched) {
    auto it = neighbours_.find(peer);
    if (it != neighbours_.end()) pump(peer, it->second);
  }
}

void RdmaTransport::finish_block(std::uint64_t tag) {
  Block block = std::move(blocks_.at(tag));
  blocks_.erase(tag);
  auto it = neighbours_.find(block.peer);
  if (it == neighbours_.end()) return;
  Neighbour& n = it->second;
  if (!block.failed) {
    ++n.reads;
    n.bytes += block.header.length;
    ++reads_done_;
    bytes_read_ += block.header.length;
    if (block.qp < n.qp_nic.size()) nic_bytes_[n.qp_nic[block.qp]] += block.header.length;
    n.health.on_completion(rdma::ReadFailure::kNone);
    up_.on_piece(block.peer, block.header, true);
    return;
  }
  report_lost(block.peer, {block.header});
  if (block.cause == rdma::ReadFailure::kFlushed) return;  // the first error decides
  ++n.failed_reads;
  ++reads_failed_;
  TH_LOG_WARN(kLog, "a READ from " << short_hex_of(block.peer) << " failed (" << rdma::read_failure_name(block.cause) << ")");
  if (block.cause == rdma::ReadFailure::kOtherHolder) n.refused.insert(block.header.version_id);
  // The queue pair is in ERR: rebuild the neighbour's (both sides do, by
  // the offer), or give up on READs from it.
  const auto verdict = n.health.on_completion(block.cause);
  if (verdict == rdma::PathHealth::Verdict::kUseTcp) return use_tcp(block.peer, n, "READs keep failing");
  if (block.cause == rdma::ReadFailure::kOtherNic && block.qp < n.qp_nic.size()) {
    const std::size_t nic = n.qp_nic[block.qp];
    n.faulted_nics.insert(nic);
    if (n.faulted_nics.size() == nics_.size()) return use_tcp(block.peer, n, "a local fault on every NIC");
    TH_LOG_WARN(kLog, "READs from " << short_hex_of(block.peer) << " leave " << nics_[nic]->name() << " after a local fault");
  }
  make_queue_pairs(block.peer, n);
}

}  // namespace tensorhub::rdma
