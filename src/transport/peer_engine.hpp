// The runtime's driver of the peer core: asio for gossip (UDP and TCP) and
// the data plane (TCP), a worker pool for hashing and copying, and the
// leases that keep a version's memory alive while pieces are sent from it.
//
// Every method runs on the I/O thread; heavy work never does.
#pragma once

#include <asio.hpp>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/work_pool.hpp"
#include "seams/data_transport.hpp"
#include "peer/peer_core.hpp"
#include "transport/peer_internal.hpp"
#include "seams/rdma_memory.hpp"
#include "transport/tcp_transport.hpp"
#include "tensorhub/devices.hpp"
#include "tensorhub/peer.hpp"
#include "transport/data_connection.hpp"
#include "transport/gossip_runtime.hpp"
#include "transport/mate_server.hpp"
#include "transport/member_hosts.hpp"
#include "transport/stage_copies.hpp"
#include "transport/staged_payloads.hpp"
#include "transport/version_lease.hpp"
#include "transport/version_watches.hpp"
#include "manifest/selection.hpp"

namespace tensorhub::rdma {
class RdmaTransport;
}  // namespace tensorhub::rdma
namespace tensorhub::peer {

// The smallest block a peer asks for: smaller ones cost a request per few
// KiB and make fetches crawl.
inline constexpr std::uint32_t kMinBlockSize = 4u << 10;
// The bound on counts an application sets (neighbours, upload slots,
// retained replicas).
inline constexpr std::size_t kMaxCount = 4096;
// OK when the options' sizes and counts are in range; kInvalidArgument
// naming the first that is not.
Status validate_limits(const PeerOptions& options);

class PeerEngine final : public TransportEvents, private RdmaMemory {
 public:
  // `callbacks` runs the application's callbacks (subscribers), never on the I/O thread.
  PeerEngine(asio::io_context& io, PeerOptions options, InternalOptions internal, Identity identity,
             SwarmKey swarm_key, std::function<void(std::function<void()>)> run_callback);
  ~PeerEngine() override;

  Status start();
  void leave(std::function<void()> done);
  void close();

  const PeerId& id() const { return identity_.public_key(); }
  const core::HostPort& gossip_address() const { return gossip_->bound(); }

  // The number and parent of the next publication of `model`.
  // Errors: kPermissionDenied (this peer's key is not a trusted publisher);
  // kUnavailable while the number cannot be known yet (started with seeds
  // and heard from no peer, or gossip names a head not verified here).
  Result<HeadTracker::NextVersion> next_version(const std::string& model) const;
  // Errors: as PeerCore::publish.
  // `domain`: where the image lies (host memory unless told); REQUIRES: it
  // outlives the version.
  Result<std::shared_ptr<LocalVersion>> publish(std::shared_ptr<const Manifest> manifest, core::ConstRegions image,
                                                const MemoryDomain& domain = host_memory());
  // The parent the parts of `model` v`version` name: the head's id (zero
  // before any head). Errors: as next_version; kAlreadyExists (the head
  // is v`version` or newer).
  Result<ManifestId> part_parent(const std::string& model, std::uint64_t version) const;
  // Whether `model` v`version` is on its way here and not believed yet:
  // a part of it is known, or gossip names it (or a later head).
  bool expects(const std::string& model, std::uint64_t version) const;
  // `views`: the selections the manifest was built with
  // (ManifestBuildOptions::views), each of whose views of the part is
  // served. Errors: as PeerCore::publish_part.
  Result<std::shared_ptr<LocalVersion>> publish_part(std::shared_ptr<const Manifest> manifest,
                                                     core::ConstRegions image,
                                                     std::span<const std::vector<TensorSelection>> views,
                                                     const MemoryDomain& domain = host_memory());
  // Errors: as PeerCore::part_sealed.
  Status part_sealed(const LocalVersion& part) const { return core_->part_sealed(part); }
  // Errors: as PeerCore::resolve and PeerCore::fetch; kIoError when memory
  // for the destination cannot be had.
  // `domain`: where the destination lives (host memory unless told);
  // REQUIRES: it outlives the version, or `backing` owns it. `backing`,
  // kept as long as the version, owns what the destination and the domain
  // belong to when the caller hands that over (an output file).
  Result<std::shared_ptr<LocalVersion>> fetch(const std::string& model, std::uint64_t number,
                                              core::MutableRegions destination,
                                              const MemoryDomain& domain = host_memory(),
                                              std::shared_ptr<DestinationOwner> backing = {});
  // The version in parts `model` v`number` is; null for a whole version.
  // Errors: as PeerCore::resolve_version.
  Result<std::shared_ptr<const manifest::SealedVersion>> sealed_version(const std::string& model,
                                                                        std::uint64_t number) const;
  // Fetches a version in parts whole into `destination` (empty: allocated
  // here, in host memory): one fetch per part, in part order, each landing
  // its bytes where they belong in the whole model (landing_regions); a
  // part's bytes of no tensor land in host memory its fetch owns. A failure
  // releases the parts started. Errors: as fetch; kInvalidArgument also for
  // a destination of another size, or a part with bytes of no tensor
  // fetched into memory the host cannot write.
  struct PartsFetch {
    std::vector<std::shared_ptr<LocalVersion>> parts;
    core::MutableRegions whole;  // the destination they land in
    // Each part's landing runs into it, in the order of `parts`.
    std::vector<std::vector<manifest::LandingRun>> runs;
  };
  // `backing`: what the destination belongs to (an output file), kept by
  // every part's fetch and told of a failure; nullptr: the caller's.
  Result<PartsFetch> fetch_parts(std::shared_ptr<const manifest::SealedVersion> sealed,
                                 core::MutableRegions destination, const MemoryDomain& domain = host_memory(),
                                 std::shared_ptr<DestinationOwner> backing = nullptr);
  // The layout of a selection of `model` v`number` (a whole version or
  // one in parts): manifest::selected_layout over its whole tensors.
  // Errors: as resolve_version; as selected_layout.
  Result<std::vector<TensorEntry>> selection_layout(const std::string& model, std::uint64_t number,
                                                    std::span<const TensorSelection> selection) const;
  // Fetches a selection of `model` v`number` into `destination` (laid out
  // as selection_layout; empty: allocated here, in host memory): one fetch
  // of the wanted shards of each image (the version's, or each part's)
  // that holds selected bytes, each landing those bytes where they belong
  // (selection_runs); the other bytes of its wanted shards land in host
  // scratch its fetch owns (reserve_sparse). `parts` are in image order,
  // skipping images that hold no selected byte. A failure releases the
  // fetches started. Errors: as fetch; as selection_layout;
  // kInvalidArgument also for a destination of another size than the
  // selection, or, into memory the host cannot write (GPU memory), no
  // destination or an image the selection takes bytes of without a
  // declared view (views land whole; shards would need host scratch).
  struct SelectionFetch {
    PartsFetch fetches;
    std::vector<TensorEntry> tensors;  // the selection's layout
  };
  // `backing`: as fetch_parts.
  Result<SelectionFetch> fetch_selection(const std::string& model, std::uint64_t number,
                                         std::span<const TensorSelection> selection, core::MutableRegions destination,
                                         const MemoryDomain& domain = host_memory(),
                                         std::shared_ptr<DestinationOwner> backing = nullptr);
  // What other threads see of `version` (published or fetched here):
  // kept until its memory is released.
  std::shared_ptr<const VersionWatch> watch_of(const std::shared_ptr<LocalVersion>& version) const;
  // `done` runs on the I/O thread once the memory is its owner's again.
  void release(const std::shared_ptr<LocalVersion>& version, ReleaseMode mode, std::function<void()> done);

  std::optional<VersionInfo> latest(const std::string& model) const { return core_->latest(model); }
  // Errors: as PeerCore::equivocation_above.
  Status equivocation_above(const std::string& model, std::uint64_t after) const {
    return core_->equivocation_above(model, VersionNumber{after});
  }
  // Errors: as PeerCore::resolve.
  Result<VersionInfo> version_info(const std::string& model, std::uint64_t version) const;
  // Errors: as version_info.
  Result<std::shared_ptr<const Manifest>> manifest(const std::string& model, std::uint64_t version) const;
  // One flag per shard of `v`: verified here.
  std::vector<bool> verified_shards(const LocalVersion& v) const;
  void subscribe(const std::string& model, std::function<void(const VersionInfo&)> callback);
  // Peers that proved they hold `id`; challenges those that claim it and
  // have not (PeerCore::challenge_holders).
  std::size_t replicas(const ManifestId& id) {
    core_->challenge_holders(now(), id);
    pump();
    return core_->replicas(id);
  }
  // Model-parallel groups: as PeerCore's.
  Status join_group(const std::string& name, std::uint32_t size, std::uint32_t rank) {
    Status joined = core_->join_group(now(), name, size, rank);
    pump();
    return joined;
  }
  void leave_group(const std::string& name) {
    core_->leave_group(now(), name);
    pump();
  }
  Status stage_for_group(const std::string& name, const std::string& model, std::uint64_t version,
                         const ManifestId& id, std::vector<std::shared_ptr<LocalVersion>> versions) {
    Status staged = core_->stage_for_group(now(), name, model, VersionNumber{version}, id, std::move(versions));
    pump();
    return staged;
  }
  Status commit_group(const std::string& name, std::uint64_t version) {
    Status committed = core_->commit_group(now(), name, version);
    pump();
    return committed;
  }
  void withdraw_from_commit(const std::string& name, std::uint64_t version) {
    core_->withdraw_from_commit(now(), name, version);
    pump();
  }
  std::optional<std::uint64_t> group_committed(const std::string& name, const std::string& model) const {
    return core_->groups().committed(name, model);
  }
  std::string status_json() const;
  // Errors: kInvalidArgument (a list that does not name this peer).
  Status set_members(std::vector<PublicKey> members);
  // kUnavailable while this peer, started with seeds, has heard from no
  // other peer: no seed answered (not running, unreachable, or holding
  // another swarm key). OK once any peer was heard, or without seeds.
  Status join_status() const;
  // Runs `fn` (on the I/O thread) whenever gossip or a transfer changed something.
  void on_change(std::function<void()> fn) { change_listeners_.push_back(std::move(fn)); }

  // TransportEvents
  void on_connected(const PeerId& peer) override;
  void on_connect_failed(const PeerId& peer) override;
  void on_disconnected(const PeerId& peer) override;
  void on_message(const PeerId& peer, const swarm::SwarmMessage& message) override;
  void piece_destination(const PeerId& peer, const swarm::SwarmMessage& header,
                         std::vector<std::span<std::byte>>& out) override;
  void on_piece_progress(const PeerId& peer, const swarm::SwarmMessage& header) override;
  void on_piece(const PeerId& peer, const swarm::SwarmMessage& header, bool stored) override;
  void on_piece_lost(const PeerId& peer, const swarm::SwarmMessage& header) override;

 private:
  // The manifest of `image`'s view of `selected` (a selection's layout),
  // when its publisher declared that view; none otherwise.
  static std::optional<std::shared_ptr<const Manifest>> declared_view(const Manifest& image,
                                                                      std::span<const TensorEntry> selected);
  // Releases the fetches `started` (a fetch of several that failed part way)
  // and returns `why`.
  Status release_started(const std::vector<std::shared_ptr<LocalVersion>>& started, Status why);
  // One fetch of `m`'s image landing through `runs` in `destination`
  // (landing_regions): bytes of no place land in host scratch the fetch
  // owns. `wanted`, `selection`: as PeerCore::fetch. Errors: as
  // PeerCore::fetch; kInvalidArgument (scratch needed in memory the host
  // cannot write).
  Result<std::shared_ptr<LocalVersion>> fetch_landing(const std::shared_ptr<const Manifest>& m,
                                                      std::span<const manifest::LandingRun> runs,
                                                      const core::MutableRegions& destination,
                                                      const MemoryDomain& domain,
                                                      const std::shared_ptr<DestinationOwner>& backing,
                                                      core::Bitfield wanted,
                                                      std::optional<ManifestId> selection = std::nullopt);
  void pump();
  // A version just published here: its watch, and (GPU memory) its mirror.
  void published(const std::shared_ptr<LocalVersion>& v, const MemoryDomain& domain);
  // After close(): gives memory back, tells waiters and logs; drops the rest.
  void pump_closed();
  void log_report(const Report& report);
  void arm_timer();
  // The transport that reaches `peer`: RDMA (over TCP) where built and a
  // device exists, else TCP.
  DataTransport& transport_for(const PeerId& peer);
  RdmaStatus rdma_status() const;
  // RdmaMemory: versions in host memory, for READs.
  std::optional<HeldRegions> served_regions(const ManifestId& version_id) override;
  std::optional<HeldRegions> landing_regions(const ManifestId& version_id) override;
  void read_destination(const PeerId& peer, const swarm::SwarmMessage& header,
                        std::vector<std::span<std::byte>>& out) override;
  void run_off_thread(std::function<void()> job) override { pool_.submit(std::move(job)); }
  // Holds a use of `v`'s lease (its memory is not released) until dropped.
  std::shared_ptr<void> keep_version(const std::shared_ptr<LocalVersion>& v);
  // `regions` of `v` as a NIC registers them (MemoryDomain::nic_access:
  // by address or through dma-bufs), kept while registered; nothing when
  // the NICs cannot reach them.
  // Begins the landing of the piece `header` from `peer` and says where its
  // bytes go: the version's memory, or, when `staged` and the host cannot
  // touch that memory, a staging buffer (stage_payload). Empty: not wanted.
  void begin_landing(const PeerId& peer, const swarm::SwarmMessage& header, bool staged,
                     std::vector<std::span<std::byte>>& out);
  std::optional<HeldRegions> nic_regions(const std::shared_ptr<LocalVersion>& v,
                                         std::vector<std::span<std::byte>> regions);
  std::optional<asio::ip::tcp::endpoint> data_endpoint_of(const PeerId& peer) const;
  void serve_piece(const swarm::ServePiece& serve);
  // Serves a piece from a copy of its bytes, made on the pool: from memory
  // the host cannot read, or corrupted on purpose (InternalOptions).
  void serve_copied_piece(const swarm::ServePiece& serve, std::shared_ptr<LocalVersion> version,
                          std::shared_ptr<VersionLease> source);
  // Serves a piece of a version the host cannot read by filling a buffer of
  // its domain's stage and sending from it; false when there is no stage or
  // no free buffer.
  bool serve_through_stage(const swarm::ServePiece& serve, const std::shared_ptr<LocalVersion>& version,
                           const std::shared_ptr<VersionLease>& source);
  // A filled piece's buffer is sent (or, when the fill failed, given back).
  void send_filled(StageCopies::Copy fill, bool filled);
  // Serves a piece of a version the host cannot read from its host mirror
  // (PeerOptions::mirror_gpu_versions); false when there is none yet (one is
  // started once the version is complete).
  bool serve_from_mirror(const swarm::ServePiece& serve, const std::shared_ptr<LocalVersion>& version,
                         const std::shared_ptr<VersionLease>& source);
  // Starts filling `version`'s host mirror on the pool, unless it has been
  // started. REQUIRES: the version is complete.
  void start_mirror(const std::shared_ptr<LocalVersion>& version, const std::shared_ptr<VersionLease>& source);
  // Payloads for versions the host cannot write (peer_engine_staging.cpp):
  // received into a stage's buffer or a host buffer, then landed.
  void stage_payload(const PeerId& peer, const swarm::SwarmMessage& header, const PieceLanding& landing,
                     std::vector<std::span<std::byte>>& out);
  // Ends a staged payload's receipt; false when `header` names none.
  bool end_staged_payload(const PeerId& peer, const swarm::SwarmMessage& header, bool stored);
  // Copies through a stage that ended: landed payloads count as stored
  // pieces, filled pieces are sent.
  void on_copies_ended(std::vector<StageCopies::Ended> ended);
  // The requester's fetch of the version ended: its allowance starts again.
  void requester_done(const PeerId& peer, const ManifestId& version_id);
  void hash_shard(const HashShard& job);
  void copy_shards(CopyShards job);
  void release_memory(ReleaseMemory release);
  // The local channel to host mates (mate_channel.hpp, mate_server.hpp,
  // peer_engine_mates.cpp): a complete version's memory, lent to a mate
  // that asks (a use of its lease until the mate is done), and the copy of
  // shards from a mate.
  // Errors: kNotFound (not held here), kUnavailable (held only in part),
  // and the domain's share() errors.
  Result<MateServer::Loan> lend_to_mate(const ManifestId& version_id);
  void copy_from_mate(CopyFromMate job);
  std::shared_ptr<VersionLease> lease_of(const std::shared_ptr<LocalVersion>& version);
  void head_changed(const VersionInfo& head);
  // `s`, with why it may have failed when this peer never joined.
  Status with_join_status(Status s) const;
  static TimePoint now();
  // The admission list for `members`; null when empty. Errors:
  // kInvalidArgument (a list that does not name this peer).
  Result<std::shared_ptr<const gossip::GossipCore::AdmissionList>> admission_list(
      const std::vector<PublicKey>& members) const;

  asio::io_context& io_;
  PeerOptions options_;
  InternalOptions internal_;
  Identity identity_;
  SwarmKey swarm_key_;
  std::function<void(std::function<void()>)> run_callback_;
  std::unique_ptr<transport::GossipRuntime> gossip_;
  std::unique_ptr<TcpTransport> tcp_;
  std::unique_ptr<rdma::RdmaTransport> rdma_;  // null: no RDMA device, or PeerOptions::rdma off
  std::string rdma_note_;                // why there is no RDMA transport
  std::unique_ptr<PeerCore> core_;
  std::shared_ptr<const gossip::GossipCore::AdmissionList> admitted_;  // null: anyone with the swarm key
  MemberHosts member_hosts_;  // the acceptor prefers handshakes from them under a flood
  asio::steady_timer timer_;
  TimePoint timer_at_ = kTimeNever;
  std::map<const LocalVersion*, std::shared_ptr<VersionLease>> leases_;
  // What other threads see of each version held, and who waits for its memory.
  VersionWatches watches_;
  std::vector<std::span<const std::byte>> serve_pieces_;  // reused by serve_piece
  std::map<std::string, std::vector<std::function<void(const VersionInfo&)>>> subscribers_;
  std::vector<std::function<void()>> change_listeners_;
  bool closed_ = false;
  bool joined_ = false;  // some other peer was heard of since start
  std::unique_ptr<asio::steady_timer> join_check_;  // logs a peer that joined nobody
  std::list<asio::steady_timer> release_timers_;     // the releases' graces (release_memory)
  // Payloads being received for versions the host cannot write into in
  // place, and the copies through a stage in flight (landings and fills).
  StagedPayloads staged_;
  StageCopies copies_;
  MateServer mates_;                      // not listening: no mate channel
  std::uint64_t mate_shards_copied_ = 0;  // shards verified here after a copy from a host mate
  std::uint64_t mate_bytes_copied_ = 0;
  std::optional<CudaDevices> gpus_;  // probed once at start; empty until the probe ends
  // Alive as long as the engine: what keep_version hands out posts to the
  // I/O thread only while it is.
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
  core::WorkPool pool_;  // last: its jobs finish before the rest goes
};

}  // namespace tensorhub::peer
