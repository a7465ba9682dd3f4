// What a driver tells the owner of a piece's way as the piece arrives: its
// header (where the payload goes), its progress and its end. SwarmCore
// implements it, routing each piece to the FetchSession whose request it
// answers, which owns the way from request to verified shard; a PeerCore
// hands it to its driver for one call at a time (PeerCore::pieces).
#pragma once

#include <cstdint>
#include <optional>

#include "core/time.hpp"
#include "swarm/swarm_messages.hpp"
#include "tensorhub/ids.hpp"

namespace tensorhub::swarm {

// Where an arriving piece's payload belongs.
struct PieceTarget {
  ManifestId version_id;
  std::uint64_t offset = 0;
  std::uint32_t length = 0;
};

class PiecePath {
 public:
  virtual ~PiecePath() = default;

  // A piece's header has arrived and its payload follows: where to write
  // it, or nothing (discard it). From here until on_piece (or the
  // connection's end) the payload is *landing*: at most one payload per
  // block lands at a time, and never into a block already received or a
  // shard being verified, so bytes that verified stay as they were. A
  // landing payload keeps its request even when the fetch gives up on it
  // (it is on the wire already), and one that stalls past
  // kLandingLimitTimeouts request timeouts, or lands below the minimum
  // rate (Landings), closes its connection.
  // REQUIRES: the driver stops writing a payload when it closes the
  // connection (CloseConnection, or a close of its own before on_disconnected).
  virtual std::optional<PieceTarget> begin_piece(TimePoint now, const PeerId& peer, const SwarmMessage& header) = 0;
  // The payload begun by begin_piece is complete: `stored` when it went to
  // the target begin_piece gave.
  virtual void on_piece(TimePoint now, const PeerId& peer, const SwarmMessage& header, bool stored) = 0;
  // The payload begun by begin_piece arrived whole but could not be kept
  // here (its copy into GPU memory failed): the block is asked for again
  // and the holder is not blamed (its bytes count as duplicate_bytes).
  virtual void on_piece_not_kept(TimePoint now, const PeerId& peer, const SwarmMessage& header) = 0;
  // Bytes of the payload begun by begin_piece arrived: its stall limit
  // counts from now, so a slow payload keeps its block while one that
  // stopped (its holder frozen) gives it up after the limit.
  virtual void on_piece_progress(TimePoint now, const PeerId& peer, const SwarmMessage& header) = 0;
  // The shard a VerifyShard named was hashed: `good` when it matches the
  // manifest. Ignored unless `fetch_serial` names the version's fetch in
  // progress (a result that outlived its fetch verifies nothing).
  virtual void on_verified(TimePoint now, const ManifestId& version_id, ShardIndex shard, std::uint64_t fetch_serial,
                           bool good) = 0;
};

}  // namespace tensorhub::swarm
