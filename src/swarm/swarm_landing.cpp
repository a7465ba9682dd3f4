// SwarmCore's landing pieces: where an arriving payload goes, at most one
// payload per block at a time, and the stall limit of a payload that stops.
#include "swarm/swarm_core.hpp"

#include <algorithm>
#include <cassert>

namespace tensorhub::swarm {

std::optional<PieceTarget> SwarmCore::begin_piece(TimePoint now, const PeerId& peer, const SwarmMessage& header) {
  if (!connections_.count(peer) || landing_.lands(peer, header.request_id)) return std::nullopt;
  auto v = versions_.find(header.version_id);
  if (v == versions_.end() || !v->second.fetch) return std::nullopt;
  FetchSession& fetch = *v->second.fetch;
  const auto asked = fetch.request_of(peer, header.request_id);
  if (!asked || header.length != v->second.layout.block_length(asked->shard, asked->block)) return std::nullopt;
  // Two payloads writing one block could leave a liar's bytes over an
  // honest copy that has verified; one landing at a time cannot.
  if (!fetch.wants_block(asked->shard, asked->block) ||
      !landing_.begin(peer, header.request_id, LandingBlock{header.version_id, asked->shard, asked->block},
                      header.length, now)) {
    fetch.mark_superseded(peer, header.request_id);
    return std::nullopt;
  }
  fetch.on_block_landing(now, peer, asked->shard, asked->block);
  const ShardLayout& layout = v->second.layout;
  return PieceTarget{header.version_id,
                     layout.shard_offset(asked->shard) + std::uint64_t{asked->block.value} * layout.block_size,
                     header.length};
}

void SwarmCore::on_piece_progress(TimePoint now, const PeerId& peer, const SwarmMessage& header) {
  landing_.moved(peer, header.request_id, now);
}

void SwarmCore::on_piece(TimePoint now, const PeerId& peer, const SwarmMessage& header, bool stored) {
  end_piece(now, peer, header, stored, /*turned_away=*/false);
}

void SwarmCore::on_piece_not_kept(TimePoint now, const PeerId& peer, const SwarmMessage& header) {
  // Turned away here, as a block taken by another payload is: no blame.
  end_piece(now, peer, header, /*kept=*/false, /*turned_away=*/true);
}

void SwarmCore::end_piece(TimePoint now, const PeerId& peer, const SwarmMessage& header, bool kept, bool turned_away) {
  if (!connections_.count(peer)) return;
  // A payload that landed reaches its block through landing_, whatever
  // became of its request meanwhile (cancelled, choked, given up).
  if (const auto landed = landing_.end(peer, header.request_id)) {
    auto v = versions_.find(landed->version);
    if (v == versions_.end() || !v->second.fetch) return;
    FetchSession& fetch = *v->second.fetch;
    fetch.answered(peer, header.request_id);
    if (kept) {
      fetch.on_block(now, peer, landed->shard, landed->block);
    } else if (turned_away) {
      fetch.on_block_superseded(now, peer, landed->shard, landed->block);
    } else {
      fetch.on_block_refused(now, peer, landed->shard, landed->block);
    }
    drain(now, landed->version, v->second);
    return;
  }
  // One that never landed: read and discarded.
  auto v = versions_.find(header.version_id);
  const auto asked =
      v != versions_.end() && v->second.fetch ? v->second.fetch->request_of(peer, header.request_id) : std::nullopt;
  if (!asked) {
    discarded_piece_bytes_ += header.length;
    return;
  }
  v->second.fetch->answered(peer, header.request_id);
  if (asked->superseded || turned_away) {
    v->second.fetch->on_block_superseded(now, peer, asked->shard, asked->block);
  } else {
    v->second.fetch->on_block_refused(now, peer, asked->shard, asked->block);
  }
  drain(now, header.version_id, v->second);
}

void SwarmCore::abort_landings(TimePoint now, const ManifestId& id, const std::string& reason) {
  for (const PeerId& peer : landing_.senders_of(id)) {
    actions_.push(CloseConnection{peer, reason});
    forget_connection(now, peer);
  }
}

TimePoint SwarmCore::next_landing_deadline() const {
  return landing_.next_deadline();
}

}  // namespace tensorhub::swarm
