// FetchSession's pieces on their way in: a payload begins to land in the
// block its request asked for, moves, and ends (stored, failed or turned
// away), and refusals and deferrals answer requests whose payload never
// began. The session owns both the request and the landing, so a piece's
// way from request to verified shard has one owner.
#include "swarm/fetch_session.hpp"

namespace tensorhub::swarm {

std::optional<FetchSession::RequestedBlock> FetchSession::request_of(const PeerId& peer, RequestId request_id) const {
  const RequestTable::Request* r = requests_.find(peer, request_id);
  if (r == nullptr) return std::nullopt;
  return RequestedBlock{r->range.shard, layout_.first_block(r->range), r->superseded};
}

std::optional<std::uint64_t> FetchSession::begin_piece(TimePoint now, const PeerId& peer, RequestId request_id,
                                                       std::uint32_t length) {
  if (landings_.lands(peer, request_id)) return std::nullopt;
  const auto asked = request_of(peer, request_id);
  if (!asked || length != layout_.block_length(asked->shard, asked->block)) return std::nullopt;
  if (!wants_block(asked->shard, asked->block) ||
      !landings_.begin(peer, request_id, LandingBlock{asked->shard, asked->block}, length, now)) {
    mark_superseded(peer, request_id);
    return std::nullopt;
  }
  on_block_landing(now, peer, asked->shard, asked->block);
  return layout_.shard_offset(asked->shard) + std::uint64_t{asked->block.value} * layout_.block_size;
}

void FetchSession::piece_progress(TimePoint now, const PeerId& peer, RequestId request_id) {
  landings_.moved(peer, request_id, now);
}

bool FetchSession::end_piece(TimePoint now, const PeerId& peer, RequestId request_id, PieceEnd how) {
  if (const auto landed = landings_.end(peer, request_id)) {
    requests_.answered(peer, request_id);
    switch (how) {
      case PieceEnd::kStored: on_block(now, peer, landed->shard, landed->block); break;
      case PieceEnd::kNotKept: on_block_superseded(now, peer, landed->shard, landed->block); break;
      case PieceEnd::kNotStored: on_block_refused(now, peer, landed->shard, landed->block); break;
    }
    return true;
  }
  // One that never landed: read and discarded.
  const auto asked = request_of(peer, request_id);
  if (!asked) return false;
  requests_.answered(peer, request_id);
  if (asked->superseded || how == PieceEnd::kNotKept) {
    on_block_superseded(now, peer, asked->shard, asked->block);
  } else {
    on_block_refused(now, peer, asked->shard, asked->block);
  }
  return true;
}

bool FetchSession::on_answer(TimePoint now, const PeerId& peer, RequestId request_id, bool deferred) {
  if (landings_.lands(peer, request_id)) return false;  // the payload began: it answers
  const auto asked = request_of(peer, request_id);
  if (!asked) return false;
  requests_.answered(peer, request_id);
  if (deferred) {
    on_block_deferred(now, peer, asked->shard, asked->block);
  } else {
    on_block_refused(now, peer, asked->shard, asked->block);
  }
  return true;
}

}  // namespace tensorhub::swarm
