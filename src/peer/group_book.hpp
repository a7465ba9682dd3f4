// The model-parallel groups this peer is a rank of, and what it knows of
// their other ranks: the core of group commit (docs/parts.md, "Group
// commit"). No I/O; time is an input.
//
// A group is `size` ranks with one name, the ranks of one inference
// instance. Each rank's peer claims (name, size, rank) in its gossip record;
// from those claims every rank knows which peer is which rank, and from
// then on the ranks talk directly: each sends its GroupState (the versions
// it stages and how far each is) to every other rank when it changes and
// every kHeartbeat. A rank not heard from for kSilence, or that gossip says
// is gone, is lost.
//
// Commit is a barrier every rank enters: a rank in commit(v) that holds v
// verified says kCommitting; its commit succeeds (kCommitted) when every
// other rank says kCommitting or kCommitted for v under the same version
// id, and stages no model at v that this rank does not. It fails at once
// when a rank is lost (silent, or its peer left or died and nobody has
// claimed the rank since), says it cannot stage v, staged another id or
// another model, or two peers claim one rank; otherwise it waits, naming
// the ranks it waits for. Once the group decided (this rank committed v,
// or a rank says it did under the same id), a rank that holds v commits
// at once whatever else is wrong: a decision is never undone. A rank that stops waiting (timeout,
// failure) withdraws (back to kStaged); one that saw the others committing
// before the withdrawal arrived has committed, which the rank that gave up
// learns from committed() and catches up to. A rank that dies before it
// commits thus fails its group's commit: it never says kCommitting.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/time.hpp"
#include "gossip/peer_record.hpp"
#include "peer/group_state.hpp"
#include "tensorhub/ids.hpp"
#include "tensorhub/status.hpp"

namespace tensorhub::peer {

class GroupBook {
 public:
  static constexpr Duration kHeartbeat = std::chrono::milliseconds(500);
  static constexpr Duration kSilence = std::chrono::seconds(2);
  static constexpr std::size_t kMaxGroups = gossip::kMaxRecordGroups;

  // Becomes `rank` of `size` in group `name`. Joining the same again is a
  // no-op. Errors: kInvalidArgument (a bad name, a rank not below a size of
  // 1 to gossip::kMaxGroupSize), kAlreadyExists (this peer is another rank
  // of that group, or of another size), kResourceExhausted (kMaxGroups).
  Status join(TimePoint now, const std::string& name, std::uint32_t size, std::uint32_t rank);
  void leave(const std::string& name);
  bool is_member(const std::string& name) const { return groups_.count(name) != 0; }
  // The claims for this peer's gossip record (sorted by name).
  std::vector<gossip::GroupEntry> claims() const;

  // What this rank says of a version it stages for `name`: set, or
  // replaced. A group keeps kMaxGroupStages; past that a finished stage
  // goes (a failed one, the lowest version first; then a committed one
  // that is not its model's newest committed). False, and nothing changes,
  // when none can go (every stage staging, staged, committing or its
  // model's newest committed: release one). REQUIRES: is_member(name).
  bool set_stage(const std::string& name, StageEntry entry);
  void drop_stage(const std::string& name, const std::string& model, std::uint64_t version);
  // This rank's own stages of `name` (nullptr: not a member).
  const std::vector<StageEntry>* own_stages(const std::string& name) const;

  // Gossip: `peer`'s record now claims `claims` (none: it claims nothing,
  // or it left); a member gone.
  void on_record(TimePoint now, const PeerId& peer, const std::vector<gossip::GroupEntry>& claims);
  void on_gone(TimePoint now, const PeerId& peer) { on_record(now, peer, {}); }
  // A rank's GroupState from `from`. Believed only from the peer whose
  // record claims that rank of that group, of that size; returns false
  // (ignored) otherwise.
  bool on_state(TimePoint now, const PeerId& from, const GroupState& state);

  // Each (peer, encoded GroupState) due now: to every other rank's peer of
  // each group, when this rank's state changed since it was last sent to
  // it, a peer newly claims a rank, or kHeartbeat passed.
  struct Outgoing {
    PeerId peer;
    std::vector<std::uint8_t> bytes;
  };
  std::vector<Outgoing> due(TimePoint now);
  // Notes the ranks that fell silent by `now`: true when one did since the
  // last call (a commit waiting may fail now).
  bool handle_timeout(TimePoint now);
  // The earliest a heartbeat is due or a rank not yet noted silent falls
  // silent (kTimeNever: no group).
  TimePoint next_timeout() const;

  // Commit of `version` (every model this rank staged at that number) in
  // `name`: this rank's staged stages of it say kCommitting. OK: every
  // other rank says kCommitting or kCommitted; this rank's stages of it are
  // kCommitted now. Either way the change goes with the next due().
  // kUnavailable: waiting; the message names each rank waited for
  // ("rank 2: staging 'policy' v7 (45%)").
  // kAborted: it cannot commit; the message names each rank at fault
  // ("rank 1: not heard from for 2.1 s"). kInvalidArgument: this rank
  // stages no such version; kNotFound: not a member of `name`.
  Status commit(TimePoint now, const std::string& name, std::uint64_t version);
  // This rank stops waiting in commit(version): its kCommitting stages of
  // it say kStaged again.
  void withdraw(const std::string& name, std::uint64_t version);
  // The highest version of `model` that a rank of `name` (this one
  // included) says it committed: what a late rank catches up to. nullopt:
  // none says so.
  std::optional<std::uint64_t> committed(const std::string& name, const std::string& model) const;

  // One rank as this peer sees it, for status and messages.
  struct RankView {
    std::uint32_t rank = 0;
    std::vector<PeerId> claimants;  // peers whose records claim it (more than one: a conflict)
    bool self = false;
    bool heard = false;             // a GroupState came from its claimant
    TimePoint last_heard;
    std::vector<StageEntry> stages;
  };
  std::vector<RankView> ranks(const std::string& name) const;

 private:
  struct Rank {
    std::set<PeerId> claimants;     // live peers whose records claim this rank at the group's size
    TimePoint claimed_since;        // the current single claimant first claimed it (silence counts from then)
    std::optional<TimePoint> last_heard;
    bool silence_noted = false;       // handle_timeout saw it silent; cleared when it is heard
    std::optional<PeerId> gone;       // its last claimant left or died (no claimant now)
    std::vector<StageEntry> stages;  // from its last GroupState
    bool owes_state = true;          // this rank's state has not reached it since it changed
    TimePoint last_sent;
  };
  struct Group {
    std::uint32_t size = 0;
    std::uint32_t rank = 0;
    std::vector<StageEntry> own;  // sorted by (model, version)
    std::map<std::uint32_t, Rank> others;
    std::map<PeerId, std::uint32_t> other_size_claims;  // peers claiming the group at another size
  };
  GroupState own_state(const std::string& name, const Group& g) const;
  void changed(Group& g);
  // Why `r` cannot take part now (lost, conflict), or nothing.
  std::optional<std::string> fault(TimePoint now, std::uint32_t rank, const Rank& r) const;

  std::map<std::string, Group> groups_;
  // What each live member's record claims (at most kMaxRecordGroups each):
  // a group joined later finds its ranks here, and a claim a peer's next
  // record drops is undone.
  std::map<PeerId, std::vector<gossip::GroupEntry>> claims_by_peer_;
  TimePoint gone_now_;  // the time of the record being applied (remove_claim's clock)
  void add_claim(TimePoint now, const PeerId& peer, const gossip::GroupEntry& claim);
  void remove_claim(const PeerId& peer, const gossip::GroupEntry& claim);
};

}  // namespace tensorhub::peer
