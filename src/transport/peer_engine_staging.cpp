// PeerEngine's path for versions in memory that payloads are not received
// straight into (MemoryDomain::receives_in_place() false: GPU memory, and
// an output file): received payloads wait in the domain's payload stage (a
// staging ring) or, when it has none or none free, in a host buffer
// written through the domain, and the piece counts as stored only once its
// bytes are in the destination. For memory the host cannot touch (GPU
// memory; host_accessible() false), pieces served from such a version come
// from a host mirror made once it is complete; until then (or when mirrors
// are off) each is filled into a buffer of the domain's stage and sent from
// there, or, with none free, copied out on the work pool.
#include <cstring>

#include "core/log.hpp"
#include "transport/peer_engine.hpp"
#include "transport/version_lease.hpp"

namespace tensorhub::peer {
namespace {

constexpr const char* kLog = "peer";

// A piece served from bytes copied out of the version's memory.
struct CopiedPiece final : LeasedPiece {
  std::vector<std::byte> bytes;
};

// A piece served from a stage's buffer, which goes back once it has left.
struct StagedPiece final : LeasedPiece {
  PayloadStage* stage = nullptr;
  std::span<std::byte> buffer;
  void on_piece_sent(std::uint32_t length, bool sent) override {
    stage->give_back(buffer);
    LeasedPiece::on_piece_sent(length, sent);
  }
};

}  // namespace

void PeerEngine::stage_payload(const PeerId& peer, const swarm::SwarmMessage& header, const PieceLanding& landing,
                               std::vector<std::span<std::byte>>& out) {
  out.push_back(staged_.begin(peer, header.request_id, landing.version, landing.offset, landing.length));
}

bool PeerEngine::end_staged_payload(const PeerId& peer, const swarm::SwarmMessage& header, bool stored) {
  auto ended = staged_.end(peer, header.request_id);
  if (!ended) return false;
  StagedPayloads::Payload& p = *ended;
  if (stored && p.stage != nullptr) {
    std::shared_ptr<VersionLease> lease = lease_of(p.version);
    ++lease->uses;  // the copy writes the version's memory
    Status landed = copies_.begin(
        StageCopies::Copy{peer, header, p.stage, lease, false, {}, p.offset, p.length},
        [&](std::uint64_t tag) { return p.stage->land(p.buffer, p.version->destination, p.offset, p.length, tag); });
    if (landed.is_ok()) return true;
    lease->end_use();
    TH_LOG_WARN(kLog, "a payload for " << p.version->model << " v" << p.version->number
                                       << " could not land: " << landed.to_string());
    core_->pieces(now(), [&](swarm::PiecePath& path, TimePoint at) { path.on_piece_not_kept(at, peer, header); });
  } else if (p.stage != nullptr) {
    p.stage->give_back(p.buffer);
    core_->pieces(now(), [&](swarm::PiecePath& path, TimePoint at) { path.on_piece(at, peer, header, false); });
  } else if (Status written = stored ? p.version->domain->write(p.version->destination, p.offset, p.host)
                                       : Status::ok();
             !written.is_ok()) {
    // The destination refuses bytes (a full file system, the file removed):
    // asking again would fail again, so the fetch ends, naming why.
    core_->pieces(now(), [&](swarm::PiecePath& path, TimePoint at) { path.on_piece_not_kept(at, peer, header); });
    core_->on_local_write_failed(now(), p.version, written);
  } else {
    core_->pieces(now(), [&](swarm::PiecePath& path, TimePoint at) { path.on_piece(at, peer, header, stored); });
  }
  staged_.give_back_host(std::move(p.host));
  pump();
  return true;
}

void PeerEngine::on_copies_ended(std::vector<StageCopies::Ended> ended) {
  for (StageCopies::Ended& e : ended) {
    StageCopies::Copy& c = e.copy;
    if (c.serving) {
      send_filled(std::move(c), e.ok);
      continue;
    }
    c.lease->end_use();
    if (e.ok) {
      core_->pieces(now(), [&](swarm::PiecePath& path, TimePoint at) { path.on_piece(at, c.peer, c.header, true); });
      continue;
    }
    // The holder sent it whole: the failure is this side's, and the block
    // is asked for again without blame.
    TH_LOG_WARN(kLog, "a payload's copy into " << c.lease->version->model << " v" << c.lease->version->number
                                               << " failed; the block is fetched again");
    core_->pieces(now(), [&](swarm::PiecePath& path, TimePoint at) { path.on_piece_not_kept(at, c.peer, c.header); });
  }
  pump();
}

bool PeerEngine::serve_from_mirror(const swarm::ServePiece& s, const std::shared_ptr<LocalVersion>& version,
                                   const std::shared_ptr<VersionLease>& source) {
  if (!options_.mirror_gpu_versions) return false;
  if (source->mirror) {
    auto piece = std::make_shared<LeasedPiece>();
    piece->lease = source;
    piece->peer = s.peer;
    piece->offset = s.offset;
    const std::span<const std::byte> whole[] = {source->mirror->subspan(s.offset, s.length)};
    transport_for(s.peer).send_piece(s.peer, s.header, whole, std::move(piece));
    return true;
  }
  if (version->holds_all()) start_mirror(version, source);
  return false;
}

void PeerEngine::start_mirror(const std::shared_ptr<LocalVersion>& version, const std::shared_ptr<VersionLease>& source) {
  if (source->mirror_started) return;
  // Filled once, on the pool, while pieces go out staged or as copies; the
  // lease keeps the version's memory meanwhile.
  source->mirror_started = true;
  ++source->uses;
  pool_.submit([this, version, source] {
    auto mirror = version->domain->allocate_mirror(version->memory.size());
    if (mirror && !version->domain->read(version->memory, 0, *mirror)) mirror = nullptr;
    asio::post(io_, [this, version, source, mirror = std::move(mirror)] {
      source->end_use();
      if (closed_) return;
      if (!mirror) {
        TH_LOG_WARN(kLog, "no host mirror of " << version->model << " v" << version->number
                                               << ": its pieces are served from a copy each");
        return;
      }
      source->mirror = mirror;
      TH_LOG_INFO(kLog, "serving " << version->model << " v" << version->number << " from a host mirror of "
                                   << version->memory.size() << " bytes");
    });
  });
}

bool PeerEngine::serve_through_stage(const swarm::ServePiece& s, const std::shared_ptr<LocalVersion>& version,
                                     const std::shared_ptr<VersionLease>& source) {
  PayloadStage* stage = version->domain->payload_stage();
  if (stage == nullptr) return false;
  const std::span<std::byte> buffer = stage->take(s.length);
  if (buffer.empty()) return false;
  Status filling = copies_.begin(StageCopies::Copy{s.peer, s.header, stage, source, true, buffer, s.offset, s.length},
                                 [&](std::uint64_t tag) { return stage->fill(buffer, version->memory, s.offset, s.length, tag); });
  if (!filling.is_ok()) {
    stage->give_back(buffer);
    return false;
  }
  return true;
}

void PeerEngine::send_filled(StageCopies::Copy fill, bool filled) {
  if (!filled) {
    fill.stage->give_back(fill.buffer);
    fill.lease->piece_done(fill.peer, fill.offset, fill.length, false);
    return;
  }
  auto piece = std::make_shared<StagedPiece>();
  piece->lease = std::move(fill.lease);
  piece->peer = fill.peer;
  piece->offset = fill.offset;
  piece->stage = fill.stage;
  piece->buffer = fill.buffer;
  const std::span<const std::byte> whole[] = {fill.buffer.first(fill.length)};
  transport_for(fill.peer).send_piece(fill.peer, fill.header, whole, std::move(piece));
}

void PeerEngine::serve_copied_piece(const swarm::ServePiece& s, std::shared_ptr<LocalVersion> version,
                                    std::shared_ptr<VersionLease> source) {
  auto piece = std::make_shared<CopiedPiece>();
  piece->lease = std::move(source);
  piece->peer = s.peer;
  piece->offset = s.offset;
  const bool corrupt = internal_.corrupt_serving;
  // The copy runs on the pool (from GPU memory it is a device-to-host copy);
  // the version's lease, taken by the caller, keeps the memory meanwhile.
  pool_.submit([this, s, version = std::move(version), piece, corrupt] {
    piece->bytes.resize(s.length);
    const bool read = version->domain->read(version->memory, s.offset, piece->bytes);
    if (read && corrupt) piece->bytes[piece->bytes.size() / 2] ^= std::byte{0x01};
    asio::post(io_, [this, s, piece, read] {
      if (closed_ || !read) {
        piece->on_piece_sent(s.length, false);
        return;
      }
      const std::span<const std::byte> whole[] = {piece->bytes};
      transport_for(s.peer).send_piece(s.peer, s.header, whole, piece);
    });
  });
}

}  // namespace tensorhub::peer
