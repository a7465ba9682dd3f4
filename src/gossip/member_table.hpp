// Everything a peer believes about the other members, and the SWIM merge
// rules that keep those beliefs consistent.
//
// Liveness per member is (state, incarnation). Ordering of claims:
//  - a signed record at incarnation i says "alive at i" (or "left at i" if it
//    is a leave); a newer (incarnation, seq) replaces the record;
//  - suspect at i overrides alive at i' <= i; dead at i overrides alive or
//    suspect at i' <= i;
//  - alive at i overrides suspect or dead at i' < i: that is a refutation or
//    a restart with a higher incarnation;
//  - dead and left are final for their incarnation: members stay as
//    tombstones (for tombstone_ttl), so stale state cannot resurrect them.
// The peer itself is never in its own table.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <set>
#include <unordered_map>
#include <vector>

#include "core/time.hpp"
#include "gossip/gossip_wire.hpp"
#include "gossip/id_set.hpp"
#include "gossip/peer_record.hpp"
#include "gossip/replay_window.hpp"
#include "gossip/suspicion.hpp"

namespace tensorhub::gossip {

struct Member {
  RecordPtr record;                 // newest valid record; never null
  Liveness liveness = Liveness::kAlive;
  std::uint64_t incarnation = 0;    // the incarnation `liveness` refers to
  TimePoint since;                  // when `liveness` last changed
  std::optional<Suspicion> suspicion;
  // The signed claim behind a suspect or dead `liveness`, relayed as it is.
  std::optional<LivenessItem> claim;
  ReplayWindow replay;              // for datagrams from this member
  // When this member may next start a suspicion of another here (GCRA's
  // theoretical arrival time; see GossipCore::process_liveness).
  TimePoint accusations_tat;
  TimePoint last_probed;            // by this peer
  TimePoint last_reminded;          // when this peer last re-spread its suspicion
  // When this peer last answered a datagram of another boot (a life of this
  // identity that has not heard of the newest record) with that record.
  TimePoint last_boot_correction;

  const PeerId& id() const { return record->record.id; }
  bool is_live() const { return liveness == Liveness::kAlive || liveness == Liveness::kSuspect; }
};

enum class RecordOutcome { kStale, kJoined, kUpdated, kAliveAgain, kLeft, kFull };
enum class LivenessOutcome { kIgnored, kSuspected, kConfirmed, kDead };

struct SuspicionTimeouts {
  Duration min;
  Duration max;
  std::size_t expected_confirmations;
};

class MemberTable {
 public:
  explicit MemberTable(std::size_t max_members) : max_members_(max_members) {}

  Member* find(const PeerId& id);
  const Member* find(const PeerId& id) const;

  // Cheap pre-check on a record's (id, incarnation, seq), before paying for a
  // signature check: false when the record cannot change anything.
  bool is_news(const RecordVersion& version) const;

  // Applies a verified record. REQUIRES: record is not the peer's own.
  RecordOutcome apply_record(const RecordPtr& record, TimePoint now);

  // Applies a verified suspect or dead claim about another member. Another
  // member's word of death only starts or confirms a suspicion: no member
  // can kill another, only this peer's own suspicion timing out (declare_
  // dead) can, and the suspect may refute until then. (With dead claims
  // believed once a suspicion had 3 confirmations, a hostile member's dead
  // claims, sent as peers stalled, killed 1,112 times in the gossip
  // benchmark's 10 minutes of stalls at 100 peers; with none, 0.)
  LivenessOutcome apply_liveness(const LivenessItem& item, TimePoint now, const SuspicionTimeouts& timeouts);

  // Turns an expired suspicion into death, with this peer's signed claim of
  // it. True if the member was suspect.
  bool declare_dead(const LivenessItem& own_claim, TimePoint now);

  // Forgets a member, whatever its state. True if it was known.
  bool remove(const PeerId& id);
  // Drops tombstones older than ttl; returns the ids removed.
  std::vector<PeerId> expire_tombstones(TimePoint now, Duration ttl);

  std::size_t size() const { return members_.size(); }
  std::size_t live_count() const { return live_.size(); }
  // Alive or suspect members, and dead (not left) ones, for random choice.
  const IdSet& live() const { return live_; }
  const IdSet& dead() const { return dead_; }
  // Dead or left: the tombstones.
  const IdSet& tombstones() const { return tombstones_; }
  void for_each(const std::function<void(const Member&)>& fn) const;
  // The members currently suspect: O(suspects), not O(members).
  const std::set<PeerId>& suspects() const { return suspects_; }

  // This peer's view, for push-pull.
  std::vector<DigestEntry> digest() const;

 private:
  void set_liveness(Member& m, Liveness state, std::uint64_t incarnation, TimePoint now);
  void index(const Member& m);

  std::size_t max_members_;
  std::unordered_map<PeerId, Member> members_;
  // Invariants: live_ holds exactly the members with is_live(), dead_ those
  // with liveness kDead, tombstones_ those dead or left, suspects_ those with
  // kSuspect.
  IdSet live_;
  IdSet dead_;
  IdSet tombstones_;
  std::set<PeerId> suspects_;
};

// Ranks a liveness claim at an incarnation, for push-pull comparisons:
// (incarnation, alive < suspect < dead == left).
bool liveness_dominates(Liveness a, std::uint64_t a_inc, Liveness b, std::uint64_t b_inc);

}  // namespace tensorhub::gossip
