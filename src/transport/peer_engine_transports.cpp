// PeerEngine's side of the data transports: which transport carries a
// neighbour, the regions a transport registers with its NICs, and the
// transports' events (connections, messages, payloads) handed to the core.
#include "transport/peer_engine.hpp"
#include "transport/version_lease.hpp"

#if TENSORHUB_HAVE_RDMA
#include "rdma/rdma_transport.hpp"
#endif

namespace tensorhub::peer {

DataTransport& PeerEngine::transport_for(const PeerId&) {
#if TENSORHUB_HAVE_RDMA
  if (rdma_) return *rdma_;
#endif
  return *tcp_;
}

RdmaStatus PeerEngine::rdma_status() const {
#if TENSORHUB_HAVE_RDMA
  if (rdma_) return rdma_->status();
#endif
  return RdmaStatus{};
}

std::shared_ptr<void> PeerEngine::keep_version(const std::shared_ptr<LocalVersion>& v) {
  std::shared_ptr<VersionLease> lease = lease_of(v);
  ++lease->uses;
  // The use ends on the I/O thread, wherever the last holder drops it (and
  // not at all once the engine is gone: nothing waits on the lease then).
  return std::shared_ptr<void>(nullptr, [io = &io_, alive = std::weak_ptr<int>(alive_), lease](void*) {
    if (alive.lock()) asio::post(*io, [lease] { lease->end_use(); });
  });
}

std::optional<HeldRegions> PeerEngine::nic_regions(const std::shared_ptr<LocalVersion>& v,
                                                   std::vector<std::span<std::byte>> regions) {
  HeldRegions out;
  const MemoryDomain::NicAccess access = v->domain->nic_access();
  if (access == MemoryDomain::NicAccess::kNone) return std::nullopt;
  if (access == MemoryDomain::NicAccess::kDmaBuf) {
    // The domain outlives the version, which `keep` holds until the
    // registration is made.
    out.make_dma_bufs = [domain = v->domain, regions](std::vector<DmaBuf>& bufs) {
      for (std::span<std::byte> r : regions) {
        DmaBuf buf;
        TENSORHUB_RETURN_IF_ERROR(domain->export_dma_buf(r, buf));
        bufs.push_back(std::move(buf));
      }
      return Status::ok();
    };
  }
  out.regions = std::move(regions);
  out.keep = keep_version(v);
  out.pci_bus_id = v->domain->pci_bus_id();
  return out;
}

std::optional<HeldRegions> PeerEngine::served_regions(const ManifestId& version_id) {
  auto v = core_->find(version_id);
  if (!v || !v->served() || v->memory.empty()) return std::nullopt;
  // A selection's memory is mostly sparse scratch, one region a run:
  // registering it would pin every page. It moves over TCP.
  if (!v->whole()) return std::nullopt;
  // A view served from a part is a gather list over the part's memory, a
  // region a run (a row, for a row-parallel rank's columns): registering
  // each is no better than per-row READs. It moves over TCP, gathered.
  if (v->served_from) return std::nullopt;
  // Registered for remote reads only: nothing writes through these.
  std::vector<std::span<std::byte>> regions;
  for (const auto& r : v->memory.regions()) regions.emplace_back(const_cast<std::byte*>(r.data()), r.size());
  return nic_regions(v, std::move(regions));
}

std::optional<HeldRegions> PeerEngine::landing_regions(const ManifestId& version_id) {
  auto v = core_->find(version_id);
  if (!v || v->destination.empty() || !v->whole()) return std::nullopt;  // a selection: as above
  if (v->state != VersionState::kFetching) return std::nullopt;
  return nic_regions(v, v->destination.regions());
}

void PeerEngine::read_destination(const PeerId& peer, const swarm::SwarmMessage& header,
                                  std::vector<std::span<std::byte>>& out) {
  // Straight into the version's memory, GPU memory too: the NIC writes it,
  // and the shard's check on the device follows a flush.
  begin_landing(peer, header, /*staged=*/false, out);
}

void PeerEngine::on_connected(const PeerId& peer) {
  if (closed_) return;
  core_->on_connected(now(), peer);
  pump();
}

void PeerEngine::on_connect_failed(const PeerId& peer) {
  if (closed_) return;
  core_->on_connect_failed(now(), peer);
  pump();
}

void PeerEngine::on_disconnected(const PeerId& peer) {
  if (closed_) return;
  staged_.drop_from(peer);
  core_->on_disconnected(now(), peer);
  pump();
}

void PeerEngine::on_message(const PeerId& peer, const swarm::SwarmMessage& message) {
  if (closed_ || message.type == swarm::MessageType::kTransport) return;  // a transport's own, without its transport
  core_->on_message(now(), peer, message);
  pump();
}

void PeerEngine::piece_destination(const PeerId& peer, const swarm::SwarmMessage& header,
                                   std::vector<std::span<std::byte>>& out) {
  begin_landing(peer, header, /*staged=*/true, out);
}

void PeerEngine::begin_landing(const PeerId& peer, const swarm::SwarmMessage& header, bool staged,
                               std::vector<std::span<std::byte>>& out) {
  if (closed_) return;
  const auto landing = core_->landing_for(core_->pieces(
      now(), [&](swarm::PiecePath& path, TimePoint at) { return path.begin_piece(at, peer, header); }));
  arm_timer();  // the landing has a deadline
  if (!landing) return;
  if (staged && !landing->version->domain->receives_in_place()) return stage_payload(peer, header, *landing, out);
  landing->version->destination.pieces(landing->offset, landing->length, out);
}

void PeerEngine::on_piece(const PeerId& peer, const swarm::SwarmMessage& header, bool stored) {
  if (closed_) return;
  if (end_staged_payload(peer, header, stored)) return;
  core_->pieces(now(), [&](swarm::PiecePath& path, TimePoint at) { path.on_piece(at, peer, header, stored); });
  pump();
}

void PeerEngine::on_piece_lost(const PeerId& peer, const swarm::SwarmMessage& header) {
  if (closed_) return;
  core_->pieces(now(), [&](swarm::PiecePath& path, TimePoint at) { path.on_piece_not_kept(at, peer, header); });
  pump();
}

void PeerEngine::on_piece_progress(const PeerId& peer, const swarm::SwarmMessage& header) {
  if (closed_) return;
  core_->pieces(now(), [&](swarm::PiecePath& path, TimePoint at) { path.on_piece_progress(at, peer, header); });
  arm_timer();  // the landing's deadline moved
}

}  // namespace tensorhub::peer
