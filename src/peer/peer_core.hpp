// The peer core: one peer's whole policy with no I/O. It joins gossip (who
// is there, which heads exist, who holds what), head tracking (manifests,
// signatures, chains, equivocation), the versions this peer holds (state,
// progress, retention) and the swarm core (what to request and serve).
//
// Like the cores it drives, it takes the current time and events in and
// hands actions out (poll). Three drivers run it: the asio runtime
// (peer_engine), the deterministic in-process network of the tests
// (tests/support/peer_network), and the simulator (sim/swarm_simulation).
//
// The driver
//  - carries the swarm actions (connections, messages, pieces) over a data
//    transport, and reports connections, messages and pieces back;
//  - does the heavy work the core asks for (HashShard, CopyShards) off its
//    event thread and reports the results;
//  - hands memory back once no piece is being sent from it (ReleaseMemory);
//  - pumps the gossip core after GossipChanged, and feeds its member events.
//
// Memory is the driver's: it allocates a fetch's destination and passes it
// in; the core only says which bytes go where.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <tuple>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "core/action_queue.hpp"
#include "gossip/gossip_core.hpp"
#include "manifest/part_view.hpp"
#include "peer/group_book.hpp"
#include "peer/head_tracker.hpp"
#include "peer/local_version.hpp"
#include "peer/part_book.hpp"
#include "peer/possession_proofs.hpp"
#include "swarm/retention.hpp"
#include "swarm/swarm_core.hpp"

namespace tensorhub::peer {

struct PeerCoreConfig {
  swarm::SwarmConfig swarm;
  Location location;
  std::vector<PublicKey> trusted_publishers;  // manifests signed by others are refused
  swarm::RetentionPolicy retention;
  bool super_seed = true;  // a publisher reveals its shards a few at a time
  // Only versions hashed with BLAKE2b-256 are fetched (secure mode).
  bool require_secure_hash = false;
  // A manifest asked for and not here after this is asked of another peer
  // whose record names it.
  Duration manifest_retry = std::chrono::seconds(2);
};

// Decodes manifests that peers send. The simulator shares one that decodes
// each distinct manifest once for thousands of cores; the default decodes
// every time.
class ManifestDecoder {
 public:
  virtual ~ManifestDecoder() = default;
  virtual Result<std::shared_ptr<const Manifest>> decode(std::span<const std::uint8_t> encoded) = 0;
};
std::shared_ptr<ManifestDecoder> default_manifest_decoder();

// --- actions for the driver, besides the swarm core's ---
// A piece still queued for `peer` under `request_id` is not sent.
struct CancelQueuedPiece {
  PeerId peer;
  swarm::RequestId request_id;
};
// Hash `shard` of the version's destination and tell the piece path
// (PiecePath::on_verified, through pieces()) with `fetch_serial`. The core
// writes nothing into that shard meanwhile.
struct HashShard {
  std::shared_ptr<LocalVersion> version;
  ShardIndex shard;
  std::uint64_t fetch_serial = 0;
};
// Copy `shards` (byte ranges from `to`'s manifest) from `from`'s memory to
// `to`'s destination, verify each copy against `to`'s manifest (the source
// is memory its owner may have changed since it was verified), then call
// on_shards_copied(to, the shards that failed). Both stay held until then.
struct CopyShards {
  std::shared_ptr<LocalVersion> from, to;
  std::vector<ShardIndex> shards;
};
// Copy `shards` of `to` from the host mate `mate` (LocalVersion::host_mate)
// by mapping the memory it shares, verify each, and call on_shards_copied.
struct CopyFromMate {
  HostMate mate;
  std::shared_ptr<LocalVersion> to;
  std::vector<ShardIndex> shards;
};
// No new read of the version's memory starts. Once every piece being sent
// from it has left or been dropped (and every job reading it has ended),
// the memory is its owner's again: the driver tells whoever asked for the
// release (the core keeps no callback). A version released twice (a
// private copy, or one released already) is named again.
struct ReleaseMemory {
  std::shared_ptr<LocalVersion> version;
};
// A fetch (or private copy) ended: ok, or why not.
struct FetchDone {
  std::shared_ptr<LocalVersion> version;
  Status status;
};
// A model has a new head (for subscribers).
struct HeadChanged {
  VersionInfo head;
};
// The gossip core has something new to send.
struct GossipChanged {};
// A version's state or progress, or what gossip says, changed: a driver
// that shows them to other threads refreshes its snapshots (once per
// turn: the core queues one until it is polled).
struct StateChanged {};
// Something an operator should read: the driver logs it.
struct Report {
  enum Level { kError, kWarn, kInfo, kDebug } level = kInfo;
  std::string text;
};
using PeerAction =
    std::variant<swarm::OpenConnection, swarm::CloseConnection, swarm::SendMessage, swarm::ServePiece,
                 swarm::DropQueuedPieces, CancelQueuedPiece, HashShard, CopyShards, CopyFromMate, ReleaseMemory,
                 FetchDone,
                 HeadChanged, GossipChanged, StateChanged, Report>;

// Where an arriving piece's payload goes: `length` bytes at `offset` of the
// version's destination.
struct PieceLanding {
  std::shared_ptr<LocalVersion> version;
  std::uint64_t offset = 0;
  std::uint32_t length = 0;
};

enum class ReleaseMode {
  kHonourRetention,  // defer while this peer is among the last R holders of the head
  kNow,              // release at once (also cuts short a deferral in progress)
};

class PeerCore {
 public:
  // `gossip`: the peer's gossip core, pumped by the driver (nullptr: no
  // gossip; the driver tells the core of holders itself, as the simulator's
  // ideal membership does). `locations`: shared with other cores that see
  // the same world (the simulator's); nullptr: a book of its own.
  PeerCore(PeerCoreConfig config, PeerId self, std::uint64_t seed, gossip::GossipCore* gossip,
           std::shared_ptr<swarm::LocationBook> locations = nullptr,
           std::shared_ptr<ManifestDecoder> decoder = nullptr);
  ~PeerCore();
  PeerCore(const PeerCore&) = delete;
  PeerCore& operator=(const PeerCore&) = delete;

  const PeerId& id() const { return self_; }
  // Seals of versions in parts that this peer publishes a part of are
  // signed with `identity` (this peer's). Without it, this peer never seals.
  void sign_seals_with(Identity identity) { sealer_.emplace(std::move(identity)); }

  // --- Gossip ---
  void on_member_event(TimePoint now, const gossip::MemberEvent& event);
  // Without gossip: `peer` holds (or fetches) `id`.
  void add_holder(TimePoint now, const ManifestId& id, const PeerId& peer, bool complete);
  void peer_gone(TimePoint now, const PeerId& peer);

  // --- Versions ---
  // The number and parent the next publication of `model` must carry.
  HeadTracker::NextVersion next_version(const std::string& model) const { return heads_.next_version(model); }
  // A head of `model` that gossip announces above the one verified here
  // (its manifest not fetched or not checked yet): a publication must wait
  // for it, or it would reuse its number.
  std::optional<VersionNumber> unverified_head(const std::string& model) const;
  bool trusts(const PublicKey& publisher) const { return heads_.trusts(publisher); }
  // Serves `memory` as the version `manifest` describes and announces it as
  // the head. `have`: the shards held (empty: all of them; a part is served
  // plainly, never super-seeded). A publisher is an origin: gossip names it
  // a complete holder of what it publishes, a part included (a trainer
  // rank's, in the simulator).
  // Errors: kAlreadyExists (another publication took that number meanwhile:
  // build again with next_version), kVerifyFailed (untrusted or broken chain),
  // kInvalidArgument (memory of another size).
  Result<std::shared_ptr<LocalVersion>> publish(TimePoint now, std::shared_ptr<const Manifest> manifest,
                                                core::ConstRegions memory, core::Bitfield have = {},
                                                const MemoryDomain& domain = host_memory());
  // Serves `memory` as one part of a version published in parts: the part
  // manifest `manifest` describes (its number is the version the trainer
  // gives, its parent the model's head here). Gossip names this peer a
  // complete holder of the part; once every part's manifest has come
  // (asked of the peers whose records hold them), this peer seals the
  // version (sign_seals_with) and it becomes the head. Errors:
  // kInvalidArgument (not a part's manifest, memory of another size, a
  // count or parent other than the version's other parts'),
  // kAlreadyExists (that version is known already, or another manifest is
  // that part), kVerifyFailed (untrusted).
  // `views`: views the manifest declares (manifest::declared_views of the
  // selections it was built with), each served from `memory`, gathered,
  // as a version of its own (view_manifest's id) until the part is
  // released. They are not announced: a fetcher of a view asks the part's
  // publisher (its record holds the part) besides the view's holders. A
  // view the manifest does not declare is refused (kInvalidArgument)
  // before anything is served.
  Result<std::shared_ptr<LocalVersion>> publish_part(TimePoint now, std::shared_ptr<const Manifest> manifest,
                                                     core::ConstRegions memory,
                                                     const MemoryDomain& domain = host_memory(),
                                                     std::span<const manifest::PartView> views = {});
  // Where a part published here stands: OK once a seal believed here
  // names it; kUnavailable while parts are missing (naming them, as
  // "part 2" for each); kVerifyFailed when its version cannot be sealed
  // (the parts do not fit together, or a slot was signed twice: the
  // reason); kAlreadyExists when another version took its number.
  Status part_sealed(const LocalVersion& part) const;
  // The parts of versions in parts known here.
  const PartBook& parts() const { return parts_; }
  // A manifest learnt outside gossip (the simulator's ideal membership):
  // checked and believed like one a peer sent. Errors: as HeadTracker::accept.
  Status learn_manifest(TimePoint now, std::shared_ptr<const Manifest> manifest);
  // The verified manifest of `model` v`version` (0: the head).
  // Errors: kUnavailable (no version known yet), kNotFound (not that one),
  // kVerifyFailed (that version was signed twice, or for the head, one
  // above the head was: equivocation), kInvalidArgument (a version in
  // parts, which has no single manifest).
  Result<std::shared_ptr<const Manifest>> resolve(const std::string& model, VersionNumber version) const;
  // The same for either kind: a whole version or a version in parts.
  // Errors: as above, but not kInvalidArgument.
  Result<KnownVersion> resolve_version(const std::string& model, VersionNumber version) const;
  // kVerifyFailed, naming it, when a version of `model` above `after` was
  // signed twice (equivocation); OK otherwise.
  Status equivocation_above(const std::string& model, VersionNumber after) const;
  // Fetches `manifest`'s version into `destination` (its total size; empty
  // only where there are no bytes, in the simulator). A version held here
  // already is copied from the local copy (CopyShards) once that one is
  // complete, and never shares state with it. `domain`: where the
  // destination lives (it verifies and copies into it). `wanted`: the
  // shards of a selection (LocalVersion::wanted), one bit per shard, at
  // least one set; empty: every shard. The destination still spans the
  // whole image; only the wanted shards' bytes are written.
  // Errors: kInvalidArgument (destination of another size, a wanted set of
  // another size or empty); kPermissionDenied (the version's shard hash is
  // not BLAKE2b-256 and the config requires it); kAlreadyExists (a
  // selection of a version held here as a selection too, or the version
  // when a selection of it is held here: one copy a version, served).
  // `selection`: the key (manifest::selection_key) of the selection a
  // view (manifest::view_manifest's) is fetched for, by which gossip
  // announces it in a part set with the fetcher's views of the version's
  // other parts; without it a view is announced on its own. A part of a
  // sealed version goes in a part set of its own.
  Result<std::shared_ptr<LocalVersion>> fetch(TimePoint now, std::shared_ptr<const Manifest> manifest,
                                              core::MutableRegions destination,
                                              const MemoryDomain& domain = host_memory(),
                                              std::optional<HostMate> host_mate = std::nullopt,
                                              core::Bitfield wanted = {},
                                              std::optional<ManifestId> selection = std::nullopt);
  // Whether a fetch of the view `view` (manifest::view_manifest's) of the
  // selection whose key is `selection` has a source now: this peer holds
  // it, a live member's record holds it (on its own or in a part set of
  // that selection), or holds the part complete (its publisher serves its
  // views, and any other holder serves one when asked: kServeView).
  // Without gossip (the driver says who holds what): true.
  bool view_has_source(const Manifest& view, const std::optional<ManifestId>& selection) const;
  // A live member on this peer's host (the same non-empty host label) whose
  // record holds `id` complete: where a fetch into memory that host mates
  // share (GPU memory) copies from first. None when there is none.
  std::optional<HostMate> host_mate_holding(const ManifestId& id) const;
  // Stops serving the version; ReleaseMemory follows (after a retention
  // deferral when `mode` honours retention and this is among the last
  // holders of the head). A fetch in progress fails with kCancelled.
  void release(TimePoint now, const std::shared_ptr<LocalVersion>& version, ReleaseMode mode);
  // Ends every retention deferral now (the peer leaves).
  void release_deferred(TimePoint now);

  // --- Model-parallel groups (group_book.hpp, docs/parts.md) ---
  // Becomes `rank` of `size` in group `name`: this peer's record claims it
  // and the group's ranks exchange their states directly. Errors: as
  // GroupBook::join; kAlreadyExists (a rank of that group already: one
  // join per group); kResourceExhausted (the record would not hold it).
  Status join_group(TimePoint now, const std::string& name, std::uint32_t size, std::uint32_t rank);
  void leave_group(TimePoint now, const std::string& name);
  // This rank stages `model` v`version` (id `id`: a manifest's or a seal's)
  // for group `name` in `versions`, the local versions that bring its
  // selection: while they fetch it says kStaging, once all are complete
  // kStaged, and kFailed with the reason when one fails or is released
  // first. Staging a version again replaces what it stages. Errors:
  // kNotFound (no rank of `name`), kResourceExhausted (GroupBook::set_stage
  // found no room).
  Status stage_for_group(TimePoint now, const std::string& name, const std::string& model, VersionNumber version,
                       const ManifestId& id, std::vector<std::shared_ptr<LocalVersion>> versions);
  void unstage_for_group(TimePoint now, const std::string& name, const std::string& model, VersionNumber version);
  // As GroupBook::commit: this rank enters the commit barrier; what it
  // says goes to the group's other ranks at once.
  Status commit_group(TimePoint now, const std::string& name, std::uint64_t version);
  // As GroupBook::withdraw: this rank stopped waiting in commit.
  void withdraw_from_commit(TimePoint now, const std::string& name, std::uint64_t version);
  const GroupBook& groups() const { return groups_; }

  // --- Data connections ---
  void on_connected(TimePoint now, const PeerId& peer);
  void on_connect_failed(TimePoint now, const PeerId& peer);
  void on_disconnected(TimePoint now, const PeerId& peer);
  void on_message(TimePoint now, const PeerId& peer, const swarm::SwarmMessage& message);

  // --- Pieces: the driver reaches the owner of their way ---
  // Runs `call(swarm::PiecePath&, now)`, through which the swarm core routes
  // each piece to the fetch whose request it answers (that FetchSession
  // owns the way from request to verified shard). What the call leaves for
  // this core (verifications, progress, messages) is taken before this
  // returns, as after any other entry.
  template <typename Call>
  decltype(auto) pieces(TimePoint now, Call&& call) {
    const DrainSwarmAfter drain{*this, now};
    return std::forward<Call>(call)(static_cast<swarm::PiecePath&>(swarm_), now);
  }
  // Where a payload that PiecePath::begin_piece placed lands: the version's
  // destination. Nothing (discard it) when the version is not held here or
  // the target lies outside its destination.
  std::optional<PieceLanding> landing_for(const std::optional<swarm::PieceTarget>& target) const;

  // --- Work done for the core ---
  // `mate_failure`: for CopyFromMate, why the shards in `failed` did not
  // come from the host mate (they are fetched from the swarm; not an
  // error of this peer's memory). `destination_error`: the destination
  // refused bytes (MemoryDomain::copy's kIoError); the fetch fails with it.
  void on_shards_copied(TimePoint now, const std::shared_ptr<LocalVersion>& to, std::span<const ShardIndex> failed,
                        const std::string& mate_failure = {}, const Status& destination_error = Status::ok());
  // The destination of `version` refused a payload's bytes (why: as
  // MemoryDomain::write's kIoError). Asking again would fail again: the
  // fetch fails with `why`, its sources hear it is done (kNotInterested),
  // and its memory goes back once released. Ignored for a version no
  // longer fetching.
  void on_local_write_failed(TimePoint now, const std::shared_ptr<LocalVersion>& version, const Status& why);

  void handle_timeout(TimePoint now);
  TimePoint next_timeout() const;
  std::optional<PeerAction> poll();

  // --- What it knows ---
  std::optional<VersionInfo> latest(const std::string& model) const { return heads_.head(model); }
  const HeadTracker& heads() const { return heads_; }
  // Peers other than this one that hold `id` complete: live members whose
  // record claims it and who proved it to this peer (possession_proofs.hpp).
  std::size_t replicas(const ManifestId& id) const;
  // Challenges the live members whose records claim `id` complete and that
  // have not proved it (again after PossessionProofs::kAnswerTimeout). Member
  // events do so as records change; a driver waiting for replicas calls it
  // too, so a lost challenge is asked again.
  void challenge_holders(TimePoint now, const ManifestId& id);
  std::shared_ptr<LocalVersion> find(const ManifestId& id) const;
  const std::map<ManifestId, std::shared_ptr<LocalVersion>>& versions() const { return versions_; }
  const swarm::SwarmCore& swarm() const { return swarm_; }
  std::size_t private_copies() const { return copies_.size(); }

 private:
  void learn_from_record(TimePoint now, const gossip::PeerRecord& record);
  void send_manifest_request(const std::optional<ManifestRequest>& request);
  void on_manifest(TimePoint now, const PeerId& from, const swarm::SwarmMessage& message);
  Result<bool> accept_manifest(TimePoint now, std::shared_ptr<const Manifest> manifest);
  Result<bool> accept_sealed(TimePoint now, std::shared_ptr<const manifest::SealedVersion> sealed);
  // After the head tracker took a version of `model`: a new head is
  // announced, proofs of equivocation found are spread, parents asked for.
  void after_accept(TimePoint now, const std::string& model, const std::optional<VersionInfo>& before,
                    std::size_t proofs_before);
  void on_seal(TimePoint now, const PeerId& from, const swarm::SwarmMessage& message);
  void on_group_state(TimePoint now, const PeerId& from, const swarm::SwarmMessage& message);
  // Each staged version's entry from its local versions' states, and the
  // group states due sent.
  void refresh_group_stages(TimePoint now);
  // `v`'s release was asked for: the stages it brings fail now (unless
  // committed), and the group hears it at once.
  void stage_released(TimePoint now, const LocalVersion& v);
  void send_group_states(TimePoint now);
  void claim_groups();
  void on_part_manifest(TimePoint now, const PeerId& from, std::shared_ptr<const Manifest> part);
  // Joins the seals whose parts are all here, and seals the versions this
  // peer publishes a part of whose parts are all here.
  void drain_parts(TimePoint now);
  void seal(TimePoint now, SealBody body);
  // Serves `manifest`'s version from `memory` (published here, believed
  // already): `have` the shards held (empty: all).
  std::shared_ptr<LocalVersion> serve_published(TimePoint now, std::shared_ptr<const Manifest> manifest,
                                                core::ConstRegions memory, core::Bitfield have,
                                                const MemoryDomain& domain, bool super_seed);
  // Serves the view `view` of the image `image` publishes here from
  // `memory` (the view's bytes, gathered from the image's).
  void serve_view(TimePoint now, const std::shared_ptr<LocalVersion>& image, std::shared_ptr<const Manifest> view,
                  core::ConstRegions memory);
  // A complete version, held here from `memory`, registered and served.
  std::shared_ptr<LocalVersion> serve_complete(TimePoint now, std::shared_ptr<const Manifest> manifest,
                                               core::ConstRegions memory, core::Bitfield have,
                                               const MemoryDomain& domain, swarm::SwarmCore::ServeMode mode);
  // Whether `record`'s holding `h` makes its peer a source of the view
  // `view` (a view's manifest): it publishes the image that view is of.
  static bool serves_view(const Manifest& view, const gossip::PeerRecord& record, const gossip::HoldingEntry& h);
  // The place of the image `m` (a part, or with `selection` a part's view)
  // in the sealed version this peer believes it part of; none when it is
  // no part of one, or the version has more parts than a part set names.
  std::optional<PartSlot> slot_in_seal(const Manifest& m, const std::optional<ManifestId>& selection) const;
  // `v`'s place: its slot, or for a part published here, found now.
  std::optional<PartSlot> slot_of(const LocalVersion& v) const;
  // Whether a member's holding `h` claims the image `id` whose place is
  // `slot` (slot_of's), directly or in a part set; and then whether complete.
  static std::optional<bool> claim_on(const gossip::HoldingEntry& h, const ManifestId& id,
                                      const std::optional<PartSlot>& slot);
  // Calls `fn(version, complete)` for each version held or fetched here
  // that `h` (a member's holding) claims.
  template <typename Fn>
  void for_each_claimed(const gossip::HoldingEntry& h, Fn&& fn) const;
  // The part set of (seal, selection) in the gossip record, from the
  // versions indexed in it now; withdrawn when none is announced.
  void announce_part_set(const std::string& model, VersionNumber number, const PartSlot& slot);
  void answer_get_manifest(const PeerId& peer, const ManifestId& id);
  // Sends both manifests of `e` to `to`, once per peer and equivocation: a
  // peer that believes one of them learns it was signed twice. Done for
  // each member that names an equivocated head, when the proof is found
  // (at most kProofFanout of them) and when a record names one later.
  void send_proof(const Equivocation& e, const PeerId& to);
  void spread_proofs_found(std::size_t known_before);
  // A challenge to a member whose record claims `id` complete, if this peer
  // holds `id` complete and the member has not proved it.
  void challenge_member(TimePoint now, const LocalVersion& v, const gossip::PeerRecord& member);
  // Asks `member` to serve the view `v` fetches (kServeView, with the
  // view's table), when its record holds v's image complete and it is not
  // that image's publisher (which serves it anyway); at most
  // kMaxViewServersAsked holders at a time a view. One that has not
  // answered within kViewAskTimeout gives its place to another
  // (expire_view_asks), and is asked again only when no other is left.
  void ask_to_serve_view(TimePoint now, LocalVersion& v, const gossip::PeerRecord& member);
  void expire_view_asks(TimePoint now);
  // A holder of an image asked to serve one of its declared views: served
  // from the image's memory as its publisher serves it, and answered with
  // kViewServed. Nothing for an image not held complete here, a view it
  // does not declare, or past the asker's rate.
  void on_serve_view(TimePoint now, const PeerId& peer, const swarm::SwarmMessage& message);
  void on_view_served(TimePoint now, const PeerId& peer, const ManifestId& view);
  // Answers a challenge about a version held here complete (a few a second
  // per peer at most).
  void answer_challenge(TimePoint now, const PeerId& peer, const swarm::SwarmMessage& message);
  // Copies the shards unchanged since a complete version of its model held
  // here, then fetches the rest from the swarm.
  void start_fetch(TimePoint now, const std::shared_ptr<LocalVersion>& version);
  void fetch_from_swarm(TimePoint now, const std::shared_ptr<LocalVersion>& version, core::Bitfield have);
  void start_copy(const std::shared_ptr<LocalVersion>& copy, const std::shared_ptr<LocalVersion>& source);
  // The private copies waiting for `source` learn its outcome: ok, they are
  // copied now; kCancelled (released before it completed) or kIoError (its
  // own destination refused bytes), one of them takes its place and the
  // rest wait for that one; else they fail with it.
  void source_finished(TimePoint now, const std::shared_ptr<LocalVersion>& source, const Status& outcome);
  void report(Report::Level level, std::string text) { actions_.push(Report{level, std::move(text)}); }
  void drain_swarm(TimePoint now);
  struct DrainSwarmAfter {
    PeerCore& core;
    TimePoint now;
    ~DrainSwarmAfter() { core.drain_swarm(now); }
  };
  void shard_held(TimePoint now, const swarm::ShardHeld& held);
  void shard_failed(const swarm::ShardFailed& failed);
  void finish(TimePoint now, const std::shared_ptr<LocalVersion>& v, const Status& status);
  void announce_holding(const LocalVersion& v);
  void withdraw_holding(const LocalVersion& v);
  void gossip_changed();
  // Reports a change in what the gossip record leaves out (record_budget.hpp).
  void note_left_out();
  void state_changed();
  swarm::ReleaseFacts release_facts(const LocalVersion& v) const;
  void release_due(TimePoint now, bool all);
  void release_now(TimePoint now, const std::shared_ptr<LocalVersion>& v);
  std::uint16_t permille(const LocalVersion& v) const;

  PeerCoreConfig config_;
  PeerId self_;
  gossip::GossipCore* gossip_;
  PossessionProofs proofs_;
  // Equivocation proofs sent: (peer, model, version). Bounded.
  std::set<std::tuple<PeerId, std::string, VersionNumber>> proofs_sent_;
  static constexpr std::size_t kMaxProofsSent = 65536;
  static constexpr std::size_t kProofFanout = 16;
  core::SplitMix64 rng_;  // challenges' nonces and ranges
  gossip::RateLimiter challenges_answered_;  // per peer
  // Per peer. Generous: what a peer can make this one derive is bounded by
  // the views the parts held here declare; the rate bounds the bursts.
  gossip::RateLimiter views_served_on_request_;
  static constexpr std::size_t kMaxViewServersAsked = 4;
  static constexpr std::size_t kMaxChallengesPerRecord = 16;
  static constexpr Duration kViewAskTimeout = std::chrono::seconds(5);
  static constexpr std::size_t kMaxSlowServersKept = 64;
  TimePoint next_view_ask_check_ = kTimeNever;
  std::shared_ptr<ManifestDecoder> decoder_;
  swarm::SwarmCore swarm_;
  HeadTracker heads_;
  PartBook parts_;
  GroupBook groups_;
  // What each (group, model, version) staged here is fetched into.
  std::map<std::tuple<std::string, std::string, std::uint64_t>, std::vector<std::weak_ptr<LocalVersion>>> staged_;
  std::optional<Identity> sealer_;
  std::map<ManifestId, std::shared_ptr<LocalVersion>> versions_;  // served: published or fetched
  PartSets part_sets_;  // the fetched ones with a slot, as gossip announces them
  // Private copies (VersionRole::kCopy) not yet released, each with the
  // version it copies until it is copied.
  std::map<std::shared_ptr<LocalVersion>, std::shared_ptr<LocalVersion>> copies_;
  // Versions waiting for CopyShards to finish: how many jobs are left, and
  // the shards they bring.
  struct PendingCopies {
    std::size_t jobs = 0;
    core::Bitfield have;
    std::size_t failed = 0;  // copies that did not verify
  };
  std::map<const LocalVersion*, PendingCopies> copying_;
  swarm::DeferredReleases deferred_;
  core::ActionQueue<PeerAction> actions_;
  bool gossip_dirty_ = false;
  std::pair<std::uint64_t, std::uint64_t> left_out_reported_{0, 0};  // heads, holdings
  bool state_dirty_ = false;
};

}  // namespace tensorhub::peer
