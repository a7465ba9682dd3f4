// SwarmCore's landing pieces: where an arriving payload goes, at most one
// payload per block at a time, and the stall limit of a payload that stops.
#include "swarm/swarm_core.hpp"

#include <algorithm>
#include <cassert>

namespace tensorhub::swarm {

std::optional<PieceTarget> SwarmCore::begin_piece(TimePoint now, const PeerId& peer, const SwarmMessage& header) {
  auto c = connections_.find(peer);
  if (c == connections_.end()) return std::nullopt;
  auto r = c->second.find_request(header.request_id);
  if (r == c->second.requests.end() || r->second.version_id != header.version_id || r->second.length != header.length ||
      r->second.landing) {
    return std::nullopt;
  }
  auto v = versions_.find(header.version_id);
  if (v == versions_.end() || !v->second.fetch) return std::nullopt;
  Outstanding& o = r->second;
  // Two payloads writing one block could leave a liar's bytes over an
  // honest copy that has verified; one landing at a time cannot.
  if (!v->second.fetch->wants_block(o.shard, o.block) || !landing_.begin(o.version_id, o.shard, o.block, o.length, now)) {
    o.superseded = true;
    return std::nullopt;
  }
  o.landing = true;
  v->second.fetch->on_block_landing(now, peer, o.shard, o.block);
  return PieceTarget{header.version_id, o.offset, o.length};
}

void SwarmCore::end_landing(const Outstanding& o) {
  if (o.landing) landing_.end(o.version_id, o.shard, o.block);
}

void SwarmCore::on_piece_progress(TimePoint now, const PeerId& peer, const SwarmMessage& header) {
  auto c = connections_.find(peer);
  if (c == connections_.end()) return;
  auto r = c->second.find_request(header.request_id);
  if (r == c->second.requests.end() || !r->second.landing) return;
  const Outstanding& o = r->second;
  landing_.moved(o.version_id, o.shard, o.block, now);
}

void SwarmCore::on_piece(TimePoint now, const PeerId& peer, const SwarmMessage& header, bool stored) {
  auto c = connections_.find(peer);
  if (c == connections_.end()) return;
  auto r = c->second.find_request(header.request_id);
  if (r == c->second.requests.end()) {
    discarded_piece_bytes_ += header.length;
    return;
  }
  const Outstanding o = r->second;
  c->second.requests.erase(r);
  end_landing(o);
  auto v = versions_.find(o.version_id);
  if (v == versions_.end() || !v->second.fetch) return;
  if (stored && o.landing) {
    v->second.fetch->on_block(now, peer, o.shard, o.block);
  } else if (o.superseded) {
    v->second.fetch->on_block_superseded(now, peer, o.shard, o.block);
  } else {
    v->second.fetch->on_block_refused(now, peer, o.shard, o.block);
  }
  drain(now, o.version_id, v->second);
}

void SwarmCore::on_piece_not_kept(TimePoint now, const PeerId& peer, const SwarmMessage& header) {
  if (auto c = connections_.find(peer); c != connections_.end()) {
    // Turned away here, as a block taken by another payload is: no blame.
    if (auto r = c->second.find_request(header.request_id); r != c->second.requests.end()) r->second.superseded = true;
  }
  on_piece(now, peer, header, false);
}

void SwarmCore::abort_landings(TimePoint now, const ManifestId& id, const std::string& reason) {
  if (landing_.empty()) return;
  std::vector<PeerId> landing_from;
  for (const auto& [peer, c] : connections_) {
    if (std::any_of(c.requests.begin(), c.requests.end(), [&](const auto& r) { return r.second.landing && r.second.version_id == id; })) {
      landing_from.push_back(peer);
    }
  }
  for (const PeerId& peer : landing_from) {
    actions_.push(CloseConnection{peer, reason});
    forget_connection(now, peer);
  }
}

TimePoint SwarmCore::next_landing_deadline() const {
  return landing_.next_deadline();
}

}  // namespace tensorhub::swarm
