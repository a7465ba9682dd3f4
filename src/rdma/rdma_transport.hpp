// The RDMA data transport: block payloads by one-sided RDMA READ from the
// holder's registered memory, everything else over the TCP transport it
// sits on (docs/rdma.md).
//
// Per neighbour, once the TCP link opens, each side creates its queue pairs
// (PeerOptions::rdma_queue_pairs per local NIC) and offers them in a session message
// (rdma/rdma_wire.hpp, carried as MessageType::kTransport); each connects
// its queue pair k to the other's queue pair k and says ready. A request
// for a version the neighbour has granted (ask-grant / grant: the
// version's regions and rkeys, REMOTE_READ only) becomes READs into the
// destination the peer names (TransportEvents::piece_destination), capped
// by each queue pair's credits; its completion is the piece (on_piece), a
// failure loses it (on_piece_lost: asked for again). The holder runs no
// code for it. Requests the neighbour cannot serve by READ (no grant yet,
// a version in memory RDMA cannot reach here or there, a path that failed)
// go over TCP, unchanged.
//
// A READ that fails leaves its queue pair in ERR: this side makes new
// queue pairs, connects them at once to the neighbour's last offer and
// offers them; the neighbour reconnects its own (through RESET, same
// numbers) and says ready. An offer never answers an offer. Twice in a row
// at most (PathHealth), then the neighbour uses TCP until its link is made
// again; so does a neighbour whose ready does not follow within
// kReadyLimit. A local fault (our registration or queue pair) rebuilds
// them on our other NICs; with none left, TCP. Every neighbour moves to TCP on a port error or a fatal
// device event.
//
// Runs on the I/O thread, like the engine that drives it.
#pragma once

#include <asio.hpp>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "seams/data_transport.hpp"
#include "seams/rdma_memory.hpp"
#include "rdma/rc_queue_pair.hpp"
#include "rdma/read_failure.hpp"
#include "rdma/nic_affinity.hpp"
#include "rdma/registered_regions.hpp"
#include "rdma/verbs_nic.hpp"

namespace tensorhub::rdma {

using peer::DataTransport;
using peer::HeldRegions;
using peer::LinkStats;
using peer::RdmaMemory;
using peer::RdmaStatus;
using peer::TransportEvents;

// Which NICs carry the READs: those nearest the memory they land in
// (nic_affinity.hpp): a GPU's by its place on the PCIe tree; host memory's
// by the NUMA node of its first page, or, while it has none yet, of the
// CPU the transport starts on (the peer's buffers are mostly there).
struct NicChoice {
  std::string sysfs_root = "/sys";
  // >= 0: the NUMA node of all host memory READs land in, whatever its pages say.
  int memory_node = -1;
};

class RdmaTransport final : public DataTransport, public TransportEvents {
 public:
  static constexpr std::size_t kMaxQueuePairsPerNic = 16;
  // A neighbour's offers that rebuild queue pairs, per minute: past this it
  // uses TCP (queue pairs are costly to make; a member may not make us
  // churn them).
  static constexpr std::size_t kMaxOffersPerMinute = 20;
  // A neighbour says ready this soon after its offer, or uses TCP.
  static constexpr std::chrono::seconds kReadyLimit{3};

  // Opens every NIC with an active port; null, with the reason in `note`,
  // when there is none. `up` hears what the neighbours send, as from TCP.
  // `queue_pairs`: per local NIC to each neighbour. REQUIRES: 1 to
  // kMaxQueuePairsPerNic.
  // Blocks are striped over the NICs `choice` ranks best (all of them when
  // their places are unknown).
  static std::unique_ptr<RdmaTransport> open(asio::io_context& io, TransportEvents& up, RdmaMemory& memory,
                                             std::string& note, std::size_t queue_pairs = 2, NicChoice choice = {});
  ~RdmaTransport() override;

  // REQUIRES: once, before any other call; `tcp` reports to this transport.
  void attach(DataTransport& tcp) { tcp_ = &tcp; }
  // `version`'s memory is about to be released: neighbours' grants end
  // (they hear revoke), READs landing in it stop, and its registrations go.
  // Returns once no READ touches the memory.
  void forget_version(const ManifestId& version_id);
  RdmaStatus status() const;

  // DataTransport
  std::string_view name() const override { return "rdma"; }
  void connect(const PeerId& peer) override { tcp_->connect(peer); }
  void disconnect(const PeerId& peer, const std::string& reason) override;
  void send(const PeerId& peer, const swarm::SwarmMessage& message) override;
  void send_piece(const PeerId& peer, const swarm::SwarmMessage& header,
                  std::span<const std::span<const std::byte>> pieces,
                  std::shared_ptr<transport::PieceSource> source) override {
    tcp_->send_piece(peer, header, pieces, std::move(source));
  }
  void cancel_piece(const PeerId& peer, swarm::RequestId request_id) override { tcp_->cancel_piece(peer, request_id); }
  void cancel_pieces_of(const PeerId& peer, const ManifestId& version_id) override {
    tcp_->cancel_pieces_of(peer, version_id);
  }
  std::vector<LinkStats> links() const override { return tcp_->links(); }
  void close() override;

  // TransportEvents, from TCP
  void on_connected(const PeerId& peer) override;
  void on_connect_failed(const PeerId& peer) override { up_.on_connect_failed(peer); }
  void on_disconnected(const PeerId& peer) override;
  void on_message(const PeerId& peer, const swarm::SwarmMessage& message) override;
  void piece_destination(const PeerId& peer, const swarm::SwarmMessage& header,
                         std::vector<std::span<std::byte>>& out) override {
    up_.piece_destination(peer, header, out);
  }
  void on_piece_progress(const PeerId& peer, const swarm::SwarmMessage& header) override {
    up_.on_piece_progress(peer, header);
  }
  void on_piece(const PeerId& peer, const swarm::SwarmMessage& header, bool stored) override {
    up_.on_piece(peer, header, stored);
  }
  void on_piece_lost(const PeerId& peer, const swarm::SwarmMessage& header) override { up_.on_piece_lost(peer, header); }

 private:
  struct Neighbour {
    std::vector<std::unique_ptr<rdma::RcQueuePair>> qps;  // ours; qps[k] pairs with their queue pair k
    std::vector<std::size_t> qp_nic;                      // our NIC of qps[k]
    std::vector<std::uint8_t> their_qp_nic;               // their NIC of their queue pair k (indexes rkeys)
    std::size_t their_nics = 0;                           // NICs in their latest offer: rkeys per grant region
    bool connected = false;                               // ours are in RTS, towards their latest offer
    bool offered = false;                                 // it offered queue pairs: it reads and serves by RDMA
    std::optional<rdma::RdmaMessage> their_offer;         // its latest: where its queue pairs are
    bool they_ready = false;
    std::string off_reason;  // non-empty: this neighbour uses TCP only, and why
    rdma::PathHealth health;
    // Our NICs that failed locally towards it (a local-fault completion):
    // its queue pairs are made on the others; all of them: TCP.
    std::set<std::size_t> faulted_nics;
    std::size_t next_qp = 0;
    std::map<ManifestId, std::vector<rdma::GrantRegion>> grants;  // theirs, to READ
    std::set<ManifestId> asked, refused;
    // Requests held until the session is ready and their version's grant is
    // answered (so a version's blocks all move by READ), then those waiting
    // for a credit.
    std::deque<swarm::SwarmMessage> held;
    std::deque<swarm::SwarmMessage> waiting;
    // Per queue pair, the blocks whose landing began, waiting to be posted
    // (together, one post per queue pair and turn).
    std::vector<std::deque<std::uint64_t>> planned;
    std::set<ManifestId> granted;             // ours, to it
    std::uint64_t reads = 0, bytes = 0, failed_reads = 0;
    std::deque<std::chrono::steady_clock::time_point> offers;  // in the last minute
    std::shared_ptr<asio::steady_timer> ready_timer;           // armed from its offer until its ready
  };
  struct Block {
    PeerId peer;
    swarm::SwarmMessage header;  // the piece it stands for
    std::size_t qp = 0;
    std::vector<rdma::ReadWork> work;  // until posted
    std::uint32_t reads_left = 0;
    bool failed = false;
    rdma::ReadFailure cause = rdma::ReadFailure::kNone;
  };
  struct Read {
    std::uint64_t block = 0;
    rdma::RcQueuePair* qp = nullptr;
  };
  struct NicWatch {
    std::unique_ptr<asio::posix::stream_descriptor> completions, events;
  };

  RdmaTransport(asio::io_context& io, TransportEvents& up, RdmaMemory& memory,
                std::vector<std::unique_ptr<rdma::VerbsNic>> nics, std::size_t queue_pairs, const NicChoice& choice);

  void send_session(const PeerId& peer, const rdma::RdmaMessage& message);
  void on_session(const PeerId& peer, const rdma::RdmaMessage& message);
  void on_offer(const PeerId& peer, Neighbour& n, const rdma::RdmaMessage& offer);
  void on_ask_grant(const PeerId& peer, Neighbour& n, const ManifestId& version_id);
  // New queue pairs for `n`, offered to it; the old ones go first (their
  // blocks are lost). False when the device refused (the neighbour then
  // uses TCP).
  bool make_queue_pairs(const PeerId& peer, Neighbour& n);
  // Connects (or reconnects, through RESET) our queue pairs to `offer`'s,
  // pairwise, and says ready. False when the device refused (then TCP).
  bool connect_to(const PeerId& peer, Neighbour& n, const rdma::RdmaMessage& offer);
  // Destroys `n`'s queue pairs (no READ of theirs lands after) and ends the
  // blocks in flight on them: lost (`report`) or silently (the link is gone).
  void drop_queue_pairs(const PeerId& peer, Neighbour& n, bool report);
  // Ends `n`'s blocks in flight, as drop_queue_pairs, keeping the queue pairs.
  void end_blocks(const PeerId& peer, Neighbour& n, bool report);
  void use_tcp(const PeerId& peer, Neighbour& n, const std::string& why);
  // The neighbour's ready must come within kReadyLimit (its offer was
  // received, or ours went to it), else it uses TCP.
  void arm_ready_timer(const PeerId& peer, Neighbour& n);
  // Tells the peer, on a later turn of the I/O thread, that these pieces are lost.
  void report_lost(const PeerId& peer, std::vector<swarm::SwarmMessage> lost);
  bool reading(const Neighbour& n) const;
  // Held requests move on: to `waiting` (granted), to TCP (refused), or stay.
  void release_held(const PeerId& peer, Neighbour& n);
  // Where `version`'s landing registration stands: ready, being made off
  // the I/O thread (started here if need be), or out of the NICs' reach.
  enum class Landing { kReady, kPending, kUnreachable };
  Landing landing(const ManifestId& version_id);
  // Registers `regions` off the I/O thread; `done` runs on it afterwards
  // unless `version`'s registration was forgotten meanwhile (a newer job,
  // or forget_version).
  // A landing's job also ranks the NICs for its memory (`nics`).
  void register_off_thread(const ManifestId& version_id, bool landing, HeldRegions regions);
  void on_registered(const ManifestId& version_id, bool landing, std::uint64_t job,
                     Result<rdma::RegisteredRegions> registered, std::vector<bool> nics);
  // Where READs into `version` go: the NICs nearest its landing's memory,
  // else those nearest the memory this transport started by.
  const std::vector<bool>& preferred_for(const ManifestId& version_id) const;
  // Starts the waiting requests the queue pairs' credits allow, then posts
  // what is planned: every queue pair's READs linked into one post.
  void pump(const PeerId& peer, Neighbour& n);
  // Begins `request`'s landing and plans its READs on queue pair `k`;
  // returns how many READs it planned (0: none, the piece ended at once).
  std::size_t start_block(const PeerId& peer, Neighbour& n, const swarm::SwarmMessage& request, std::size_t k);
  void post_planned(Neighbour& n, std::size_t k);
  void watch(std::size_t nic);
  void watch_events(std::size_t nic);
  void on_completions(std::size_t nic);
  void finish_block(std::uint64_t tag);

  asio::io_context& io_;
  const std::size_t queue_pairs_per_nic_;
  TransportEvents& up_;
  RdmaMemory& memory_;
  DataTransport* tcp_ = nullptr;
  std::vector<std::unique_ptr<rdma::VerbsNic>> nics_;
  std::vector<rdma::VerbsNic*> nic_list_;
  std::string sysfs_root_;
  int memory_node_ = -1;                    // NicChoice::memory_node
  std::vector<rdma::NicPlace> places_;      // by NIC: where it sits
  std::vector<bool> preferred_;             // by NIC: near the memory the transport started by
  std::map<ManifestId, std::vector<bool>> landing_nics_;  // by landing: its nearest NICs
  std::vector<std::uint64_t> nic_bytes_;    // by NIC: READ since start
  std::vector<NicWatch> watches_;
  std::map<PeerId, Neighbour> neighbours_;
  std::map<ManifestId, rdma::RegisteredRegions> served_, landing_;
  std::set<ManifestId> unreachable_;  // versions whose landing the NICs cannot reach
  // Registrations being made off the I/O thread, by (version, landing):
  // the job's number, and who asked for a grant meanwhile.
  struct Registering {
    std::uint64_t job = 0;
    std::set<PeerId> askers;
  };
  std::map<std::pair<ManifestId, bool>, Registering> registering_;
  std::uint64_t next_job_ = 1;
  // Alive while this transport is: jobs finishing after it is gone do nothing.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  std::map<std::uint64_t, Block> blocks_;
  std::map<std::uint64_t, Read> reads_;  // by work request id
  std::uint64_t next_tag_ = 1, next_wr_ = 1;
  std::uint64_t grants_given_ = 0;
  std::uint64_t reads_done_ = 0, bytes_read_ = 0, reads_failed_ = 0;  // since start
  std::vector<ibv_wc> completions_;  // reused
  bool closed_ = false;
};

}  // namespace tensorhub::rdma
