// A deterministic in-process network of swarm cores moving real bytes.
//
// Each peer has a SwarmCore and its own copy of the image (complete for
// holders, being filled for fetchers), over VirtualLinks: a publisher's
// uplink is a real bottleneck and the swarm effect is visible. Shards are
// verified with the manifest's real hashes; a "corrupt" holder flips a byte
// in everything it serves. Peers can crash
// and join at any time. Gossip is not simulated here: every peer learns the
// holders and fetchers of a version from the network (the gossip tests cover
// how that information spreads).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/random_fill.hpp"
#include "core/virtual_time_queue.hpp"
#include "core/virtual_timer.hpp"
#include "support/virtual_links.hpp"
#include "swarm/swarm_core.hpp"
#include "tensorhub/manifest.hpp"

namespace tensorhub::testing {

class SwarmNetwork {
 public:
  SwarmNetwork(std::uint64_t seed, const Manifest& manifest, std::vector<std::byte> image,
               swarm::SwarmConfig config = {});

  // A peer that holds the whole version (the publisher, say), super-seeding
  // unless told otherwise.
  std::size_t add_holder(swarm::Location where, double uplink_bytes_per_second,
                         swarm::SwarmCore::ServeMode mode = swarm::SwarmCore::ServeMode::kSuperSeed);
  // A peer that starts fetching now.
  std::size_t add_fetcher(swarm::Location where, double uplink_bytes_per_second);
  void crash(std::size_t peer);
  // Makes a holder serve corrupted bytes.
  void corrupt(std::size_t peer) { peers_[peer].corrupt = true; }
  // The peer stops serving the version (release); in-flight pieces still go.
  void stop_serving(std::size_t peer);

  void run_until(TimePoint t);
  bool run_until(const std::function<bool()>& done, Duration limit, Duration step = std::chrono::milliseconds(20));
  TimePoint now() const { return events_.now(); }

  std::size_t size() const { return peers_.size(); }
  bool alive(std::size_t peer) const { return peers_[peer].core != nullptr; }
  // The fetch outcome, once finished.
  const std::optional<Status>& result(std::size_t peer) const { return peers_[peer].result; }
  std::optional<TimePoint> finished_at(std::size_t peer) const { return peers_[peer].finished_at; }
  bool complete(std::size_t peer) const;
  bool image_matches(std::size_t peer) const { return peers_[peer].image == image_; }
  std::uint64_t bytes_served(std::size_t peer) const { return links_.bytes_served(peer); }
  // Messages of a type one peer sent another so far.
  std::size_t messages(std::size_t from, std::size_t to, swarm::MessageType type) const {
    return links_.messages(from, to, type);
  }
  std::size_t count_complete() const;
  std::size_t count_finished() const;

 private:
  struct Peer {
    PeerId id;
    swarm::Location location;
    std::unique_ptr<swarm::SwarmCore> core;
    std::vector<std::byte> image;
    bool corrupt = false;
    bool holder = false;
    std::optional<Status> result;
    std::optional<TimePoint> finished_at;
    core::VirtualTimer timer;
  };
  struct Event {
    TimePoint at;
    std::size_t to = 0;
    std::optional<LinkEvent> link;  // none: the peer's timer, of `generation`
    std::uint64_t generation = 0;
  };

  std::size_t add_peer(swarm::Location where, double uplink, bool holder,
                       swarm::SwarmCore::ServeMode mode = swarm::SwarmCore::ServeMode::kSuperSeed);
  void introduce(std::size_t peer);
  void drain(std::size_t peer);
  void arm(std::size_t peer);
  void dispatch(Event& e);
  std::optional<std::size_t> index_of(const PeerId& id) const;

  const Manifest& manifest_;
  std::vector<std::byte> image_;
  swarm::ShardLayout layout_;
  swarm::SwarmConfig config_;
  core::SplitMix64 rng_;
  std::vector<Peer> peers_;
  std::map<PeerId, std::size_t> by_id_;
  core::VirtualTimeQueue<Event> events_{TimePoint(std::chrono::seconds(1))};
  static constexpr Duration kLatency = std::chrono::microseconds(200);
  VirtualLinks<swarm::PieceTarget> links_{kLatency, [this](TimePoint at, LinkEvent e) {
                                            const std::size_t to = e.to;
                                            events_.schedule(Event{at, to, std::move(e), 0});
                                          }};
};

}  // namespace tensorhub::testing
