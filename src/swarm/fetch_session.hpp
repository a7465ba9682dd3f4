// The fetch of one version, as a deterministic state machine with no I/O.
//
// It chooses neighbours from the candidates gossip reports (nearest first,
// plus a random few), keeps their bitfields, and turns them into block
// requests: rarest shard first, started shards before new ones, a pipeline
// of requests per neighbour, the nearest holder preferred, and no shard
// pulled across the WAN while a holder inside the datacenter has it, or
// while the holder across it says a mate is bringing it over. When
// every missing block is in flight it enters endgame and asks a second
// holder, cancelling the loser. Completed shards are verified (by the
// driver, which owns the bytes); a good shard is announced, a bad one is
// requested again: from one sender alone when several sent it, so that a
// failure is blamed only on a sender that sent the whole shard, and a peer
// so blamed repeatedly is dropped. A lost connection or a timed-out
// request puts its blocks back at once. If some shard has no holder left,
// the fetch fails with a message naming it.
//
// The driver feeds events and time, and carries out the actions it polls:
// connect, request, cancel, verify, announce, disconnect, done. Blocks land
// directly in the destination; this core only tracks which have.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "core/action_queue.hpp"
#include "core/bitfield.hpp"
#include "core/rng.hpp"
#include "core/time.hpp"
#include "core/timer_table.hpp"
#include "swarm/candidate_list.hpp"
#include "swarm/fetch_types.hpp"
#include "swarm/landings.hpp"
#include "swarm/neighbourhood.hpp"
#include "swarm/piece_picker.hpp"
#include "swarm/request_ids.hpp"
#include "swarm/request_table.hpp"
#include "swarm/slot_share.hpp"
#include "swarm/source_rules.hpp"
#include "swarm/topology.hpp"
#include "tensorhub/ids.hpp"
#include "tensorhub/status.hpp"

namespace tensorhub::swarm {

class FetchSession {
 public:
  // `have`: shards already held (e.g. unchanged since the parent version,
  // copied locally). `wanted`: the shards this fetch is for (a selection
  // of the version); empty: all of them. The fetch is done once it holds
  // every wanted shard; it never asks for another. `ids`: where request
  // ids come from (SwarmCore numbers every version's requests from one);
  // it outlives the session.
  // REQUIRES: have.size() == layout.shard_count(), and wanted's size is
  // that or 0.
  FetchSession(ShardLayout layout, core::Bitfield have, Location self, PeerId self_id, FetchConfig config,
               std::uint64_t seed, TimePoint now, RequestIds& ids, core::Bitfield wanted = {});
  // Not copied: its parts are not.
  FetchSession(const FetchSession&) = delete;
  FetchSession& operator=(const FetchSession&) = delete;

  // The block of this session's request `request_id` to `peer`, while it
  // is outstanding here, or let go and not yet answered (answered() ends
  // that); nullopt once it is answered, dropped or cancelled.
  struct RequestedBlock {
    ShardIndex shard;
    BlockIndex block;
    bool superseded = false;  // its payload was turned away unwritten (mark_superseded)
  };
  std::optional<RequestedBlock> request_of(const PeerId& peer, RequestId request_id) const;
  // The payload answering the request is turned away unwritten (the block
  // was taken): when it ends, on_block_superseded, not on_block_refused.
  void mark_superseded(const PeerId& peer, RequestId request_id) { requests_.mark_superseded(peer, request_id); }

  // --- A piece's way in: its payload lands in the destination ---
  // The payload answering request `request_id` of `peer`, `length` bytes,
  // begins: where in the image it goes. Nothing when it answers no request
  // outstanding here or has the wrong length; nothing, and the request is
  // marked superseded, when its block is received, being verified, or
  // landing from another copy (two payloads writing one block could leave
  // a liar's bytes over an honest copy that verified).
  std::optional<std::uint64_t> begin_piece(TimePoint now, const PeerId& peer, RequestId request_id,
                                           std::uint32_t length);
  // Bytes of that payload arrived: its stall limit counts from now.
  void piece_progress(TimePoint now, const PeerId& peer, RequestId request_id);
  enum class PieceEnd {
    kStored,     // its bytes are in the destination
    kNotStored,  // it failed on the way (the sender's doing)
    kNotKept,    // turned away here unwritten: no blame
  };
  // The piece answering `request_id` ended. A payload that landed reaches
  // its block whatever became of its request meanwhile (cancelled, choked,
  // given up). False when it answers no request of this session (its
  // bytes were read and discarded).
  bool end_piece(TimePoint now, const PeerId& peer, RequestId request_id, PieceEnd how);
  // A refusal (or deferral) of request `request_id`; false when it answers
  // nothing outstanding here, or the request's payload is landing already.
  bool on_answer(TimePoint now, const PeerId& peer, RequestId request_id, bool deferred);
  bool lands(const PeerId& peer, RequestId request_id) const { return landings_.lands(peer, request_id); }
  // The connection to `peer` went (the driver stopped its writes): none of
  // its payloads lands any more.
  void end_landings_from(const PeerId& peer) { landings_.end_all_from(peer); }
  // The peers whose payloads land, each once.
  std::vector<PeerId> landing_senders() const { return landings_.senders(); }
  // Appends (deadline, sender) of each payload stalled at `now`, earliest first.
  void stalled_landings(TimePoint now, std::vector<std::pair<TimePoint, PeerId>>& out) const {
    landings_.stalled(now, out);
  }
  // The earliest a landing payload counts as stalled (kTimeNever: none
  // lands). Not among timers(): the core that closes connections keeps it.
  TimePoint next_landing_deadline() const { return landings_.next_deadline(); }

  // Candidates from gossip: peers that hold or are fetching this version.
  // `complete`: gossip says it holds the whole version (a publisher, a
  // finished fetcher), so it can supply shards nobody else has yet.
  void add_candidate(TimePoint now, const PeerId& peer, Proximity proximity, bool complete = false);
  void add_candidate(TimePoint now, const PeerId& peer, const Location& location, bool complete = false) {
    add_candidate(now, peer, proximity(self_, location), complete);
  }
  // Gossip says the peer is dead or left: drop it everywhere.
  void remove_candidate(TimePoint now, const PeerId& peer);

  void on_connected(TimePoint now, const PeerId& peer);
  void on_connect_failed(TimePoint now, const PeerId& peer);
  void on_disconnected(TimePoint now, const PeerId& peer);
  void on_bitfield(TimePoint now, const PeerId& peer, const core::Bitfield& bits);
  // The holder will (not) serve our requests now. A new neighbour starts
  // unchoked unless `starts_choked` was set; choking drops its requests.
  // An unchoke past the slot share is handed back (DeclineSlotAction) and
  // asked for again (AskSlotAgainAction) as slots held end: see
  // keep_slot_share.
  void on_choked(TimePoint now, const PeerId& peer);
  void on_unchoked(TimePoint now, const PeerId& peer);
  // Neighbours serving us through one of their upload slots right now:
  // connected and unchoked, neither a host mate (served outside the slots)
  // nor a super-seed (a publisher's slots carry what nobody else has yet).
  // One with nothing we want counts too: counting only those with requests
  // in flight, a fetcher would take every unchoke of its first moments,
  // when nothing is in flight yet.
  std::size_t slot_sources() const { return neighbourhood_.slot_sources(); }
  // How many upload slots of holders beyond the host this fetch holds at
  // once: the share of its host's slots that it offers (SwarmCore). 0, the
  // default: no limit. With a share, the fetch keeps to it
  // (keep_slot_share, decline_slot), unless it pulls across the WAN.
  void set_slot_share(TimePoint now, std::size_t share);
  // Some neighbour beyond the host, other than a super-seed, is across the
  // WAN: what this fetch brings across is paced by the WAN, not by slots.
  bool pulls_across_wan() const { return neighbourhood_.pulls_across_wan(); }
  // Requests sent and not yet answered, to every neighbour.
  std::size_t in_flight_total() const { return requests_.in_flight_total(); }
  void on_have(TimePoint now, const PeerId& peer, ShardIndex shard);
  // The neighbour holds every shard but reveals them gradually: shards
  // nobody has shown us are not lost while it is connected.
  void on_super_seed(TimePoint now, const PeerId& peer);
  // A host mate has begun bringing `shard` across the NIC we share (kFetching):
  // it is not asked across the NIC here while the mate is at it, so each
  // shard crosses a node's NIC once. The claim lasts until the mate holds
  // the shard or goes; once it is a request_timeout old and this fetch has
  // nothing in flight, it no longer binds (the mate may have stalled).
  // When both began it, the higher rendezvous score keeps it, and the other
  // cancels its requests for it beyond the host.
  // Ignored unless `peer` is a neighbour on this host.
  void on_mate_fetching(TimePoint now, const PeerId& peer, ShardIndex shard);
  // The mate withdrew its claim on `shard` (kNotFetching): without the
  // withdrawal, a mate choked mid-shard keeps the others from the shard
  // until its claim lapses, a request timeout.
  void on_mate_not_fetching(TimePoint now, const PeerId& peer, ShardIndex shard);
  // Whether a payload for this block may be written into the destination
  // now: the block is still missing and its shard is not being verified.
  // (The caller also makes sure no other payload for it is landing.)
  bool wants_block(ShardIndex shard, BlockIndex block) const;
  // The block's bytes are in the destination (the driver wrote them there).
  void on_block(TimePoint now, const PeerId& peer, ShardIndex shard, BlockIndex block);
  // The peer's payload for this block has begun to land (the driver writes
  // it into the destination). Its request stays until the payload ends
  // (on_block, superseded, refused) or the connection goes: it no longer
  // times out, and the block gets no endgame duplicate. Every other copy
  // would be turned away while it lands, and re-asked at once: with a
  // payload stalled mid-way (a holder frozen, a link down), that loop would
  // run at link speed. A payload that stalls for good is the driver's to
  // end, by closing its connection (SwarmCore: kLandingLimitTimeouts).
  void on_block_landing(TimePoint now, const PeerId& peer, ShardIndex shard, BlockIndex block);
  // The peer's copy arrived but was turned away unwritten: the block was
  // received already, or another copy of it was landing.
  void on_block_superseded(TimePoint now, const PeerId& peer, ShardIndex shard, BlockIndex block);
  // The peer will not serve it (not held, or busy).
  void on_block_refused(TimePoint now, const PeerId& peer, ShardIndex shard, BlockIndex block);
  // The holder, across the WAN, sends this shard to a mate of ours in this
  // datacenter: it is not asked across the WAN for a while.
  void on_block_deferred(TimePoint now, const PeerId& peer, ShardIndex shard, BlockIndex block);
  void on_verified(TimePoint now, ShardIndex shard, bool good);
  void handle_timeout(TimePoint now);
  TimePoint next_timeout() const { return timers().next(); }
  // Every timer of this fetch, from its state.
  core::TimerTable<FetchTimer> timers() const;

  // The next action. With none left, a fetch with nothing in flight asks
  // again every holder whose unchoke it handed back.
  std::optional<FetchAction> poll();

  bool done() const { return done_; }
  const core::Bitfield& have() const { return have_; }
  // Whether the fetch wants every shard (it is of no selection).
  bool wants_all() const { return wanted_.all(); }
  // A shard this fetch still needs: wanted and not held.
  bool needs(ShardIndex shard) const { return wanted_.test(shard.value) && !have_.test(shard.value); }
  // Who has a use for our HAVE of `shard`, set into `out` in id order, once
  // each: of `requesters`, those not neighbours known to hold it (a
  // super-seed never counts as one: its reveals are paced by the HAVEs of
  // what it revealed), and of `sources`, the super-seeds. One merge walk of
  // each set with the neighbours (they share the id order), not a lookup
  // per peer per verified shard.
  void audience_of_have(ShardIndex shard, const std::set<PeerId>& requesters, const std::set<PeerId>& sources,
                        std::vector<PeerId>& out) const;
  FetchProgress progress() const;
  const ShardLayout& layout() const { return layout_; }

 private:
  // Neighbours allowed past max_neighbours to reach shards none of them has.
  static constexpr std::size_t kExtraNeighbours = 4;
  // Host mates are connected past max_neighbours, up to this many (a host
  // has a peer per GPU: 8 or 16, not hundreds).
  static constexpr std::size_t kMaxHostMates = 32;
  struct Shard {
    core::Bitfield received;               // blocks in the destination
    std::vector<PeerId> sources;           // per block: who sent it
    std::uint32_t received_count = 0;
    bool started = false;
    bool verifying = false;
    bool claimed = false;  // host mates told (ClaimAction): it was asked beyond the host
    // Fetched again after failing with several senders: every block from
    // this one neighbour (the first asked), so that a failure names its
    // sender. Cleared when that neighbour stops serving us.
    std::optional<PeerId> only_from;
  };

  void schedule(TimePoint now);
  void fill(TimePoint now, const PeerId& id, const Neighbour& n);
  bool request_next(TimePoint now, const PeerId& id, const Neighbour& n);
  // Withdraws (UnclaimAction) our claims on started shards that no
  // neighbour beyond the host and serving us holds.
  void withdraw_stranded_claims();
  void send_request(TimePoint now, const PeerId& id, const Neighbour& n, ShardIndex shard, BlockIndex block);
  void drop_request(ShardIndex shard, BlockIndex block, const PeerId& peer);
  // Counts a block left with no request as asked of nobody (unless received).
  void on_block_freed(ShardIndex shard, BlockIndex block);
  // Drops the requests to `peer`. `still_answered`: its holder was told
  // nothing (no cancel, the connection stays), so request_of keeps naming
  // their blocks until answered or the connection goes.
  void release_requests_of(const PeerId& peer, bool still_answered = false);
  void lose_neighbour(TimePoint now, const PeerId& peer, bool ban, const std::string& reason);
  // Drops the neighbour and stops fetching from it, keeping the connection
  // (ReleaseAction): traded away, a surplus slot, or a probe unanswered.
  void release_neighbour(TimePoint now, const PeerId& peer);
  void connect_more(TimePoint now);
  // Lost holders whose back-off is over become candidates again.
  void retry_lost_holders(TimePoint now);
  // REQUIRES: neighbourhood_.candidates().contains(chosen).
  void connect_to(TimePoint now, const PeerId& chosen);
  void check_starvation(TimePoint now);
  // Past the share, the slot with the fewest requests in flight is handed
  // back (ReleaseAction): a fetcher that was starved takes every unchoke
  // (SwarmCore) and kept them, so others waited. Short of the share while
  // it waits in holders' queues, it probes config_.slot_probes more
  // candidates for a free slot, and gives up each that has not unchoked it
  // within slot_probe_after. Supply and demand of slots match exactly (each
  // peer offers its share and holds as much); with the holders it knows
  // all taken, a fetcher would wait for a turn (2 s) that a short transfer
  // never reaches. Both halves are needed to keep every node near its NIC's
  // rate.
  void keep_slot_share(TimePoint now);
  // The unchoke side of the slot share. A fetcher holds at most its share
  // of other holders' upload slots: an unchoke beyond that is handed back.
  // The holders handed back are asked again (ask_declined_again) as slots
  // held end (choked, released, gone), and all of them once nothing is in
  // flight. Holders unchoke whoever waits, drawn at random, so without the
  // share slots fall to fetchers unevenly and stay there for a whole
  // transfer shorter than a rotation. A starved fetch that pulls across the
  // WAN takes the slot; so does one asked again while starved. Returns
  // whether the unchoke was handed back.
  bool decline_slot(const PeerId& peer);
  void ask_declined_again();
  // `peer` serves us no more (choked, released or gone): it is neither a
  // slot held nor one handed back, and others may be asked again.
  void slot_ended(const PeerId& peer);
  void clear_starvation();
  void finish(Status status);
  std::size_t wan_in_flight() const { return requests_.in_flight_remote(); }
  Shard& shard_state(ShardIndex s);

  ShardLayout layout_;
  core::Bitfield have_;
  core::Bitfield wanted_;          // every shard, unless the fetch is of a selection
  std::uint32_t needed_left_ = 0;  // shards wanted and not yet held
  Location self_;
  PeerId self_id_;
  FetchConfig config_;
  // The payloads landing in the destination now.
  Landings landings_{config_.request_timeout * kLandingLimitTimeouts, config_.min_landing_bytes_per_second};
  PiecePicker picker_;
  std::map<std::uint32_t, Shard> shards_;  // started, not yet verified
  // Whom this fetch knows: candidates, neighbours and what they showed.
  Neighbourhood neighbourhood_;
  // The requests in flight, and the pace of the neighbours they went to.
  RequestTable requests_{layout_, config_.request_timeout};
  // Where each shard may come from, and what those rules remember.
  SourceRules source_rules_{self_id_, config_, neighbourhood_, requests_};
  core::ActionQueue<FetchAction> actions_;
  std::uint64_t unrequested_ = 0;  // blocks of wanted shards neither received nor in flight
  TimePoint last_scheduled_;  // requests overdue before this were already considered
  RequestIds* request_ids_ = nullptr;  // the constructor's `ids`
  std::optional<TimePoint> starved_since_;
  std::optional<TimePoint> connect_due_;  // new candidates wait for the burst to end
  TimePoint last_swap_;                   // an idle neighbour last traded for a candidate (starvation)
  std::optional<TimePoint> trade_since_;  // starved past the neighbour limit since
  std::optional<TimePoint> swap_due_;     // when to try the next trade (cleared with the starvation)
  std::uint64_t bytes_received_ = 0, bytes_from_wan_ = 0;
  std::uint32_t bad_shards_ = 0;
  // Per shard, the last neighbour that alone sent it and failed its
  // verification: what a fetch that then runs out of holders names as the
  // cause, not only that nobody holds it.
  std::map<std::uint32_t, PeerId> failed_senders_;
  // Shards that failed verification with several senders, not yet verified
  // since: each is fetched again from one sender (Shard::only_from). Blame
  // falls only on a sender that alone sent a shard that failed, so a liar
  // among honest co-senders gets nobody else banned.
  std::set<std::uint32_t> retry_alone_;
  std::uint64_t requests_timed_out_ = 0;
  std::uint64_t duplicate_bytes_ = 0;
  bool endgame_ = false;
  // The upload slots of other holders this fetch holds, hands back and probes for.
  SlotShare slots_;
  bool done_ = false;
};

}  // namespace tensorhub::swarm
