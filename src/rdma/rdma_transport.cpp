// RdmaTransport: the READ transport beside TCP. This file holds its
// neighbours' sessions (queue pairs offered, connected, rebuilt, given up
// for TCP), grants, and the registration of versions off the I/O thread;
// the data path (requests into READs, completions) is rdma_transport_reads.cpp.
#include "rdma/rdma_transport.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>

#include "core/entropy.hpp"
#include "core/log.hpp"
#include "rdma/nic_affinity.hpp"
#include "rdma/read_plan.hpp"

namespace tensorhub::rdma {
namespace {

constexpr const char* kLog = "rdma";

std::string short_name(const PeerId& peer) { return peer.short_hex(); }

// By NIC of `places`: whether it is among the nearest to `memory` (all of
// them when none is known to be).
std::vector<bool> nearest_of(const std::vector<NicPlace>& places, const NicPlace& memory) {
  const NicRanking ranked = rank_nics(places, memory);
  std::vector<bool> out(places.size(), ranked.preferred == 0);
  for (std::size_t r = 0; r < ranked.preferred; ++r) {
    for (std::size_t i = 0; i < places.size(); ++i) {
      if (places[i].name == ranked.nics[r].name) out[i] = true;
    }
  }
  return out;
}

// The NUMA node of the page at `p`; -1 when it has none yet (memory not
// touched) or the kernel does not say.
int numa_node_of(const void* p) {
  void* page = const_cast<void*>(p);
  int status = -1;
  if (::syscall(SYS_move_pages, 0, 1UL, &page, nullptr, &status, 0) != 0) return -1;
  return status;
}

}  // namespace

std::unique_ptr<RdmaTransport> RdmaTransport::open(asio::io_context& io, TransportEvents& up, RdmaMemory& memory,
                                                   std::string& note, std::size_t queue_pairs, NicChoice choice) {
  auto nics = rdma::VerbsNic::open_active(note);
  if (nics.empty()) return nullptr;
  return std::unique_ptr<RdmaTransport>(new RdmaTransport(io, up, memory, std::move(nics), queue_pairs, choice));
}

RdmaTransport::RdmaTransport(asio::io_context& io, TransportEvents& up, RdmaMemory& memory,
                             std::vector<std::unique_ptr<rdma::VerbsNic>> nics, std::size_t queue_pairs,
                             const NicChoice& choice)
    : io_(io), queue_pairs_per_nic_(queue_pairs), up_(up), memory_(memory), nics_(std::move(nics)) {
  for (auto& nic : nics_) nic_list_.push_back(nic.get());
  // The NICs nearest the memory carry the READs: for memory whose place
  // is unknown, those nearest this CPU's node (the peer's buffers are mostly there).
  sysfs_root_ = choice.sysfs_root;
  memory_node_ = choice.memory_node;
  for (auto& nic : nics_) places_.push_back(nic_place(sysfs_root_, nic->name()));
  NicPlace memory_place;
  memory_place.numa_node = choice.memory_node;
  if (memory_place.numa_node < 0) {
    unsigned cpu = 0, node = 0;
    if (::getcpu(&cpu, &node) == 0) memory_place.numa_node = static_cast<int>(node);
  }
  preferred_ = nearest_of(places_, memory_place);
  nic_bytes_.assign(nics_.size(), 0);
  watches_.resize(nics_.size());
  for (std::size_t i = 0; i < nics_.size(); ++i) {
    // Duplicates: the descriptors close their own, the NICs theirs.
    watches_[i].completions = std::make_unique<asio::posix::stream_descriptor>(io_, ::dup(nics_[i]->completion_fd()));
    const int events = ::dup(nics_[i]->async_fd());
    const int flags = ::fcntl(events, F_GETFL);
    if (flags >= 0) ::fcntl(events, F_SETFL, flags | O_NONBLOCK);
    watches_[i].events = std::make_unique<asio::posix::stream_descriptor>(io_, events);
    watch(i);
    watch_events(i);
    TH_LOG_INFO(kLog, "RDMA READs over " << nics_[i]->name() << (preferred_[i] ? "" : " (not near the memory: unused)"));
  }
}

RdmaTransport::~RdmaTransport() { close(); }

const std::vector<bool>& RdmaTransport::preferred_for(const ManifestId& version_id) const {
  auto it = landing_nics_.find(version_id);
  return it == landing_nics_.end() ? preferred_ : it->second;
}

void RdmaTransport::close() {
  if (closed_) return;
  closed_ = true;
  for (auto& w : watches_) {
    std::error_code ec;
    if (w.completions) w.completions->close(ec);
    if (w.events) w.events->close(ec);
  }
  // Queue pairs first (no READ lands after), then registrations, then NICs.
  for (auto& [peer, n] : neighbours_) n.qps.clear();
  neighbours_.clear();
  blocks_.clear();
  reads_.clear();
  served_.clear();
  landing_.clear();
  registering_.clear();
  alive_.reset();
  watches_.clear();
  nic_list_.clear();
  nics_.clear();
}

// --------------------------------------------------------------------------
// Neighbours and their sessions

void RdmaTransport::send_session(const PeerId& peer, const rdma::RdmaMessage& message) {
  tcp_->send(peer, swarm::SwarmMessage::with_bytes(swarm::MessageType::kTransport, ManifestId{},
                                                   rdma::encode_rdma_message(message)));
}

bool RdmaTransport::make_queue_pairs(const PeerId& peer, Neighbour& n) {
  drop_queue_pairs(peer, n, /*report=*/true);  // READs in flight on the old ones are lost, not left dangling
  n.qp_nic.clear();
  std::vector<rdma::OfferedNic> nics;
  std::vector<rdma::OfferedQueuePair> offered;
  for (std::size_t i = 0; i < nics_.size(); ++i) {
    nics.push_back(nics_[i]->offered());
    if (n.faulted_nics.count(i)) continue;
    for (std::size_t q = 0; q < queue_pairs_per_nic_; ++q) {
      auto qp = rdma::RcQueuePair::create(*nics_[i], static_cast<std::uint32_t>(core::entropy64()));
      if (!qp) {
        use_tcp(peer, n, qp.status().message());
        return false;
      }
      offered.push_back((*qp)->offered(static_cast<std::uint8_t>(i)));
      n.qps.push_back(std::move(*qp));
      n.qp_nic.push_back(i);
    }
  }
  send_session(peer, rdma::RdmaMessage::offer(std::move(nics), std::move(offered)));
  // The neighbour's queue pairs are where its last offer put them: ours
  // connect to them at once; it reconnects its own to ours when our offer
  // arrives, and says ready. An offer never answers an offer.
  if (!n.their_offer) return true;
  arm_ready_timer(peer, n);
  return connect_to(peer, n, *n.their_offer);
}

void RdmaTransport::arm_ready_timer(const PeerId& peer, Neighbour& n) {
  if (!n.ready_timer) n.ready_timer = std::make_shared<asio::steady_timer>(io_);
  n.ready_timer->expires_after(kReadyLimit);
  n.ready_timer->async_wait([this, peer, timer = std::weak_ptr<asio::steady_timer>(n.ready_timer)](std::error_code ec) {
    if (ec || closed_ || timer.expired()) return;
    auto it = neighbours_.find(peer);
    if (it != neighbours_.end() && !it->second.they_ready && it->second.ready_timer == timer.lock()) {
      use_tcp(peer, it->second, "no ready within the limit after its offer");
    }
  });
}

bool RdmaTransport::connect_to(const PeerId& peer, Neighbour& n, const rdma::RdmaMessage& offer) {
  end_blocks(peer, n, /*report=*/true);  // READs queued on a queue pair being reset go without completions
  const std::size_t pairs = std::min(n.qps.size(), offer.queue_pairs.size());
  n.qps.resize(pairs);
  n.qp_nic.resize(pairs);
  n.their_qp_nic.clear();
  n.their_nics = offer.nics.size();
  for (std::size_t k = 0; k < pairs; ++k) {
    const rdma::OfferedQueuePair& theirs = offer.queue_pairs[k];
    if (Status s = n.qps[k]->reconnect(offer.nics[theirs.nic], theirs); !s.is_ok()) {
      use_tcp(peer, n, s.message());
      return false;
    }
    n.their_qp_nic.push_back(theirs.nic);
  }
  n.connected = pairs > 0;
  send_session(peer, rdma::RdmaMessage::ready());
  return true;
}

void RdmaTransport::drop_queue_pairs(const PeerId& peer, Neighbour& n, bool report) {
  end_blocks(peer, n, report);
  n.qps.clear();  // destroyed: their READs are over, landed or not
  n.connected = false;
  n.they_ready = false;
}

void RdmaTransport::end_blocks(const PeerId& peer, Neighbour& n, bool report) {
  std::vector<swarm::SwarmMessage> lost;
  for (auto it = blocks_.begin(); it != blocks_.end();) {
    if (it->second.peer != peer) {
      ++it;
      continue;
    }
    lost.push_back(it->second.header);
    it = blocks_.erase(it);
  }
  std::erase_if(reads_, [&](const auto& r) { return !blocks_.count(r.second.block); });
  n.planned.clear();
  if (report) report_lost(peer, std::move(lost));
}

void RdmaTransport::report_lost(const PeerId& peer, std::vector<swarm::SwarmMessage> lost) {
  // Later, on the I/O thread: the peer asks again at once, and its requests
  // must find this transport's state settled.
  if (lost.empty()) return;
  asio::post(io_, [this, peer, lost = std::move(lost)] {
    if (closed_) return;
    for (const auto& header : lost) up_.on_piece_lost(peer, header);
  });
}

void RdmaTransport::use_tcp(const PeerId& peer, Neighbour& n, const std::string& why) {
  if (!n.off_reason.empty()) return;
  n.off_reason = why.empty() ? "off" : why;
  TH_LOG_WARN(kLog, short_name(peer) << " moves to TCP: " << n.off_reason);
  drop_queue_pairs(peer, n, /*report=*/true);
  auto waiting = std::move(n.held);
  n.held.clear();
  waiting.insert(waiting.end(), n.waiting.begin(), n.waiting.end());
  n.waiting.clear();
  for (const auto& request : waiting) tcp_->send(peer, request);
}

void RdmaTransport::release_held(const PeerId& peer, Neighbour& n) {
  if (!reading(n)) return;
  for (auto it = n.held.begin(); it != n.held.end();) {
    const ManifestId& v = it->version_id;
    const Landing here = landing(v);
    if (n.refused.count(v) || here == Landing::kUnreachable) {
      tcp_->send(peer, *it);
    } else if (here == Landing::kReady && n.grants.count(v)) {
      n.waiting.push_back(*it);
    } else {
      if (!n.grants.count(v) && n.asked.insert(v).second) {
        send_session(peer, rdma::RdmaMessage::about(rdma::RdmaMessageKind::kAskGrant, v));
      }
      ++it;
      continue;
    }
    it = n.held.erase(it);
  }
}

bool RdmaTransport::reading(const Neighbour& n) const {
  return n.off_reason.empty() && n.connected && n.they_ready && n.health.usable() && !n.qps.empty();
}

void RdmaTransport::on_connected(const PeerId& peer) {
  if (!closed_) {
    if (auto old = neighbours_.find(peer); old != neighbours_.end()) {
      drop_queue_pairs(peer, old->second, /*report=*/false);  // a replaced link: its requests ended with it
      neighbours_.erase(old);
    }
    make_queue_pairs(peer, neighbours_[peer]);
  }
  up_.on_connected(peer);
}

void RdmaTransport::on_disconnected(const PeerId& peer) {
  if (auto it = neighbours_.find(peer); it != neighbours_.end()) {
    drop_queue_pairs(peer, it->second, /*report=*/false);  // the link's requests end with it
    neighbours_.erase(it);
  }
  up_.on_disconnected(peer);
}

void RdmaTransport::disconnect(const PeerId& peer, const std::string& reason) {
  if (auto it = neighbours_.find(peer); it != neighbours_.end()) {
    drop_queue_pairs(peer, it->second, /*report=*/false);
    neighbours_.erase(it);
  }
  tcp_->disconnect(peer, reason);
}

void RdmaTransport::on_message(const PeerId& peer, const swarm::SwarmMessage& message) {
  if (message.type != swarm::MessageType::kTransport) return up_.on_message(peer, message);
  auto decoded = rdma::decode_rdma_message(message.bytes);
  if (!decoded) {
    auto it = neighbours_.find(peer);
    if (it != neighbours_.end()) use_tcp(peer, it->second, "a malformed session message: " + decoded.status().message());
    return;
  }
  on_session(peer, *decoded);
}

void RdmaTransport::on_session(const PeerId& peer, const rdma::RdmaMessage& m) {
  auto it = neighbours_.find(peer);
  if (it == neighbours_.end() || closed_) return;
  Neighbour& n = it->second;
  switch (m.kind) {
    case rdma::RdmaMessageKind::kOffer: return on_offer(peer, n, m);
    case rdma::RdmaMessageKind::kReady:
      n.they_ready = true;
      if (n.ready_timer) n.ready_timer->cancel();
      return pump(peer, n);
    case rdma::RdmaMessageKind::kAskGrant: return on_ask_grant(peer, n, m.version_id);
    case rdma::RdmaMessageKind::kGrant: {
      if (!n.asked.erase(m.version_id)) return;  // not asked for: nothing is kept
      const bool keyed = std::all_of(m.regions.begin(), m.regions.end(),
                                     [&](const rdma::GrantRegion& g) { return g.rkeys.size() == n.their_nics; });
      if (!keyed || m.regions.empty()) {
        n.refused.insert(m.version_id);
        return pump(peer, n);
      }
      n.grants[m.version_id] = m.regions;
      return pump(peer, n);
    }
    case rdma::RdmaMessageKind::kNoGrant:
    case rdma::RdmaMessageKind::kRevoke:
      // Only about versions asked for or granted: the refused set stays
      // within what this side asked.
      if (!n.asked.erase(m.version_id) && !n.grants.erase(m.version_id)) return;
      n.refused.insert(m.version_id);
      return pump(peer, n);
  }
}

void RdmaTransport::on_offer(const PeerId& peer, Neighbour& n, const rdma::RdmaMessage& offer) {
  if (!n.off_reason.empty()) return;
  const auto now = std::chrono::steady_clock::now();
  while (!n.offers.empty() && now - n.offers.front() > std::chrono::minutes(1)) n.offers.pop_front();
  n.offers.push_back(now);
  if (n.offers.size() > kMaxOffersPerMinute) return use_tcp(peer, n, "too many offers");
  // The neighbour's queue pairs are new (at link open, or rebuilt after a
  // failure): ours reconnect to them; its ready follows its offer.
  n.their_offer = offer;
  n.offered = true;
  n.they_ready = false;
  arm_ready_timer(peer, n);
  if (n.qps.empty() || !connect_to(peer, n, offer)) return;
  pump(peer, n);
}

void RdmaTransport::on_ask_grant(const PeerId& peer, Neighbour& n, const ManifestId& version_id) {
  auto no = [&] { send_session(peer, rdma::RdmaMessage::about(rdma::RdmaMessageKind::kNoGrant, version_id)); };
  if (!n.off_reason.empty()) return no();
  if (auto found = served_.find(version_id); found != served_.end()) {
    n.granted.insert(version_id);
    ++grants_given_;
    return send_session(peer, rdma::RdmaMessage::grant(version_id, found->second.grant()));
  }
  // Registered off the I/O thread; the grant goes out when it is done.
  if (auto pending = registering_.find({version_id, false}); pending != registering_.end()) {
    pending->second.askers.insert(peer);
    return;
  }
  auto regions = memory_.served_regions(version_id);
  if (!regions) return no();
  registering_[{version_id, false}].askers.insert(peer);
  register_off_thread(version_id, /*landing=*/false, std::move(*regions));
}

void RdmaTransport::register_off_thread(const ManifestId& version_id, bool landing, HeldRegions regions) {
  const std::uint64_t job = next_job_++;
  registering_[{version_id, landing}].job = job;
  auto shared = std::make_shared<HeldRegions>(std::move(regions));
  memory_.run_off_thread([this, &io = io_, alive = std::weak_ptr<bool>(alive_), version_id, landing, job, shared,
                          nics = nic_list_, sysfs = sysfs_root_, places = places_, node = memory_node_]() mutable {
    std::vector<peer::DmaBuf> dma_bufs;
    const Status exported = shared->make_dma_bufs ? shared->make_dma_bufs(dma_bufs) : Status::ok();
    auto result = std::make_shared<Result<rdma::RegisteredRegions>>(
        exported ? rdma::RegisteredRegions::register_on(
                       nics, shared->regions, landing ? rdma::Access::kLocalWrite : rdma::Access::kRemoteRead, dma_bufs)
                 : Result<rdma::RegisteredRegions>(exported));
    // Where the landing's memory sits (sysfs, page tables: off the I/O
    // thread too), and so which NICs its READs take.
    std::optional<NicPlace> place;
    if (landing && !shared->pci_bus_id.empty()) {
      place = rdma::pci_place(sysfs, shared->pci_bus_id);
    } else if (landing && node < 0 && !shared->regions.empty() && !shared->regions.front().empty()) {
      if (const int at = numa_node_of(shared->regions.front().data()); at >= 0) place = NicPlace{"", at, ""};
    }
    auto nearest = std::make_shared<std::vector<bool>>(place ? nearest_of(places, *place) : std::vector<bool>{});
    asio::post(io, [this, alive, version_id, landing, job, result, shared, nearest] {
      // The memory stays kept (`shared`) until the registration is ours or gone.
      if (alive.expired() || closed_) return;
      on_registered(version_id, landing, job, std::move(*result), std::move(*nearest));
    });
  });
}

void RdmaTransport::on_registered(const ManifestId& version_id, bool landing, std::uint64_t job,
                                  Result<rdma::RegisteredRegions> registered, std::vector<bool> nics) {
  auto it = registering_.find({version_id, landing});
  if (it == registering_.end() || it->second.job != job) return;  // forgotten meanwhile: deregistered here
  const std::set<PeerId> askers = std::move(it->second.askers);
  registering_.erase(it);
  if (!registered) {
    TH_LOG_WARN(kLog, "cannot register " << (landing ? "a destination" : "a version") << " for READs: "
                                          << registered.status().message());
  }
  if (landing) {
    if (registered) {
      landing_.emplace(version_id, std::move(*registered));
      if (!nics.empty()) landing_nics_[version_id] = std::move(nics);
    } else {
      unreachable_.insert(version_id);
    }
    for (auto& [peer, n] : neighbours_) pump(peer, n);  // held requests move on: READs, or TCP
    return;
  }
  if (!registered) {
    // No grant for the askers (a neighbour asks once per version, so this
    // does not retry the registration in a loop).
    for (const PeerId& peer : askers) {
      if (neighbours_.count(peer)) send_session(peer, rdma::RdmaMessage::about(rdma::RdmaMessageKind::kNoGrant, version_id));
    }
    return;
  }
  served_.emplace(version_id, std::move(*registered));
  for (const PeerId& peer : askers) {
    auto n = neighbours_.find(peer);
    if (n == neighbours_.end()) continue;
    on_ask_grant(peer, n->second, version_id);  // grants now, or says no
  }
}

// --------------------------------------------------------------------------

void RdmaTransport::forget_version(const ManifestId& version_id) {
  for (auto& [peer, n] : neighbours_) {
    if (n.granted.erase(version_id)) send_session(peer, rdma::RdmaMessage::about(rdma::RdmaMessageKind::kRevoke, version_id));
    n.grants.erase(version_id);
    std::erase_if(n.held, [&](const swarm::SwarmMessage& w) { return w.version_id == version_id; });
    std::erase_if(n.waiting, [&](const swarm::SwarmMessage& w) { return w.version_id == version_id; });
    // READs landing in it: their queue pairs go (nothing lands after), and
    // the neighbour's are offered anew.
    const PeerId& from = peer;  // a structured binding: lambdas capture it by name only from C++20 on (clang 14 refuses)
    const bool landing_here = std::any_of(blocks_.begin(), blocks_.end(), [&](const auto& b) {
      return b.second.peer == from && b.second.header.version_id == version_id;
    });
    if (landing_here && n.off_reason.empty()) make_queue_pairs(peer, n);
  }
  served_.erase(version_id);   // returns once no READ copies from it
  landing_.erase(version_id);
  landing_nics_.erase(version_id);
  unreachable_.erase(version_id);
  // A registration being made now is dropped when it ends (it keeps the
  // memory until then, so the release waits for it).
  registering_.erase({version_id, false});
  registering_.erase({version_id, true});
}

RdmaStatus RdmaTransport::status() const {
  RdmaStatus s;
  for (std::size_t i = 0; i < nics_.size(); ++i) s.nics.push_back({nics_[i]->name(), preferred_[i], nic_bytes_[i]});
  for (const auto& [peer, n] : neighbours_) {
    RdmaStatus::Neighbour out;
    out.peer = peer;
    out.state = !n.off_reason.empty() ? "tcp (" + n.off_reason + ")" : reading(n) ? "reading" : "connecting";
    out.reads = n.reads;
    out.bytes = n.bytes;
    out.failed_reads = n.failed_reads;
    out.grants = n.grants.size();
    s.neighbours.push_back(std::move(out));
  }
  s.grants_given = grants_given_;
  s.reads = reads_done_;
  s.bytes_read = bytes_read_;
  s.failed_reads = reads_failed_;
  return s;
}

}  // namespace tensorhub::rdma
