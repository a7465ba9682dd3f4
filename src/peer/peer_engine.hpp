// The peer's engine, on its I/O thread: it wires the gossip runtime, the
// data connections and the swarm core to the versions this peer holds.
//
// - Gossip records tell it who holds what, where peers are, and which heads
//   exist; it fetches and verifies the manifest of every new head before
//   believing it (signature by a trusted publisher, chain to its parent when
//   the parent is known), then announces the head in its own record.
// - The swarm core decides what to request and serve; the engine opens data
//   connections to the addresses in gossip records, sends pieces straight from
//   version memory, receives them straight into the destination, and hashes
//   completed shards.
// - It publishes progress (coarse) and completion in its gossip record.
//
// Every method runs on the I/O thread.
#pragma once

#include <asio.hpp>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gossip/version_vector.hpp"
#include "peer/data_link.hpp"
#include "peer/local_version.hpp"
#include "swarm/retention.hpp"
#include "swarm/swarm_core.hpp"
#include "tensorhub/peer.hpp"
#include "transport/data_connection.hpp"
#include "transport/gossip_runtime.hpp"

namespace tensorhub::peer {

class PeerEngine : public transport::DataConnectionHandler {
 public:
  PeerEngine(asio::io_context& io, PeerOptions options, Identity identity, SwarmKey swarm_key);
  ~PeerEngine() override;

  Status start();
  void leave(std::function<void()> done);
  void close();

  const PeerId& id() const { return identity_.public_key(); }
  const core::HostPort& gossip_address() const { return gossip_->bound(); }

  Result<std::shared_ptr<LocalVersion>> publish(const std::string& model, std::span<const std::byte> image,
                                                std::vector<TensorEntry> tensors);
  Result<std::shared_ptr<LocalVersion>> fetch(const std::string& model, std::uint64_t number,
                                              std::span<std::byte> destination);
  enum class ReleaseMode {
    kHonourRetention,  // defer while this peer is among the last R holders of the head
    kNow,              // release at once (also cuts short a deferral in progress)
  };
  // Stops serving; `done` runs once no piece is being sent from its memory
  // (after the deferral, if retention asks for one).
  void release(const std::shared_ptr<LocalVersion>& version, ReleaseMode mode, std::function<void()> done);

  std::optional<VersionInfo> latest(const std::string& model) const;
  void subscribe(const std::string& model, std::function<void(const VersionInfo&)> callback);
  std::size_t replicas(const ManifestId& id) const;
  std::string status_json() const;
  // Runs `fn` whenever gossip or a transfer changed something (for waiters).
  void on_change(std::function<void()> fn) { change_listeners_.push_back(std::move(fn)); }

  // DataConnectionHandler
  void on_established(transport::DataConnection& connection) override;
  void on_message(transport::DataConnection& connection, swarm::SwarmMessage message) override;
  std::span<std::byte> piece_destination(transport::DataConnection& connection,
                                         const swarm::SwarmMessage& header) override;
  void on_piece(transport::DataConnection& connection, const swarm::SwarmMessage& header, bool stored) override;
  void on_piece_progress(transport::DataConnection& connection, const swarm::SwarmMessage& header) override;
  void on_closed(transport::DataConnection& connection, const Status& why) override;

 private:
  struct Model {
    std::optional<VersionInfo> head;                 // newest verified
    std::map<ManifestId, Manifest> manifests;        // verified manifests we know
    std::vector<std::function<void(const VersionInfo&)>> subscribers;
    // Manifests asked for and not yet here: when. An answer can be lost
    // (the peer asked dies, or its connection fails), so a manifest asked
    // longer than kManifestRetry ago is asked again of the next peer whose
    // record names it. (Namespace cluster, chaos seed 2: a worker asked a
    // peer that was SIGKILLed a moment later and never fetched the version.)
    std::map<ManifestId, TimePoint> asked;
  };

  void accept_data();
  void on_member_event(const gossip::MemberEvent& event);
  void learn_from_record(const gossip::PeerRecord& record);
  void request_manifest(const std::string& model, const gossip::HeadEntry& head, const PeerId& from);
  void on_manifest(const PeerId& from, const swarm::SwarmMessage& message);
  Status accept_manifest(const Manifest& manifest);
  void start_fetch(const std::shared_ptr<LocalVersion>& version);
  void pump_swarm();
  void arm_swarm_timer();
  void open_connection(const PeerId& peer);
  std::optional<asio::ip::tcp::endpoint> data_endpoint_of(const PeerId& peer) const;
  void attach_lane(transport::DataConnection& connection);
  void send(const PeerId& peer, const swarm::SwarmMessage& message);
  void serve_piece(const swarm::ServePiece& serve);
  void verify(const swarm::VerifyShard& verify);
  void finished(const ManifestId& id, const Status& status);
  void update_holding(const LocalVersion& version, std::uint16_t permille);
  void release_now(const std::shared_ptr<LocalVersion>& version, std::function<void()> done);
  swarm::ReleaseFacts release_facts(const LocalVersion& version) const;
  // Releases the deferred versions whose reason to wait has gone.
  void release_due(bool all);
  void arm_deferral_timer();
  void notify_changed();
  std::shared_ptr<LocalVersion> find_version(const ManifestId& id) const;
  static TimePoint steady_now_();

  asio::io_context& io_;
  PeerOptions options_;
  Identity identity_;
  SwarmKey swarm_key_;
  std::unique_ptr<transport::GossipRuntime> gossip_;
  asio::ip::tcp::acceptor data_acceptor_;
  core::HostPort data_bound_;
  swarm::SwarmCore swarm_;
  asio::steady_timer swarm_timer_;
  TimePoint swarm_timer_at_ = kTimeNever;
  std::map<PeerId, DataLink> links_;                                           // established
  std::map<PeerId, std::shared_ptr<transport::DataConnection>> connecting_;   // outbound, in handshake
  std::vector<std::shared_ptr<transport::DataConnection>> accepting_;         // inbound, in handshake
  std::map<PeerId, std::vector<swarm::SwarmMessage>> pending_;                 // to send once connected
  std::map<ManifestId, std::shared_ptr<LocalVersion>> versions_;
  std::map<std::string, Model> models_;
  std::map<ManifestId, std::vector<std::shared_ptr<LocalVersion>>> awaiting_manifest_;
  std::vector<std::function<void()>> change_listeners_;
  swarm::DeferredReleases deferred_releases_;
  std::map<ManifestId, std::vector<std::function<void()>>> deferred_done_;  // per deferred version
  asio::steady_timer deferral_timer_;
  bool closed_ = false;
};

}  // namespace tensorhub::peer
