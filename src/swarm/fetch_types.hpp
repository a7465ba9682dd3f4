// The fetch side's vocabulary: its configuration, the actions a
// FetchSession hands its driver, its progress and its timers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>

#include "core/time.hpp"
#include "swarm/request_ids.hpp"
#include "swarm/shard_layout.hpp"
#include "tensorhub/ids.hpp"
#include "tensorhub/status.hpp"

namespace tensorhub::swarm {

struct FetchConfig {
  std::uint32_t block_size = 1u << 20;       // the unit of a request
  std::size_t max_neighbours = 16;           // data connections for this version (host mates may exceed it)
  std::size_t random_neighbours = 2;         // of those, chosen at random for diversity
  std::size_t max_candidates = 1024;         // known holders kept to choose neighbours from (>= 4)
  std::size_t pipeline_blocks = 8;           // requests in flight per neighbour
  std::size_t max_wan_requests = 8;          // requests in flight across the WAN, all neighbours
  Duration request_timeout = std::chrono::milliseconds(800);          // a holder silent this long loses its requests to others
  Duration connect_timeout = std::chrono::seconds(2);
  int max_bad_shards = 2;                    // then the sender is dropped and avoided
  std::size_t endgame_duplicates = 2;        // holders asked for one block in endgame (at most 4)
  bool starts_choked = false;                // wait for an unchoke before requesting
  Duration starvation_timeout = std::chrono::seconds(5);          // a shard nobody reachable holds fails the fetch after this
  // Short of its slot share (set_slot_share), probe this many more candidates
  // at a time for a free upload slot, each given up unanswered after
  // slot_probe_after (0: never probe).
  std::size_t slot_probes = 2;
  Duration slot_probe_after = std::chrono::milliseconds(2);
  // A payload landing slower than this on average (after the stall limit's
  // grace) is given up with its connection: a sender that drips bytes must
  // not keep its block from the others.
  double min_landing_bytes_per_second = 256 * 1024;
};

// A landing payload that has made no progress for this many request
// timeouts is stalled (a driver that reports no progress: since it began),
// and so is one landing longer than that plus its length at
// FetchConfig::min_landing_bytes_per_second (Landings).
inline constexpr int kLandingLimitTimeouts = 3;

// --- actions for the driver ---
struct ConnectAction {
  PeerId peer;
};
struct DisconnectAction {
  PeerId peer;
  std::string reason;
};
// Stop fetching this version from the neighbour (it cannot help), keeping
// the connection: it may serve or fetch other things.
struct ReleaseAction {
  PeerId peer;
};
struct RequestAction {
  PeerId peer;
  RequestId request_id;  // unique among this peer's requests in flight (set_request_ids)
  ShardIndex shard;
  BlockIndex block;
  std::uint64_t offset = 0;  // in the image
  std::uint32_t length = 0;
};
struct CancelAction {
  PeerId peer;
  RequestId request_id;
  ShardIndex shard;
  BlockIndex block;
};
struct VerifyAction {
  ShardIndex shard;
};
struct AnnounceAction {  // HAVE to every neighbour
  ShardIndex shard;
};
// This fetch has begun bringing the shard across its host's NIC from a
// holder in its datacenter: tell the host mates fetching from us, so they
// leave it to us.
struct ClaimAction {
  ShardIndex shard;
};
// The claim is withdrawn: this fetch has no holder beyond the host serving
// it that holds the shard now (choked, or the holder went). Tell the same
// mates as the claim.
struct UnclaimAction {
  ShardIndex shard;
};
// Hand the holder's unchoke back (not interested): this fetch holds its
// slot share already (docs/swarm-policy.md, the slot share).
struct DeclineSlotAction {
  PeerId peer;
};
// Ask a holder whose unchoke was handed back for a slot again (interested).
struct AskSlotAgainAction {
  PeerId peer;
};
struct DoneAction {
  Status status;  // ok, or why the fetch failed
};
using FetchAction =
    std::variant<ConnectAction, DisconnectAction, ReleaseAction, RequestAction, CancelAction, VerifyAction, AnnounceAction,
                 ClaimAction, UnclaimAction, DeclineSlotAction, AskSlotAgainAction, DoneAction>;

struct FetchProgress {
  std::uint64_t bytes_verified = 0;
  std::uint64_t bytes_received = 0;
  std::uint32_t shards_verified = 0;
  std::uint32_t shards_total = 0;
  std::uint64_t bytes_from_wan = 0;
  std::size_t neighbours = 0;
  std::uint32_t bad_shards = 0;
  std::uint64_t requests_timed_out = 0;  // re-asked elsewhere (the first answer may still come: wasted)
  std::uint64_t duplicate_bytes = 0;     // blocks that arrived after another copy had
  bool endgame = false;
};

// The fetch's timers (FetchSession::timers names what sets each).
enum class FetchTimer {
  kConnect,           // a neighbour still connecting gives up
  kRequest,           // a request in flight counts as lost
  kEndgameDuplicate,  // a request in endgame is overdue for a second holder
  kStarvation,        // a shard nobody reachable holds fails the fetch
  kNeighbourSwap,     // starved at the neighbour limit: trade an idle neighbour
  kConnectBurst,      // new candidates wait for a burst of them to end
  kSlotProbe,         // short of the slot share: probe another candidate
  kWanIdle,           // idle long enough to pull across the WAN from any holder
  kWanDeferral,       // a shard deferred to a mate across the WAN may be asked again
  kMateClaim,         // with nothing in flight, a host mate's claim stops binding
  kReconnect,         // a holder whose connections keep failing is tried again
  kCount
};

}  // namespace tensorhub::swarm
