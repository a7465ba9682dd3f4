// A deterministic in-process network of gossip cores, for tests, the
// gossip benchmark and the simulator's full-gossip mode.
//
// Virtual time, one event queue, one seeded RNG: a run is a pure function of
// its seed and its script, so a failing seed replays exactly. Datagrams suffer
// seeded loss, delay, jitter (which reorders) and duplication; streams are
// reliable and ordered, like TCP, but break on partitions and crashes.
// Peers can crash, restart with the same key, stall (process nothing for a
// while, like a long GC pause), and be partitioned into groups.
//
// Hundreds or thousands of cores share one process: they share a caching
// RecordDecoder so each distinct signed record is verified once, not once per
// peer (production peers verify everything themselves).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/rng.hpp"
#include "core/time.hpp"
#include "core/virtual_time_queue.hpp"
#include "gossip/gossip_core.hpp"

namespace tensorhub::sim {

struct NetworkConditions {
  double loss = 0.0;            // probability a datagram is lost
  double duplicate = 0.0;       // probability a datagram is delivered twice
  Duration latency = std::chrono::microseconds(500);
  Duration jitter = std::chrono::microseconds(0);  // uniform extra delay; reorders
};

class GossipNetwork {
 public:
  // Virtual time starts at `start`.
  GossipNetwork(std::uint64_t seed, gossip::GossipConfig config, NetworkConditions conditions = {},
                TimePoint start = TimePoint(std::chrono::seconds(1)));
  ~GossipNetwork();

  // Adds a peer (not yet joined). Its identity is derived from `key_index`
  // (default: its peer index), so a restart can keep it.
  std::size_t add_peer(gossip::Topology topology = {}, std::optional<std::uint64_t> key_index = std::nullopt);
  // A peer holding another swarm key: it can send, but nobody can read it.
  std::size_t add_outsider();
  void join(std::size_t peer, const std::vector<std::size_t>& seeds);
  // Starts every peer with every other's current record (GossipCore::preload):
  // a converged swarm without a join storm, for large benchmarks.
  void preload_all();

  void crash(std::size_t peer);
  // Starts a crashed peer again with the same identity and a new incarnation
  // (the virtual time in ms, or `incarnation`: one below its past life's is a
  // clock that stepped back), and joins it through `seeds`.
  void restart(std::size_t peer, const std::vector<std::size_t>& seeds,
               std::optional<std::uint64_t> incarnation = std::nullopt);
  void leave(std::size_t peer);
  // The peer processes nothing for `how_long`; what arrives meanwhile waits.
  void stall(std::size_t peer, Duration how_long);
  // Peers in different groups cannot reach each other; unlisted peers form
  // one more group together.
  void partition(const std::vector<std::vector<std::size_t>>& groups);
  void heal();
  void set_conditions(const NetworkConditions& conditions) { conditions_ = conditions; }

  // One-way delay between two peers, for datagrams and stream frames (the
  // simulator's topology); conditions.latency when unset. Jitter adds to it.
  void set_latency(std::function<Duration(std::size_t from, std::size_t to)> latency) { latency_ = std::move(latency); }
  // After the caller changed a core (set_head, set_holding...): sends what
  // it queued and re-arms its timer.
  void pump(std::size_t peer) { drain(peer); }
  // The earliest pending event, or kTimeNever: for a driver that interleaves
  // this network with its own events.
  TimePoint next_event() const { return events_.empty() ? kTimeNever : events_.next_at(); }

  void run_for(Duration d) { run_until(now() + d); }
  void run_until(TimePoint t);
  // Runs until `done()` holds (checked every `step`) or `limit` passes.
  bool run_until(const std::function<bool()>& done, Duration limit, Duration step = std::chrono::milliseconds(50));

  TimePoint now() const { return events_.now(); }
  std::size_t size() const { return peers_.size(); }
  bool is_up(std::size_t peer) const { return peers_[peer].core != nullptr; }
  gossip::GossipCore& core(std::size_t peer) { return *peers_[peer].core; }
  const gossip::GossipCore& core(std::size_t peer) const { return *peers_[peer].core; }
  const PeerId& id(std::size_t peer) const { return peers_[peer].id; }
  std::uint64_t key_index(std::size_t peer) const { return peers_[peer].key_index; }
  const std::string& address(std::size_t peer) const { return peers_[peer].address; }
  std::optional<std::size_t> index_of(const PeerId& id) const;

  // Delivers raw bytes to a peer as a datagram from `from_address`, after the
  // usual latency (for attack tests: forged, replayed or foreign packets).
  void inject_datagram(std::size_t to, const std::string& from_address, std::vector<std::uint8_t> bytes);
  // Sees every datagram the network accepts for delivery.
  void on_datagram(std::function<void(std::size_t from, std::size_t to, const std::vector<std::uint8_t>&)> tap) {
    datagram_tap_ = std::move(tap);
  }
  // The key the members share (outsiders hold another).
  static SwarmKey members_key();
  static Identity identity_for(std::uint64_t key_index);

  // Called for every member event of every peer, as it happens.
  void on_event(std::function<void(std::size_t peer, const gossip::MemberEvent&)> handler) {
    event_handler_ = std::move(handler);
  }

  // Convenience checks over the live peers.
  // How `observer` sees `subject`: nullopt when unknown.
  std::optional<gossip::Liveness> view(std::size_t observer, std::size_t subject) const;
  // True when every live peer sees every other live peer as alive.
  bool converged() const;

  std::uint64_t datagrams_sent() const { return datagrams_sent_; }
  // The counts of every peer that is up, summed.
  gossip::GossipStats total_stats() const {
    gossip::GossipStats total;
    for (std::size_t p = 0; p < size(); ++p) {
      if (is_up(p)) total += core(p).stats();
    }
    return total;
  }
  std::uint64_t datagrams_lost() const { return datagrams_lost_; }

 private:
  struct Peer {
    std::string address;
    PeerId id;
    std::uint64_t key_index = 0;
    gossip::Topology topology;
    std::unique_ptr<gossip::GossipCore> core;
    bool outsider = false;
    TimePoint stalled_until;
    TimePoint timer_at = kTimeNever;
    std::uint64_t timer_generation = 0;
    int group = 0;
  };
  enum class EventKind { kDatagram, kTimer, kStreamAccepted, kStreamFrame, kStreamClosed };
  struct Event {
    TimePoint at;
    EventKind kind;
    std::size_t peer;
    std::uint64_t generation = 0;     // kTimer: matches Peer::timer_generation
    std::string from;                 // kDatagram, kStreamAccepted
    std::vector<std::uint8_t> bytes;  // kDatagram, kStreamFrame
    gossip::StreamId stream = 0;      // stream events: the id at `peer`
  };
  // Both ends of a stream: (peer, id at that peer).
  struct StreamLink {
    std::size_t a, b;
    gossip::StreamId a_id, b_id;
    TimePoint a_to_b_clock, b_to_a_clock;  // keep each direction in order
  };

  std::unique_ptr<gossip::GossipCore> make_core(std::size_t peer, bool outsider,
                                                std::optional<std::uint64_t> incarnation = std::nullopt);
  void schedule(Event e);
  void dispatch(Event& e);
  void drain(std::size_t peer);
  void arm_timer(std::size_t peer);
  bool reachable(std::size_t from, std::size_t to) const;
  void break_streams_of(std::size_t peer);
  Duration latency(std::size_t from, std::size_t to) const { return latency_ ? latency_(from, to) : conditions_.latency; }
  Duration datagram_delay(std::size_t from, std::size_t to);
  std::optional<std::size_t> peer_at(const std::string& address) const;
  void stream_send(std::size_t from, gossip::StreamId from_id, std::vector<std::uint8_t> frame);
  void stream_close(std::size_t from, gossip::StreamId from_id);

  gossip::GossipConfig config_;
  NetworkConditions conditions_;
  core::SplitMix64 rng_;
  std::uint64_t seed_;
  std::vector<Peer> peers_;
  std::unordered_map<std::string, std::size_t> by_address_;
  core::VirtualTimeQueue<Event> events_;
  std::function<Duration(std::size_t, std::size_t)> latency_;
  std::map<std::pair<std::size_t, gossip::StreamId>, std::shared_ptr<StreamLink>> streams_;
  std::uint64_t next_inbound_stream_ = 1;
  std::shared_ptr<gossip::RecordDecoder> decoder_;
  std::function<void(std::size_t, const gossip::MemberEvent&)> event_handler_;
  std::function<void(std::size_t, std::size_t, const std::vector<std::uint8_t>&)> datagram_tap_;
  std::uint64_t datagrams_sent_ = 0, datagrams_lost_ = 0;
};

}  // namespace tensorhub::sim
