// A deterministic in-process network of whole peers: each runs the real
// peer core over the real gossip core (sim::GossipNetwork) and a data plane
// in virtual time, with real bytes. This is the tests' driver of PeerCore,
// beside the runtime's (peer_engine) and the simulator's.
//
// Data plane: VirtualLinks; a piece's bytes are read from the holder's
// memory when it is served. Hashing and copies run at once, as
// events of their own. Peers can crash (their connections break at once;
// gossip declares them dead in its own time) and be silenced (they take
// connections and say nothing: a peer that answers no manifest request).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/virtual_time_queue.hpp"
#include "core/virtual_timer.hpp"
#include "peer/peer_core.hpp"
#include "support/gossip_network.hpp"
#include "support/virtual_links.hpp"

namespace tensorhub::testing {

class PeerNetwork {
 public:
  explicit PeerNetwork(std::uint64_t seed, peer::PeerCoreConfig config = {});
  ~PeerNetwork();

  // A peer that joins through `seeds` (peer indices; none: the first).
  std::size_t add_peer(Location where, const std::vector<std::size_t>& seeds = {});
  // Every gossip identity of this network, trusted as publishers by default.
  static Identity identity(std::size_t peer) { return sim::GossipNetwork::identity_for(peer); }

  void crash(std::size_t peer);
  // The peer accepts connections and never answers a message again.
  void silence(std::size_t peer) { links_.silence(peer); }

  // Publishes `image` as the next version of `model` on `peer`.
  Result<std::shared_ptr<peer::LocalVersion>> publish(std::size_t peer, const std::string& model,
                                                      std::span<const std::byte> image, std::vector<TensorEntry> tensors);
  // The same from regions laid end to end.
  Result<std::shared_ptr<peer::LocalVersion>> publish(std::size_t peer, const std::string& model,
                                                      std::span<const ConstRegion> regions,
                                                      std::vector<TensorEntry> tensors);
  // Publishes a copy of `image` (kept by this network) as part `part` of
  // `model` v`version` on `peer`, after the head that peer knows.
  Result<std::shared_ptr<peer::LocalVersion>> publish_part(std::size_t peer, const std::string& model,
                                                           std::uint64_t version, PartOf part,
                                                           std::span<const std::byte> image,
                                                           std::vector<TensorEntry> tensors);
  // Fetches into memory this network owns (empty destination) or `destination`.
  Result<std::shared_ptr<peer::LocalVersion>> fetch(std::size_t peer, const std::string& model, std::uint64_t version,
                                                    std::span<std::byte> destination = {});
  // Into regions laid end to end (none: memory this network owns), in `domain`.
  Result<std::shared_ptr<peer::LocalVersion>> fetch(std::size_t peer, const std::string& model, std::uint64_t version,
                                                    std::span<const MutableRegion> regions,
                                                    const peer::MemoryDomain& domain = peer::host_memory());
  // A version in parts fetched whole: `whole` (memory this network owns)
  // receives the whole model, each part landing at its places.
  struct PartsFetch {
    std::span<std::byte> whole;
    std::vector<std::shared_ptr<peer::LocalVersion>> parts;
  };
  Result<PartsFetch> fetch_parts(std::size_t peer, const std::string& model, std::uint64_t version);
  void release(std::size_t peer, const std::shared_ptr<peer::LocalVersion>& v,
               peer::ReleaseMode mode = peer::ReleaseMode::kNow, std::function<void()> done = {});

  void run_for(Duration d) { run_until(now() + d); }
  void run_until(TimePoint t);
  // Runs until `done()` holds (checked every `step`) or `limit` passes.
  bool run_until(const std::function<bool()>& done, Duration limit, Duration step = std::chrono::milliseconds(20));
  TimePoint now() const { return events_.now(); }

  peer::PeerCore& core(std::size_t peer) { return *peers_[peer].core; }
  sim::GossipNetwork& gossip() { return gossip_; }
  const PeerId& id(std::size_t peer) const { return gossip_.id(peer); }
  bool alive(std::size_t peer) const { return peers_[peer].core != nullptr; }
  // Heads each peer's core announced (HeadChanged), in order.
  const std::vector<VersionInfo>& heads_seen(std::size_t peer) const { return peers_[peer].heads; }
  // Reports (log lines) each peer's core made.
  const std::vector<std::string>& reports(std::size_t peer) const { return peers_[peer].reports; }
  // Those of them at error level.
  const std::vector<std::string>& errors(std::size_t peer) const { return peers_[peer].errors; }
  // Messages of a type one peer sent another so far.
  std::size_t messages(std::size_t from, std::size_t to, swarm::MessageType type) const {
    return links_.messages(from, to, type);
  }
  std::uint64_t bytes_served(std::size_t peer) const { return links_.bytes_served(peer); }
  std::uint64_t bytes_copied(std::size_t peer) const { return peers_[peer].bytes_copied; }
  // Payload bytes a peer's pieces carried of one version.
  std::uint64_t piece_bytes_received(std::size_t peer) const { return peers_[peer].piece_bytes_received; }

 private:
  struct Peer {
    std::unique_ptr<peer::PeerCore> core;
    core::VirtualTimer timer;
    std::vector<VersionInfo> heads;
    std::vector<std::string> reports, errors;
    std::vector<std::vector<std::byte>> owned;  // destinations this network allocated
    std::uint64_t bytes_copied = 0, piece_bytes_received = 0;
    // The callers of release waiting for each version's ReleaseMemory.
    std::map<const peer::LocalVersion*, std::vector<std::function<void()>>> release_waiters;
  };
  enum class Kind { kLink, kTimer, kHashed, kCopied };
  struct Event {
    TimePoint at;
    Kind kind = Kind::kTimer;
    std::size_t to = 0;
    std::optional<LinkEvent> link;  // kLink
    std::uint64_t number = 0;  // kTimer: generation; kHashed: shard
    std::shared_ptr<peer::LocalVersion> version;  // kHashed, kCopied
    bool good = false;  // kHashed
    std::vector<ShardIndex> failed;  // kCopied: copies that did not verify
    std::uint64_t fetch_serial = 0;  // kHashed: the fetch the result is for
  };

  void schedule(Event e) { events_.schedule(std::move(e)); }
  void drain(std::size_t peer);
  void arm(std::size_t peer);
  void dispatch(Event& e);
  std::optional<std::size_t> index_of(const PeerId& id) const;

  peer::PeerCoreConfig config_;
  sim::GossipNetwork gossip_;
  core::VirtualTimeQueue<Event> events_{TimePoint(std::chrono::seconds(1))};
  std::vector<Peer> peers_;
  VirtualLinks<peer::PieceLanding> links_{std::chrono::microseconds(200), [this](TimePoint at, LinkEvent e) {
                                            const std::size_t to = e.to;
                                            schedule(Event{at, Kind::kLink, to, std::move(e), 0, nullptr, false, {}});
                                          }};
};

}  // namespace tensorhub::testing
