// The gossip core: SWIM membership with Lifeguard's refinements, signed peer
// records, piggybacked dissemination and Scuttlebutt-style push-pull, as a
// deterministic state machine with no I/O.
//
// Inputs: datagrams and stream frames that arrived, stream lifecycle, local
// record changes, and the current time. Outputs, drained by the driver with
// poll_*(): datagrams to send, stream actions, and member events. The driver
// calls handle_timeout(now) when now >= next_timeout(). Randomness comes from
// the seed; time only from the arguments. The same inputs give the same
// outputs, which is what lets a seed replay a failure exactly.
//
// Thread-compatibility: not thread-safe; one driver thread owns a core.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/action_queue.hpp"
#include "core/rng.hpp"
#include "core/time.hpp"
#include "core/timer_table.hpp"
#include "gossip/broadcast_queue.hpp"
#include "gossip/gossip_config.hpp"
#include "gossip/gossip_wire.hpp"
#include "gossip/member_table.hpp"
#include "gossip/pair_keys.hpp"
#include "gossip/peer_record.hpp"
#include "gossip/rate_limiter.hpp"
#include "gossip/record_budget.hpp"
#include "gossip/version_vector.hpp"
#include "tensorhub/identity.hpp"
#include "tensorhub/swarm_key.hpp"

namespace tensorhub::gossip {

struct LocalPeerInfo {
  std::string gossip_addr;  // host:port others reach us at (UDP and TCP)
  std::string data_addr;
  Topology topology;
};

struct OutgoingDatagram {
  std::string to;
  std::vector<std::uint8_t> bytes;
};

// Stream ids: the core numbers the streams it opens from 1; the driver
// numbers inbound streams with kInboundStreamBit set.
using StreamId = std::uint64_t;
inline constexpr StreamId kInboundStreamBit = 1ull << 63;

struct StreamAction {
  enum class Kind { kOpen, kSend, kClose };
  Kind kind = Kind::kSend;
  StreamId id = 0;
  std::string to;                    // kOpen: where to connect
  std::vector<std::uint8_t> frame;   // kOpen (first frame) and kSend
};

// kIdentityConflict: another live process signs records with this peer's
// identity (a key file copied to two hosts, a secret mounted into every pod);
// the event's record is the other process's.
enum class MemberEventKind { kJoined, kUpdated, kSuspect, kAlive, kDead, kLeft, kRemoved, kIdentityConflict };
std::string_view member_event_name(MemberEventKind kind);

struct MemberEvent {
  MemberEventKind kind = MemberEventKind::kUpdated;
  PeerId id;
  RecordPtr record;  // the newest record known (null for kRemoved)
  std::uint64_t incarnation = 0;
};

struct MemberView {
  RecordPtr record;
  Liveness liveness = Liveness::kAlive;
  std::uint64_t incarnation = 0;
  TimePoint since;
};

struct GossipStats {
  std::uint64_t datagrams_in = 0, datagrams_out = 0, bytes_in = 0, bytes_out = 0;
  std::uint64_t dropped_oversized = 0, dropped_rate_limited = 0, dropped_unauthenticated = 0;
  std::uint64_t dropped_malformed = 0, dropped_replayed = 0, dropped_misdirected = 0;
  std::uint64_t records_accepted = 0, records_stale = 0, records_rejected = 0;
  std::uint64_t probes = 0, probes_failed = 0, suspicions = 0, refutations = 0, deaths_declared = 0;
  std::uint64_t streams_opened = 0, streams_accepted = 0, streams_failed = 0;
  std::uint64_t stream_bytes_in = 0, stream_bytes_out = 0;
  std::uint64_t records_signed = 0, events_dropped = 0;
  // Own records that could not be signed (sign_error() says why).
  std::uint64_t records_unsigned = 0;
  // Datagrams the driver could not send (handle_send_failed).
  std::uint64_t datagrams_unsent = 0;
  // The own record now: its size, and the heads and holdings it leaves out
  // (record_budget.hpp). Levels, not counts: summing them adds peers' levels.
  std::uint64_t record_bytes = 0, record_heads_left_out = 0, record_holdings_left_out = 0;
  // Suspect or dead claims at an incarnation above any the target signed
  // (ignored, answered with the target's record).
  std::uint64_t liveness_forged = 0;
  // Datagrams whose sender tag does not prove the sender they name.
  std::uint64_t dropped_forged_sender = 0;
  // Liveness claims with a bad signature, or from an accuser that is no live
  // member; acks and nacks from peers that were not asked.
  std::uint64_t liveness_unsigned = 0, acks_unasked = 0;
  // New suspicions from an accuser past its rate (one a probe interval,
  // burst kAccusationBurst): an honest peer probes one member an interval.
  std::uint64_t liveness_rate_limited = 0;
  // Push-pull requests not answered: their host asked past its rate.
  std::uint64_t syncs_refused = 0;
  std::uint64_t pair_keys_derived = 0;
  // Our own records from another live process (kIdentityConflict).
  std::uint64_t identity_conflicts = 0;
  // Datagrams, stream frames and records of peers not on the admission list.
  std::uint64_t not_admitted = 0;
};

// Sums counts (of the peers of a network, say).
inline GossipStats& operator+=(GossipStats& a, const GossipStats& b) {
  a.datagrams_in += b.datagrams_in;
  a.datagrams_out += b.datagrams_out;
  a.bytes_in += b.bytes_in;
  a.bytes_out += b.bytes_out;
  a.dropped_oversized += b.dropped_oversized;
  a.dropped_rate_limited += b.dropped_rate_limited;
  a.dropped_unauthenticated += b.dropped_unauthenticated;
  a.dropped_malformed += b.dropped_malformed;
  a.dropped_replayed += b.dropped_replayed;
  a.dropped_misdirected += b.dropped_misdirected;
  a.records_accepted += b.records_accepted;
  a.records_stale += b.records_stale;
  a.records_rejected += b.records_rejected;
  a.probes += b.probes;
  a.probes_failed += b.probes_failed;
  a.suspicions += b.suspicions;
  a.refutations += b.refutations;
  a.deaths_declared += b.deaths_declared;
  a.streams_opened += b.streams_opened;
  a.streams_accepted += b.streams_accepted;
  a.streams_failed += b.streams_failed;
  a.stream_bytes_in += b.stream_bytes_in;
  a.stream_bytes_out += b.stream_bytes_out;
  a.records_signed += b.records_signed;
  a.records_unsigned += b.records_unsigned;
  a.datagrams_unsent += b.datagrams_unsent;
  a.record_bytes += b.record_bytes;
  a.record_heads_left_out += b.record_heads_left_out;
  a.record_holdings_left_out += b.record_holdings_left_out;
  a.events_dropped += b.events_dropped;
  a.liveness_forged += b.liveness_forged;
  a.dropped_forged_sender += b.dropped_forged_sender;
  a.liveness_unsigned += b.liveness_unsigned;
  a.acks_unasked += b.acks_unasked;
  a.liveness_rate_limited += b.liveness_rate_limited;
  a.syncs_refused += b.syncs_refused;
  a.pair_keys_derived += b.pair_keys_derived;
  a.identity_conflicts += b.identity_conflicts;
  a.not_admitted += b.not_admitted;
  return a;
}

// The gossip core's timers (core::TimerTable).
enum class GossipTimer {
  kProbe,         // the next probe of a member (not while leaving)
  kProbeStage,    // the probe under way: indirect probes, then its deadline
  kGossip,        // the next gossip round
  kEagerRound,    // a new head to push: now
  kResign,        // the own record, changed, to be signed again
  kPushPull,      // the next anti-entropy exchange
  kReconnect,     // the next exchange with a dead member
  kJoin,          // the seeds asked again, while no member is known
  kReap,          // tombstones past their time
  kRelayNack,     // the first ping-req relayed for another whose nack is due
  kStreamDeadline,  // the first stream whose exchange must be done
  kSuspicion,     // the first suspicion that turns into a death
  kCount
};

class GossipCore {
 public:
  // `initial_incarnation` should exceed any incarnation this identity used
  // before (drivers pass wall-clock milliseconds at start), so a restarted
  // peer is believed at once; when it does not (a clock that stepped back),
  // the peer outbids its past life once it hears that life's record.
  // `rng_seed` seeds the random streams and the boot id of this life's
  // nonces: the runtime passes entropy, tests and the simulator a seed.
  GossipCore(GossipConfig config, Identity identity, const SwarmKey& swarm_key, LocalPeerInfo local,
             std::uint64_t initial_incarnation, std::uint64_t rng_seed, TimePoint now,
             std::shared_ptr<RecordDecoder> decoder = nullptr);

  // --- inputs ---
  // Contacts seeds (push-pull) to learn the swarm. May be called again.
  void join(TimePoint now, std::span<const std::string> seeds);
  // Announces a graceful leave; the driver keeps running until
  // leave_settled() or its own deadline, so the news spreads.
  void leave(TimePoint now);
  void handle_datagram(TimePoint now, const std::string& from, std::span<const std::uint8_t> bytes);
  void handle_stream_accepted(TimePoint now, StreamId id, const std::string& from);
  void handle_stream_frame(TimePoint now, StreamId id, std::span<const std::uint8_t> frame);
  // The stream closed, failed to open, or broke.
  void handle_stream_closed(TimePoint now, StreamId id);
  // A datagram the core gave could not be sent (a full socket buffer, no
  // route): counted; gossip repeats what matters, so nothing is retried.
  void handle_send_failed() { ++stats_.datagrams_unsent; }
  void handle_timeout(TimePoint now);
  // The earliest of timers().
  TimePoint next_timeout() const;
  // Every timer, named, as the core's state sets them.
  core::TimerTable<GossipTimer> timers() const;
  // Adds verified records of other members as alive, without announcing
  // them: for restoring a saved member table, and for simulations that start
  // from a converged swarm. Records that are not news are ignored.
  void preload(TimePoint now, std::span<const RecordPtr> records);
  // Admission control. With a list, only the peers on it are members: the
  // datagrams, stream frames and records of anyone else are dropped and
  // counted (not_admitted), and members no longer on it are removed at once
  // (kRemoved). Null: anyone holding the swarm key. The list should name
  // this peer (others holding the same list refuse it otherwise).
  using AdmissionList = std::unordered_set<PeerId>;
  void set_admitted(std::shared_ptr<const AdmissionList> admitted);
  bool admits(const PeerId& id) const { return admitted_ == nullptr || admitted_->count(id) != 0; }

  // --- the local record (re-signed at most every min_resign_interval, except
  // for a new head: see eager_round_due_) ---
  // What the record would announce; which of it fits is chosen by the rule
  // in record_budget.hpp, and what is left out is counted in stats().
  void set_head(const HeadEntry& head);
  // `origin`: this peer published the version.
  void set_holding(const HoldingEntry& holding, bool origin = false);
  void remove_holding(const HoldingKey& key);
  // The model-parallel groups this peer is a rank of, as its record claims
  // them (sorted by name, unique). Errors: kInvalidArgument (a claim breaks
  // the record's rules: validate_record), kResourceExhausted (the record
  // would no longer hold the heads this peer publishes); the record keeps
  // its claims then.
  Status set_groups(std::vector<GroupEntry> groups);
  // OK when the record can announce `head` as a version this peer publishes
  // (the head and its holding) besides the heads it publishes already;
  // kResourceExhausted naming the limit otherwise. A publication asks first.
  Status can_announce_origin(const HeadEntry& head) const;
  // Whether the signed record names (model, version) among its holdings.
  bool announces(const std::string& model, std::uint64_t version) const;
  // Why the last record could not be signed (OK: it could). Counted in
  // stats().records_unsigned; the previous record stays in force.
  const Status& sign_error() const { return sign_error_; }

  // --- outputs ---
  std::optional<OutgoingDatagram> poll_datagram();
  std::optional<StreamAction> poll_stream();
  std::optional<MemberEvent> poll_event();

  // --- queries ---
  const PeerId& self_id() const { return identity_.public_key(); }
  const RecordPtr& self_record() const { return self_signed_; }
  std::vector<MemberView> members() const;
  std::optional<MemberView> member(const PeerId& id) const;
  std::size_t live_members() const { return table_.live_count(); }  // excluding self
  // Per model, the highest head any live member (or this peer) claims.
  VersionVector known_heads() const;
  const GossipStats& stats() const { return stats_; }
  int local_health() const { return awareness_; }
  std::size_t pending_broadcasts() const { return broadcasts_.size(); }
  bool leaving() const { return self_.leaving; }
  // True once a leave has gone out (queue drained or sent to enough peers).
  bool leave_settled() const;
  const GossipConfig& config() const { return config_; }

 private:
  struct Probe {
    std::uint32_t seq = 0;
    PeerId target;
    std::vector<PeerId> relays;           // asked to probe for us: their acks count
    std::vector<PeerId> awaiting_nacks;   // relays that have not nacked yet
    TimePoint started;
    TimePoint indirect_at;   // probe timeout: ask others
    TimePoint deadline;      // end of the probe interval: suspect
    bool indirect_sent = false;
    bool acked = false;
    int expected_nacks = 0;
    int nacks = 0;
  };
  struct Relay {
    PeerId requester;
    std::string requester_addr;
    std::uint32_t requester_seq = 0;
    PeerId target;  // only its ack is forwarded
    TimePoint nack_at;
  };
  enum class StreamPhase { kAwaitResponse, kAwaitRequest, kAwaitRecords, kAwaitProbeAck };
  struct Stream {
    StreamPhase phase;
    TimePoint deadline;
    std::string peer;
    std::uint32_t probe_seq = 0;  // kAwaitProbeAck
    PeerId probe_target;          // kAwaitProbeAck: only its ack counts
  };

  // Datagram handling.
  // `corrections` collects newer records for a sender whose claims are stale.
  void process_items(TimePoint now, std::vector<IncomingItem>& items, std::vector<OutgoingItem>* corrections);
  // A datagram from another boot than its sender's newest record names
  // carries the sender's signed record of that boot, newer than ours.
  bool proves_new_boot(const Opened& opened, const std::vector<IncomingItem>& items);
  // Our own record, signed and newer than ours, from another boot: a past
  // life to outbid, or (outbid twice) a live twin.
  void outbid_other_life(TimePoint now, const RecordVersion& version, const RecordPtr& record);
  void process_record(TimePoint now, const RecordBytes& bytes, std::vector<OutgoingItem>* corrections);
  void process_liveness(TimePoint now, const LivenessItem& item, std::vector<OutgoingItem>* corrections);
  // A claim is news when it could change this peer's view of its target.
  bool liveness_is_news(const LivenessItem& item) const;
  void on_ping(TimePoint now, const std::string& from, const Packet& packet);
  void on_ack(TimePoint now, const Packet& packet);
  void on_ping_req(TimePoint now, const std::string& from, const Packet& packet);
  void on_nack(const Packet& packet);

  // Sending.
  // To the peer `to` at `addr` (its tag proves us to that peer alone).
  // `piggyback`: fill the rest of the datagram from the broadcast queue.
  void send_packet(const PeerId& to, const std::string& addr, Packet packet,
                   std::span<const OutgoingItem> must_include = {}, bool piggyback = true);
  void send_packet(const Member& to, Packet packet, std::span<const OutgoingItem> must_include = {},
                   bool piggyback = true) {
    send_packet(to.id(), to.record->record.gossip_addr, std::move(packet), must_include, piggyback);
  }
  // This peer's signed claim about `target`.
  LivenessItem claim(Liveness state, const PeerId& target, std::uint64_t incarnation) const {
    return sign_liveness(identity_, state, target, incarnation);
  }
  // A random probe sequence number (never 0), from its own stream so that
  // the choices of peers and targets do not depend on it.
  std::uint32_t next_probe_seq();
  void emit(MemberEventKind kind, const PeerId& id, const RecordPtr& record, std::uint64_t incarnation);

  // Periodic work.
  void run_probe(TimePoint now);
  void finish_probe(TimePoint now);
  // A round to `fanout` peers (default: gossip_fanout).
  void run_gossip(TimePoint now, std::size_t fanout = 0);
  // Sends `news` (a record bearing a new head) to every live member with our
  // topology labels, past the piggyback queue and its transmit limit.
  void push_to_host_mates(const RecordPtr& news);
  void run_push_pull(TimePoint now);
  void run_reconnect(TimePoint now);
  void check_suspicions(TimePoint now);
  void check_relays(TimePoint now);
  void check_streams(TimePoint now);
  void resign_if_due(TimePoint now);
  // Records an input at `now`; notices pauses.
  void note_input(TimePoint now);

  // Push-pull.
  void open_sync(TimePoint now, const std::string& to);
  // memberlist's fallback: the same probe over TCP, which retransmits what
  // UDP loses, so a lossy path alone does not make a live peer suspect.
  void open_probe_stream(TimePoint now, const std::string& to, std::uint32_t seq, const PeerId& target);
  std::vector<DigestEntry> full_digest() const;
  void answer_sync(TimePoint now, StreamId id, const SyncRequest& request);
  std::vector<OutgoingItem> items_about(const PeerId& id) const;
  LivenessItem claim_to_relay(const Member& m) const;
  void close_stream(StreamId id);

  // Self.
  void refute(TimePoint now, std::uint64_t accused_incarnation);
  void resign(TimePoint now);
  void adjust_awareness(int delta);

  // Helpers.
  Duration scaled(Duration d) const { return d * (1 + awareness_); }
  std::size_t cluster_size() const { return table_.live_count() + 1; }
  int retransmit_limit() const;
  SuspicionTimeouts suspicion_timeouts() const;
  Duration push_pull_interval() const;
  // Up to `count` distinct members drawn uniformly from `from`, leaving out
  // those `skip` rejects. O(count) expected, whatever the swarm size.
  std::vector<const Member*> sample(const IdSet& from, std::size_t count,
                                    const std::function<bool(const Member&)>& skip = nullptr);
  std::optional<PeerId> next_probe_target(TimePoint now);

  GossipConfig config_;
  Identity identity_;
  core::AeadKey gossip_key_;
  Sealer sealer_;
  PairKeys pair_keys_;
  core::SplitMix64 rng_;
  core::SplitMix64 seq_rng_;
  std::shared_ptr<RecordDecoder> decoder_;

  // The own record: the fixed fields, and the entries chosen from wanted_.
  PeerRecord self_;
  RecordPtr self_signed_;
  Announcements wanted_;
  static constexpr std::size_t kMaxWantedEntries = 4096;
  Status sign_error_;
  // Chooses self_'s entries from wanted_; marks the record dirty if they changed.
  void choose_announced();
  // Boots of our identity's other lives we outbid, and how often (bounded).
  std::map<std::uint64_t, int> outbid_boots_;
  bool self_dirty_ = false;
  bool head_changed_ = false;  // part of self_dirty_: re-sign now, not at min_resign_interval
  TimePoint last_signed_;
  // A head newer than any seen for its model arrived (in our own record or
  // another's): a gossip round goes out at once, not at the next
  // gossip_interval. Each peer does this once per new head, so a head
  // crosses the swarm in log(N) network delays rather than log(N) rounds
  // of re-signing and gossip_interval.
  bool eager_round_due_ = false;
  // The record that brought the newest head, due with the eager round to
  // every host mate as well. With the random push alone about e^-6 of a
  // swarm hears a head a round (200 ms) late, and a host's mates fetch from
  // each other over NVLink, so one mate late makes its node late. Host
  // mates are few (a peer per GPU).
  std::optional<RecordPtr> head_news_;
  // The newest head version seen per model, for the rule above. Bounded:
  // past kMaxModelsTracked models, heads spread at the normal pace.
  std::map<std::string, std::uint64_t> newest_head_;
  static constexpr std::size_t kMaxModelsTracked = 1024;
  // Notes the heads of a record; true if one is newer than any seen.
  bool note_heads(const std::vector<HeadEntry>& heads);

  MemberTable table_;
  BroadcastQueue broadcasts_;
  RateLimiter rate_limiter_;
  RateLimiter sync_limiter_;
  std::unordered_map<PeerId, ReplayWindow> stranger_windows_;  // senders not (yet) members
  std::shared_ptr<const AdmissionList> admitted_;                 // null: anyone with the swarm key

  std::vector<PeerId> probe_order_;
  std::size_t probe_index_ = 0;
  std::optional<Probe> probe_;
  std::map<std::uint32_t, Relay> relays_;  // our ping seq -> who asked
  int awareness_ = 0;

  TimePoint next_probe_at_;
  TimePoint next_gossip_at_;
  TimePoint next_push_pull_at_;
  TimePoint next_reconnect_at_;
  // Seeds are asked again while no member is known: a peer started before
  // its seed, or cut off from everyone, finds its way back.
  std::vector<std::string> seeds_;
  TimePoint next_join_at_ = kTimeNever;
  Duration join_backoff_;
  TimePoint next_reap_at_;
  TimePoint leave_at_;
  int leave_sends_ = 0;
  // Pause detection: a core runs at least every gossip interval, so a longer
  // gap since its last input means this process was stopped (a GC pause, a
  // SIGSTOP, an overloaded host). Its own timers then fire late, before it
  // has read what arrived meanwhile: no suspicion may turn into a death, and
  // no failed probe into a suspicion, until it has caught up.
  TimePoint last_input_;
  TimePoint caught_up_at_;

  std::map<StreamId, Stream> streams_;
  StreamId next_stream_id_ = 1;

  std::deque<OutgoingDatagram> datagrams_;
  core::ActionQueue<StreamAction> stream_actions_;
  std::deque<MemberEvent> events_;
  GossipStats stats_;
};

}  // namespace tensorhub::gossip
