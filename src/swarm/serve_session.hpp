// The serving side of one version at one peer, with no I/O: who fetches it
// from us (requesters), the upload slots they take turns in, a super-seed's
// reveals and the requesters finishing their last turn, host mates served
// outside the slots, the carriers that take each shard across the WAN once,
// and the requests answered. The fetching side of the same version is its
// FetchSession; SwarmCore routes each message to the one it concerns.
//
// A ServeSession writes its actions (messages, pieces, dropped queues) into
// its core's action queue as it decides them, so they keep their order with
// the core's own.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/action_queue.hpp"
#include "core/bitfield.hpp"
#include "core/time.hpp"
#include "swarm/shard_layout.hpp"
#include "swarm/seed_scheduler.hpp"
#include "swarm/swarm_actions.hpp"
#include "swarm/swarm_messages.hpp"
#include "swarm/topology.hpp"
#include "swarm/upload_slots.hpp"
#include "tensorhub/ids.hpp"

namespace tensorhub::swarm {

// How long a super-seed's requester whose turn is over may still finish the
// shards revealed to it, in slot rotations.
inline constexpr int kFinishingRotations = 2;

// What a serve session needs to know of its peers from the core that holds it.
class ServePeers {
 public:
  virtual ~ServePeers() = default;
  // An unknown peer counts as remote.
  virtual Proximity proximity_of(const PeerId& peer) const = 0;
  virtual const Location* location_of(const PeerId& peer) const = 0;
  virtual bool connection_open(const PeerId& peer) const = 0;
  // When its connection last carried a message; nothing: no connection.
  virtual std::optional<TimePoint> last_heard(const PeerId& peer) const = 0;
};

struct ServeConfig {
  Duration slot_rotation = std::chrono::seconds(2);
  Duration request_timeout = std::chrono::seconds(2);
};

class ServeSession {
 public:
  // `have`: the version's shards held here, owned by the caller and kept up
  // to date as a fetch verifies more. `offered`: false for a leech, which
  // shows and serves nothing. REQUIRES: `have`, `peers` and `actions`
  // outlive the session.
  ServeSession(ManifestId id, ShardLayout layout, const core::Bitfield& have, UploadSlots slots, bool offered,
               ServeConfig config, const ServePeers& peers, core::ActionQueue<SwarmAction>& actions);
  ServeSession(const ServeSession&) = delete;
  ServeSession& operator=(const ServeSession&) = delete;

  // From now on, shards are revealed a few at a time to each requester
  // (BitTorrent's super-seeding).
  void super_seed(std::unique_ptr<SeedScheduler> seeder);

  // Neighbours that fetch the version from us.
  const std::set<PeerId>& requesters() const { return requesters_; }

  // Any message from `peer` about this version: a requester gone silent
  // with shards shown to it speaks again.
  void on_heard(TimePoint now, const PeerId& peer);
  // `m` is the peer's kInterested (with what it holds, for a super-seed).
  void on_interested(TimePoint now, const PeerId& peer, const SwarmMessage& m);
  void on_not_interested(TimePoint now, const PeerId& peer);
  void on_have(TimePoint now, const PeerId& peer, ShardIndex shard);
  // A block request: a piece to send, or a refusal, or a deferral to the
  // mate that carries the shard into the requester's datacenter.
  void on_request(TimePoint now, const PeerId& peer, const SwarmMessage& m);
  // Its connection closed.
  void on_gone(TimePoint now, const PeerId& peer);
  // Served here no more: each requester hears so (kUnknownVersion, not a
  // choke it would wait out) and its queued pieces are dropped.
  void stop();
  // A claim (kFetching) or its withdrawal (kNotFetching), to the host mates
  // that fetch from us: they alone would bring the shard across our NIC too.
  void tell_host_mate_requesters(MessageType type, ShardIndex shard);

  void handle_timeout(TimePoint now);
  // When each of its timers comes (kTimeNever: it does not stand).
  TimePoint slot_rotation_at() const { return slots_.next_timeout(); }
  TimePoint finishing_at() const;
  TimePoint reveal_at() const { return seeder_ ? seeder_->next_timeout() : kTimeNever; }
  TimePoint silence_check_at() const {
    return seeder_ && seeder_->total_pending() > 0 ? next_silence_check_ : kTimeNever;
  }

 private:
  void send(const PeerId& peer, SwarmMessage message) { actions_.push(SendMessage{peer, std::move(message)}); }
  void reveal(const std::vector<Reveal>& reveals);
  void drain_slots(TimePoint now);
  // A host mate: served whenever it asks, outside the upload slots, which
  // share out the NIC that its blocks never cross. (Not by a super-seed,
  // whose reveals follow its slots.)
  bool served_outside_slots(const PeerId& peer) const;
  // Stops serving `peer` now.
  void choke(const PeerId& peer);
  // Peer exchange: tells a new requester of up to kMaxPeersListed others
  // that fetch the version from us, nearest to it first. Fetchers otherwise
  // find each other only as their gossip records spread (a round per hop),
  // and meanwhile all pull from the holders gossip named first.
  void introduce_requesters(const PeerId& newcomer);
  // Each shard goes into another datacenter once: whether a requester there
  // (a mate of `peer`) carries `shard` over now, so `peer` should get it from
  // that mate; if not, `peer` becomes its carrier. A carrier stops counting
  // 4 x request_timeout after its last request for the shard, when it is
  // choked, and when its connection closes: a lost carrier costs a deferral,
  // not the shard.
  bool carried_by_a_mate(TimePoint now, const PeerId& peer, ShardIndex shard);
  void forget_carrier(const PeerId& peer);
  // A super-seed's requester with shards shown to it that has said nothing
  // for a while (2 request timeouts; 8 across the WAN, where a block takes
  // longer) is suspended (SeedScheduler::suspend) until it speaks again.
  void check_silence(TimePoint now);

  ManifestId id_;
  ShardLayout layout_;
  const core::Bitfield& have_;
  UploadSlots slots_;
  bool offered_;  // shown and served to requesters (false: fetched by a leech)
  ServeConfig config_;
  const ServePeers& peers_;
  core::ActionQueue<SwarmAction>& actions_;
  std::unique_ptr<SeedScheduler> seeder_;  // when super-seeding
  std::set<PeerId> requesters_;
  // Those of the requesters on our host, whom our claims (kFetching) concern.
  // Invariant: exactly the members of requesters_ on our host.
  std::vector<PeerId> host_mate_requesters_;
  // A super-seed's requesters whose turn is over, served until they hold
  // what was revealed to them (kFinishingRotations at most): since when.
  std::map<PeerId, TimePoint> finishing_;
  // Shards this holder sends into other datacenters: per (datacenter,
  // shard), the requester carrying it across and when it last asked for
  // it. Bounded by shards x datacenters; a carrier's entries go when it is
  // choked or its connection closes.
  struct WanCarrier {
    PeerId peer;
    TimePoint last_asked;
  };
  std::map<std::pair<std::string, std::uint32_t>, WanCarrier> wan_carriers_;
  // A super-seed looks for requesters gone silent with shards shown to them
  // (check_silence) this often, while any are shown.
  TimePoint next_silence_check_{};
};

}  // namespace tensorhub::swarm
