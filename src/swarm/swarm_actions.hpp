// What a SwarmCore asks its driver to do (SwarmCore::poll): open and close
// connections, send messages and pieces, drop queued pieces, verify shards,
// and hear of shards held and fetches finished.
#pragma once

#include <cstdint>
#include <string>
#include <variant>

#include "swarm/swarm_messages.hpp"
#include "tensorhub/ids.hpp"
#include "tensorhub/status.hpp"

namespace tensorhub::swarm {

struct OpenConnection {
  PeerId peer;
};
struct CloseConnection {
  PeerId peer;
  std::string reason;
};
struct SendMessage {
  PeerId peer;
  SwarmMessage message;
};
// Send `header` (a piece), then `length` bytes of the version's image from
// `offset`, straight from memory.
struct ServePiece {
  PeerId peer;
  SwarmMessage header;
  ManifestId version_id;
  std::uint64_t offset = 0;
  std::uint32_t length = 0;
};
// The requester was choked (or the version stopped): the pieces of this
// version queued for it and not yet being sent are dropped, since it has
// forgotten their requests (BitTorrent's choke semantics) and would only
// discard them: each slot rotation would send a request pipeline per choked
// requester for nothing. `fetch_ended`: the requester said it wants no
// more of the version (its fetch ended), so what it was sent no longer
// counts against its allowance (a fetch of the version again, after a
// release, starts afresh).
struct DropQueuedPieces {
  PeerId peer;
  ManifestId version_id;
  bool fetch_ended = false;
};
// Hash the shard and tell PiecePath::on_verified, with `fetch_serial`: it
// names this fetch of the version, so a result that comes back after the
// fetch ended (and another began) verifies nothing.
struct VerifyShard {
  ManifestId version_id;
  ShardIndex shard;
  std::uint64_t fetch_serial = 0;
};
// The shard failed verification: it is fetched again (for the operator's
// report and the version's count of bad shards).
struct ShardFailed {
  ManifestId version_id;
  ShardIndex shard;
};
struct ShardHeld {  // verified and now served; coarse progress for gossip
  ManifestId version_id;
  ShardIndex shard;
};
struct FetchFinished {
  ManifestId version_id;
  Status status;
};
using SwarmAction = std::variant<OpenConnection, CloseConnection, SendMessage, ServePiece, DropQueuedPieces, VerifyShard,
                                 ShardFailed, ShardHeld, FetchFinished>;

}  // namespace tensorhub::swarm
