// A deterministic in-process network of swarm cores moving real bytes.
//
// Each peer has a SwarmCore and its own copy of the image (complete for
// holders, being filled for fetchers). Messages arrive after a latency;
// pieces also wait for the sender's uplink (bytes / uplink rate, one piece
// after another), so a publisher's uplink is a real bottleneck and the swarm
// effect is visible. As on a real connection, a piece's header arrives when
// its first byte does (begin_piece) and its payload is written when its last
// byte does (on_piece); closing the connection in between drops it. Shards are verified with the manifest's real hashes;
// a "corrupt" holder flips a byte in everything it serves. Peers can crash
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
  std::uint64_t bytes_served(std::size_t peer) const { return peers_[peer].bytes_served; }
  // Messages of a type one peer sent another so far.
  std::size_t messages(std::size_t from, std::size_t to, swarm::MessageType type) const {
    auto it = messages_.find({from, to, type});
    return it == messages_.end() ? 0 : it->second;
  }
  std::size_t count_complete() const;
  std::size_t count_finished() const;

 private:
  struct Peer {
    PeerId id;
    swarm::Location location;
    std::unique_ptr<swarm::SwarmCore> core;
    std::vector<std::byte> image;
    double uplink = 1e9;
    TimePoint uplink_free;
    bool corrupt = false;
    bool holder = false;
    std::optional<Status> result;
    std::optional<TimePoint> finished_at;
    std::uint64_t bytes_served = 0;
    core::VirtualTimer timer;
  };
  enum class Kind { kMessage, kPieceHeader, kPiece, kConnected, kConnectFailed, kDisconnected, kTimer };
  // A piece between its header and its last byte, by the serial its two
  // events share (in Event::generation).
  struct Landing {
    std::size_t to = 0, from = 0;
    std::optional<swarm::PieceTarget> target;
  };
  struct Event {
    TimePoint at;
    Kind kind;
    std::size_t to = 0, from = 0;
    swarm::SwarmMessage message;
    std::vector<std::byte> payload;
    std::uint64_t generation = 0;
  };

  std::size_t add_peer(swarm::Location where, double uplink, bool holder,
                       swarm::SwarmCore::ServeMode mode = swarm::SwarmCore::ServeMode::kSuperSeed);
  void introduce(std::size_t peer);
  void schedule(Event e);
  void drain(std::size_t peer);
  void arm(std::size_t peer);
  void dispatch(Event& e);
  std::optional<std::size_t> index_of(const PeerId& id) const;
  // The connection between the two is gone: pieces on it stop landing.
  void drop_landings(std::size_t a, std::size_t b);

  const Manifest& manifest_;
  std::vector<std::byte> image_;
  swarm::ShardLayout layout_;
  swarm::SwarmConfig config_;
  core::SplitMix64 rng_;
  Duration latency_ = std::chrono::microseconds(200);
  std::vector<Peer> peers_;
  std::map<PeerId, std::size_t> by_id_;
  std::map<std::tuple<std::size_t, std::size_t, swarm::MessageType>, std::size_t> messages_;
  std::map<std::uint64_t, Landing> landings_;
  std::uint64_t next_piece_serial_ = 1;
  core::VirtualTimeQueue<Event> events_{TimePoint(std::chrono::seconds(1))};
};

}  // namespace tensorhub::testing
