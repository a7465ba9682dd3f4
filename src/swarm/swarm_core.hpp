// A peer's whole data-plane brain, with no I/O: the versions it serves and
// fetches, one connection per neighbour shared by all versions, the neighbour
// protocol (interest, bitfields, HAVEs, choking, requests, refusals), upload
// slots per version, and a FetchSession per version being fetched.
//
// The driver (the runtime, or a test network) opens and closes connections,
// carries messages, moves piece payloads between memory and the wire, hashes
// shards when asked, and feeds everything back with the current time.
// Manifests are exchanged by the layer above; this core sees versions only
// as a layout and a bitfield.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "core/action_queue.hpp"
#include "core/bitfield.hpp"
#include "core/time.hpp"
#include "core/timer_table.hpp"
#include "swarm/fetch_session.hpp"
#include "swarm/piece_path.hpp"
#include "swarm/location_book.hpp"
#include "swarm/seed_scheduler.hpp"
#include "swarm/serve_session.hpp"
#include "swarm/swarm_actions.hpp"
#include "swarm/swarm_messages.hpp"
#include "swarm/topology.hpp"
#include "swarm/upload_slots.hpp"
#include "tensorhub/ids.hpp"
#include "tensorhub/status.hpp"

namespace tensorhub::swarm {

struct SwarmConfig {
  FetchConfig fetch;
  // Requesters served at once, per version, per host: the peers on one
  // host (by the location book) divide them, at least one each, and serve
  // their host mates outside them (the NIC they share out is not crossed).
  std::size_t upload_slots = 8;
  Duration slot_rotation = std::chrono::seconds(2);     // then the longest-served yields to the next
  // false: a leech. What this core fetches it shows and serves to nobody
  // (an empty bitfield, requests refused), though it still tells a
  // super-seed what it holds; what it serves by serve() it serves. The
  // central baseline's workers run so, and peer exchange must not turn
  // them into a swarm.
  bool serve_fetched = true;
};


// The timers of one version in a SwarmCore (SwarmCore::version_timer
// names what sets each), and the core's own.
enum class SwarmTimer {
  kSlotRotation,  // the longest-served requester yields its upload slot (UploadSlots)
  kFinishing,     // a super-seed's requester whose turn is over is choked
  kReveal,        // the super-seed reveals more, or again (SeedScheduler)
  kSilenceCheck,  // the super-seed looks for requesters gone silent
  kFetch,         // the fetch's own timers (FetchSession::timers)
  kLandingStall,  // the core's: a payload stalled mid-way closes its connection
  kCount
};

class SwarmCore final : public PiecePath, private ServePeers {
 public:
  // `locations`: where peers sit, shared with other cores that see the same
  // world (the simulator's); nullptr: this core keeps a book of its own.
  SwarmCore(SwarmConfig config, Location self, PeerId self_id, std::uint64_t seed,
            std::shared_ptr<LocationBook> locations = nullptr);
  ~SwarmCore() override;
  // Not copied or moved: its serve sessions point back at it.
  SwarmCore(const SwarmCore&) = delete;
  SwarmCore& operator=(const SwarmCore&) = delete;

  // Versions. `have` has one bit per shard of `layout`.
  enum class ServeMode {
    kPlain,      // advertise what we hold
    kSuperSeed,  // the publisher: reveal shards a few at a time (REQUIRES: have is complete)
  };
  void serve(TimePoint now, const ManifestId& version_id, const ShardLayout& layout, core::Bitfield have,
             ServeMode mode = ServeMode::kPlain);
  // `wanted`: the shards of a selection (FetchSession); empty: all.
  void fetch(TimePoint now, const ManifestId& version_id, const ShardLayout& layout, core::Bitfield have,
             core::Bitfield wanted = {});
  void stop(TimePoint now, const ManifestId& version_id);
  bool knows(const ManifestId& version_id) const { return versions_.count(version_id) != 0; }
  const core::Bitfield* have(const ManifestId& version_id) const;
  std::optional<FetchProgress> progress(const ManifestId& version_id) const;

  // What gossip says.
  // Writes to the book this core reads (shared ones too).
  void set_location(const PeerId& peer, const Location& location);
  // `complete`: gossip says the peer holds the whole version.
  void add_holder(TimePoint now, const ManifestId& version_id, const PeerId& peer, bool complete = false);
  void peer_gone(TimePoint now, const PeerId& peer);

  // Connections.
  void on_connected(TimePoint now, const PeerId& peer);
  void on_connect_failed(TimePoint now, const PeerId& peer);
  void on_disconnected(TimePoint now, const PeerId& peer);
  void on_message(TimePoint now, const PeerId& peer, const SwarmMessage& message);
  // PiecePath (piece_path.hpp): routed to the fetch session whose request
  // a piece answers.
  std::optional<PieceTarget> begin_piece(TimePoint now, const PeerId& peer, const SwarmMessage& header) override;
  void on_piece(TimePoint now, const PeerId& peer, const SwarmMessage& header, bool stored) override;
  void on_piece_not_kept(TimePoint now, const PeerId& peer, const SwarmMessage& header) override;
  void on_piece_progress(TimePoint now, const PeerId& peer, const SwarmMessage& header) override;
  void on_verified(TimePoint now, const ManifestId& version_id, ShardIndex shard, std::uint64_t fetch_serial,
                   bool good) override;

  // Runs the timers due at `now`: those of the versions whose earliest
  // timer is due, and nobody else's.
  void handle_timeout(TimePoint now);
  // O(log versions) after the versions touched since the last call: a peer
  // fetching a version in hundreds of parts holds hundreds of versions.
  TimePoint next_timeout() const;
  // Every timer of the core, the versions' taken together (O(versions):
  // for tests and invariant checks).
  core::TimerTable<SwarmTimer> timers() const;
  std::optional<SwarmAction> poll();

  // Piece payloads that arrived for requests already given up (timed out or
  // cancelled): bytes the links carried for nothing.
  std::uint64_t discarded_piece_bytes() const { return discarded_piece_bytes_; }

 private:
  struct Version {
    Version(ShardLayout l, core::Bitfield h) : layout(l), have(std::move(h)) {}
    ShardLayout layout;
    core::Bitfield have;
    std::unique_ptr<ServeSession> serve;  // never null; reads `have`
    std::unique_ptr<FetchSession> fetch;  // while fetching
    std::uint64_t fetch_serial = 0;       // names the fetch in progress (VerifyShard)
    std::optional<FetchProgress> finished;  // the fetch's last progress, once it is over
    std::set<PeerId> sources;             // neighbours we fetch it from
    // Its earliest timer when last looked at (its entry in deadlines_).
    mutable TimePoint deadline = kTimeNever;
  };
  struct Connection {
    bool open = false;
    std::set<ManifestId> pending;  // versions waiting for the connection to open
    TimePoint last_heard;  // its last message
  };

  void drain(TimePoint now, const ManifestId& id, Version& v);
  // The fetching side of on_message, for a version this peer fetches:
  // whether the fetch heard something its driver must act on (drain).
  // False also when the connection was dropped (forget_connection drained).
  bool fetch_message(TimePoint now, const PeerId& peer, const SwarmMessage& m, Version& v);
  // This peer's part of the host's upload slots: the peers on one host
  // share its NIC, so they divide config_.upload_slots among them (at
  // least one each), counted in the location book when a version starts.
  std::size_t upload_slots_here() const;
  void start_with(TimePoint now, const ManifestId& id, Version& v, const PeerId& peer);
  SwarmMessage interested(const ManifestId& id, const Version& v) const;
  void send(const PeerId& peer, SwarmMessage message);
  // The version (created, serving, when new): `offered` says whether it is
  // shown and served (false: fetched by a leech).
  Version& version(const ManifestId& id, const ShardLayout& layout, const core::Bitfield& have, bool offered);
  void forget_connection(TimePoint now, const PeerId& peer);
  // A piece's payload ended: its fetch session hears how (bytes that
  // answer nothing of ours are counted as discarded).
  void end_piece(TimePoint now, const PeerId& peer, const SwarmMessage& header, FetchSession::PieceEnd how);
  // Closes the connections of `senders`, which still land payloads of a
  // fetch that is over: its destination may be reused once the driver
  // hears so.
  void abort_landings(TimePoint now, const std::vector<PeerId>& senders, const std::string& reason);
  // The earliest a payload landing in any fetch counts as stalled.
  TimePoint next_landing_deadline() const;
  // When one of a version's timers comes (kTimeNever: it does not stand).
  TimePoint version_timer(const Version& v, SwarmTimer timer) const;
  // The earliest of a version's timers, its stalled landings' included.
  TimePoint version_deadline(const Version& v) const;
  // A version's timers may have moved: its deadline is looked at again
  // before the next timeout is read. Every method that reaches a version's
  // sessions touches it (forget_connection and peer_gone touch them all).
  void touch(const ManifestId& id) { touched_.insert(id); }
  void touch_all() { all_touched_ = true; }
  // Brings deadlines_ up to date with the touched versions.
  void refresh_deadlines() const;
  // ServePeers. How near a peer is; an unknown peer counts as remote (it is
  // never preferred over a known neighbour).
  Proximity proximity_of(const PeerId& peer) const override;
  const Location* location_of(const PeerId& peer) const override { return locations_->find(peer); }
  bool connection_open(const PeerId& peer) const override;
  std::optional<TimePoint> last_heard(const PeerId& peer) const override;
  // This peer's random stream for one purpose (`salt`) in one version.
  std::uint64_t version_seed(const ManifestId& id, std::uint64_t salt) const;

  SwarmConfig config_;
  Location self_;
  PeerId self_id_;
  std::uint64_t seed_;
  std::map<ManifestId, Version> versions_;
  // Each version's earliest timer, ordered, as of its last touch. A
  // version's timers are functions of its sessions' own state, which moves
  // only when a method reaches them (and touches the version), so the
  // entries are exact once refreshed.
  mutable std::set<std::pair<TimePoint, ManifestId>> deadlines_;
  mutable std::set<ManifestId> touched_;
  mutable bool all_touched_ = false;
  // Hashed: a publisher has a connection per fetcher (thousands), and every
  // message looks its connection up.
  std::unordered_map<PeerId, Connection> connections_;
  std::vector<PeerId> told_;  // reused by drain(): who hears of a shard we verified
  std::shared_ptr<LocationBook> locations_;  // never null
  core::ActionQueue<SwarmAction> actions_;
  std::uint64_t discarded_piece_bytes_ = 0;
  // Request ids, one counter over every version and connection: a
  // connection's requests in flight never share one.
  RequestIds request_ids_;  // every version's requests, from one
  std::uint64_t fetch_serials_ = 0;  // the last fetch's serial
  // The payloads landing now, over every version and connection.
};

}  // namespace tensorhub::swarm
