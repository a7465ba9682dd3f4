#include "transport/peer_engine.hpp"
#include "transport/mate_channel.hpp"
#include "transport/version_lease.hpp"

#include <chrono>
#include <cstring>
#include <set>

#include "core/byte_size.hpp"
#include "core/log.hpp"
#include "core/overloaded.hpp"
#include "manifest/part_view.hpp"
#if TENSORHUB_HAVE_RDMA
#include "rdma/rdma_transport.hpp"
#else
namespace tensorhub::rdma {
class RdmaTransport {};  // never made: built without RDMA support
}  // namespace tensorhub::rdma
#endif
#include "tensorhub/devices.hpp"

namespace tensorhub::peer {
namespace {

constexpr const char* kLog = "peer";
// How long a release waits for pieces still being written from the memory
// before it closes their connections.
constexpr std::chrono::seconds kReleaseGrace{1};
// How long a peer started with seeds may go without hearing from any peer
// before it says that no seed answered.
constexpr std::chrono::seconds kJoinGrace{5};
// How long a leaving peer waits for its departure to spread.
constexpr Duration kLeaveSettle = std::chrono::seconds(3);

swarm::SwarmConfig swarm_config(const PeerOptions& o, const InternalOptions& internal) {
  swarm::SwarmConfig c;
  c.fetch.block_size = o.block_size;
  c.fetch.max_neighbours = o.max_neighbours;
  c.upload_slots = o.upload_slots;
  c.serve_fetched = internal.serve_fetched;
  return c;
}

}  // namespace

namespace {

// Pieces of one version queued for one requester at most: an honest one
// asks for swarm::FetchConfig::pipeline_blocks (8) at a time, a few more in
// its end game; past this it only queues upload behind itself.
constexpr std::size_t kMaxQueuedPiecesPerRequester = 64;
// Bytes of one version sent to one requester at most: twice the version,
// and some. An honest requester asks for each block once, again only when
// a piece was lost or given up (and in its end game, of a few holders); one
// that asks for blocks it was sent gets nothing more from this holder.
std::uint64_t max_bytes_to_one_requester(std::uint64_t version_bytes) { return 2 * version_bytes + (16u << 20); }

}  // namespace

PeerEngine::PeerEngine(asio::io_context& io, PeerOptions options, InternalOptions internal, Identity identity,
                       SwarmKey swarm_key, std::function<void(std::function<void()>)> run_callback)
    : io_(io),
      options_(std::move(options)),
      internal_(internal),
      identity_(std::move(identity)),
      swarm_key_(std::move(swarm_key)),
      run_callback_(std::move(run_callback)),
      timer_(io),
      copies_(io, [this](std::vector<StageCopies::Ended> ended) { on_copies_ended(std::move(ended)); }),
      mates_(io, [this](const ManifestId& version_id) { return lend_to_mate(version_id); }) {
  if (options_.trusted_publishers.empty()) options_.trusted_publishers.push_back(identity_.public_key());
}

PeerEngine::~PeerEngine() { close(); }

TimePoint PeerEngine::now() { return transport::steady_now(); }

Status validate_limits(const PeerOptions& o) {
  if (o.block_size < kMinBlockSize || o.block_size > swarm::kMaxBlockBytes) {
    return Status::invalid_argument("block size must be " + core::format_byte_size(kMinBlockSize) + " to " +
                                    core::format_byte_size(swarm::kMaxBlockBytes) + ", not " +
                                    std::to_string(o.block_size) + " bytes");
  }
  if (o.shard_size != kAutoShardSize &&
      (o.shard_size < kMinShardSize || o.shard_size > kMaxShardSize || (o.shard_size & (o.shard_size - 1)) != 0)) {
    return Status::invalid_argument("shard size must be auto or a power of two from " +
                                    core::format_byte_size(kMinShardSize) + " to " +
                                    core::format_byte_size(kMaxShardSize) + ", not " + std::to_string(o.shard_size) +
                                    " bytes");
  }
  if (o.max_neighbours < 1 || o.max_neighbours > kMaxCount) {
    return Status::invalid_argument("max neighbours must be 1 to " + std::to_string(kMaxCount) + ", not " +
                                    std::to_string(o.max_neighbours));
  }
  if (o.upload_slots < 1 || o.upload_slots > kMaxCount) {
    return Status::invalid_argument("upload slots must be 1 to " + std::to_string(kMaxCount) + ", not " +
                                    std::to_string(o.upload_slots));
  }
  if (o.retain_head_replicas > kMaxCount) {
    return Status::invalid_argument("retained head replicas must be 0 to " + std::to_string(kMaxCount) + ", not " +
                                    std::to_string(o.retain_head_replicas));
  }
  if (o.max_release_deferral.count() < 0) {
    return Status::invalid_argument("the release deferral must not be negative");
  }
  constexpr std::chrono::milliseconds kMaxWait = std::chrono::hours(24);
  if (o.start_timeout.count() <= 0 || o.publish_head_wait.count() <= 0 || o.start_timeout > kMaxWait ||
      o.publish_head_wait > kMaxWait) {
    return Status::invalid_argument("the start timeout and the publication's head wait must be more than 0 and at "
                                    "most a day");
  }
  for (const std::string& seed : o.seeds) {
    if (seed.empty()) return Status::invalid_argument("a seed is empty (give host:port)");
  }
  return Status::ok();
}

Status PeerEngine::start() {
  TENSORHUB_RETURN_IF_ERROR(validate_limits(options_));
  if (options_.data_lanes < 1 || options_.data_lanes > transport::kMaxLanes) {
    return Status::invalid_argument("data lanes must be 1 to " + std::to_string(transport::kMaxLanes) + ", not " +
                                    std::to_string(options_.data_lanes));
  }
  if (options_.rdma_queue_pairs < 1 || options_.rdma_queue_pairs > 16) {
    return Status::invalid_argument("RDMA queue pairs per NIC must be 1 to 16, not " +
                                    std::to_string(options_.rdma_queue_pairs));
  }
  auto listen = core::parse_host_port(options_.listen);
  if (!listen) return listen.status().with_context("listen");
  core::HostPort data = *listen;
  if (options_.data_listen.empty() && listen->port == 65535) {
    return Status::invalid_argument("listen port 65535 leaves no port for data (the gossip port + 1): give a data "
                                    "listen address");
  }
  data.port = static_cast<std::uint16_t>(listen->port == 0 ? 0 : listen->port + 1);
  if (!options_.data_listen.empty()) {
    auto parsed = core::parse_host_port(options_.data_listen);
    if (!parsed) return parsed.status().with_context("data listen");
    data = *parsed;
  }
  auto admitted = admission_list(options_.members);
  if (!admitted) return admitted.status();
  admitted_ = std::move(*admitted);
#if TENSORHUB_HAVE_RDMA
  if (options_.rdma) rdma_ = rdma::RdmaTransport::open(io_, *this, *this, rdma_note_, options_.rdma_queue_pairs);
  else rdma_note_ = "off (PeerOptions::rdma)";
  if (!rdma_) TH_LOG_INFO(kLog, "no RDMA: " << rdma_note_ << "; payloads go over TCP");
  TransportEvents& data_events = rdma_ ? static_cast<TransportEvents&>(*rdma_) : *this;
#else
  rdma_note_ = "built without RDMA support";
  TransportEvents& data_events = *this;
#endif
  tcp_ = std::make_unique<TcpTransport>(io_, identity_, swarm_key_, data_events, options_.data_lanes,
                                        [this](const PeerId& peer) { return data_endpoint_of(peer); });
#if TENSORHUB_HAVE_RDMA
  if (rdma_) rdma_->attach(*tcp_);
#endif
  tcp_->set_admission([this](const PeerId& peer) { return admitted_ == nullptr || admitted_->count(peer) != 0; });
  TENSORHUB_RETURN_IF_ERROR(tcp_->listen(data));
  const core::HostPort data_bound = tcp_->bound();

  const Location location{options_.dc, options_.rack, options_.host};
  transport::GossipRuntimeOptions g;
  g.listen = *listen;
  g.advertise = options_.advertise;
  g.seeds = options_.seeds;
  g.seed_lookup_timeout = options_.start_timeout;
  g.topology = location;
  std::string advertised_host = data_bound.host;
  if (!options_.advertise.empty()) {
    if (auto a = core::parse_host_port(options_.advertise)) advertised_host = a->host;
  }
  g.data_addr = core::HostPort{advertised_host, data_bound.port}.to_string();
  if (Status listening = mates_.listen(mate_socket_name(id(), g.data_addr)); !listening) {
    TH_LOG_WARN(kLog, "no channel to host mates: " << listening.message()
                                                   << " (versions are fetched over the network only)");
  }
  g.admitted = admitted_;
  auto runtime = transport::GossipRuntime::start(io_, std::move(g), identity_.clone(), swarm_key_);
  if (!runtime) return runtime.status();
  gossip_ = std::move(*runtime);

  PeerCoreConfig config;
  config.swarm = swarm_config(options_, internal_);
  config.location = location;
  config.trusted_publishers = options_.trusted_publishers;
  config.retention = swarm::RetentionPolicy{options_.retain_head_replicas, options_.max_release_deferral};
  config.super_seed = options_.super_seed;
  config.require_secure_hash = options_.require_secure_hash;
  core_ = std::make_unique<PeerCore>(std::move(config), identity_.public_key(), transport::wall_clock_ms(), &gossip_->core());
  core_->sign_seals_with(identity_.clone());
  tcp_->set_member_address([this](const asio::ip::address& a) { return member_hosts_.contains(a); });
  gossip_->on_event([this](const gossip::MemberEvent& e) {
    if (closed_) return;
    joined_ = true;
    member_hosts_.note(e);
    core_->on_member_event(now(), e);
    pump();
  });
  TH_LOG_INFO(kLog, "data plane on " << data_bound.to_string());
  if (!options_.seeds.empty()) {
    // Said once, within seconds: otherwise a peer that joined nobody would
    // show it only as a fetch that finds no head.
    join_check_ = std::make_unique<asio::steady_timer>(io_, kJoinGrace);
    join_check_->async_wait([this](std::error_code ec) {
      if (ec || closed_) return;
      if (Status s = join_status(); !s.is_ok()) TH_LOG_ERROR(kLog, s.message());
    });
  }
  // The GPUs and how their memory would register for RDMA, for status:
  // probed off the I/O thread (loading the CUDA driver takes a while).
  if (internal_.probe_gpus) pool_.submit([this] {
    CudaDevices found = list_cuda_devices();
    asio::post(io_, [this, found = std::move(found)]() mutable { gpus_ = std::move(found); });
  });
  return Status::ok();
}

Status PeerEngine::join_status() const {
  if (joined_ || options_.seeds.empty()) return Status::ok();
  std::string seeds;
  for (const std::string& seed : options_.seeds) seeds += (seeds.empty() ? "" : ", ") + seed;
  return Status::unavailable("this peer has heard from no other peer: no seed answered (" + seeds +
                             "); check that a seed runs, is reachable, and holds the same swarm key");
}

Status PeerEngine::with_join_status(Status s) const {
  const Status joined = join_status();
  if (s.is_ok() || joined.is_ok()) return s;
  return Status(s.code(), s.message() + " (" + joined.message() + ")");
}

void PeerEngine::leave(std::function<void()> done) {
  if (core_) {
    core_->release_deferred(now());  // a peer that goes cannot keep anything alive
    pump();
  }
  if (!gossip_) {
    done();
    return;
  }
  gossip_->leave(kLeaveSettle, std::move(done));
}

void PeerEngine::close() {
  if (closed_) return;
  if (core_) {
    core_->release_deferred(now());
    pump();
  }
  closed_ = true;
  timer_.cancel();
  copies_.drain();
  staged_.clear();
  if (tcp_) tcp_->close();
#if TENSORHUB_HAVE_RDMA
  if (rdma_) rdma_->close();
#endif
  if (gossip_) gossip_->close();
  mates_.close();
}

// --------------------------------------------------------------------------
// The application's calls

Result<HeadTracker::NextVersion> PeerEngine::next_version(const std::string& model) const {
  if (!core_->trusts(identity_.public_key())) {
    return Status::permission_denied("this peer's key is not among its trusted publishers");
  }
  TENSORHUB_RETURN_IF_ERROR(validate_model_name(model));
  // A number must follow the head the swarm has: never publish before
  // hearing from it (a restarted trainer would reuse a number), nor past a
  // head it announces that is not verified here yet.
  if (!joined_ && !options_.seeds.empty()) {
    const Status joined = join_status();
    return Status::unavailable("this peer has not heard from the swarm yet, so it cannot know the head of " + model +
                               " (" + joined.message() + ")");
  }
  if (auto announced = core_->unverified_head(model)) {
    return Status::unavailable("gossip names " + model + " v" + std::to_string(announced->value) +
                               ", whose manifest this peer has not verified yet; a publication must follow it");
  }
  return core_->next_version(model);
}

Result<std::shared_ptr<LocalVersion>> PeerEngine::publish(std::shared_ptr<const Manifest> manifest,
                                                          core::ConstRegions image, const MemoryDomain& domain) {
  auto v = core_->publish(now(), std::move(manifest), std::move(image), {}, domain);
  if (v) published(*v, domain);
  pump();
  return v;
}

Result<ManifestId> PeerEngine::part_parent(const std::string& model, std::uint64_t version) const {
  auto next = next_version(model);
  if (!next) return next.status();
  if (version < next->version.value) {
    return Status::already_exists(model + " v" + std::to_string(version) + " cannot be published: the next version of " +
                                  model + " is v" + std::to_string(next->version.value));
  }
  return next->parent;
}

bool PeerEngine::expects(const std::string& model, std::uint64_t version) const {
  const auto head = core_->latest(model);
  if (head && head->version >= version) return false;
  if (core_->parts().part_count(model, VersionNumber{version}) > 0) return true;
  const auto announced = core_->unverified_head(model);
  return announced && announced->value >= version;
}

Result<std::shared_ptr<LocalVersion>> PeerEngine::publish_part(std::shared_ptr<const Manifest> manifest,
                                                               core::ConstRegions image,
                                                               std::span<const std::vector<TensorSelection>> views,
                                                               const MemoryDomain& domain) {
  const Manifest& m = *manifest;
  auto declared = manifest::declared_views(m.tensors(), m.total_size(), m.shard_size(), views, manifest::image_name(m));
  if (!declared) return declared.status();
  auto v = core_->publish_part(now(), std::move(manifest), std::move(image), domain, *declared);
  if (v) published(*v, domain);
  pump();
  return v;
}

void PeerEngine::published(const std::shared_ptr<LocalVersion>& v, const MemoryDomain& domain) {
  watches_.add(v);
  // A publisher's host has the memory to spare: its mirror is filled now,
  // before the first request (a fetcher's is made on the first request).
  // With RDMA its neighbours READ the GPU's memory itself: the mirror waits
  // for a request over TCP, as a fetcher's does.
  bool reads_by_rdma = false;
#if TENSORHUB_HAVE_RDMA
  reads_by_rdma = rdma_ != nullptr;
#endif
  if (!domain.host_accessible() && options_.mirror_gpu_versions && !reads_by_rdma) start_mirror(v, lease_of(v));
}

Result<std::shared_ptr<LocalVersion>> PeerEngine::fetch(const std::string& model, std::uint64_t number,
                                                        core::MutableRegions destination, const MemoryDomain& domain,
                                                        std::shared_ptr<DestinationOwner> backing) {
  auto manifest = core_->resolve(model, VersionNumber{number});
  if (!manifest) return with_join_status(manifest.status());
  const Manifest& m = **manifest;
  core::AnonymousMemory owned;
  if (destination.empty() && !domain.host_accessible()) {
    return Status::invalid_argument("a fetch into " + std::string(domain.name()) + " memory needs its destination");
  }
  if (destination.empty()) {
    auto memory = core::AnonymousMemory::allocate(m.total_size());
    if (!memory) return memory.status().with_context("the destination of " + model + " v" + std::to_string(m.version()));
    owned = std::move(*memory);
    destination = core::MutableRegions(owned.bytes());
  }
  // Memory that host mates share (GPU memory) is copied from one that
  // holds the version, when there is one, before the swarm is asked.
  std::optional<HostMate> mate;
  if (!domain.host_accessible() && mates_.listening()) mate = core_->host_mate_holding(m.id());
  auto v = core_->fetch(now(), *manifest, std::move(destination), domain, std::move(mate));
  if (v) {
    (*v)->owned = std::move(owned);
    (*v)->backing = std::move(backing);
    watches_.add(*v);
  }
  pump();
  return v;
}

Result<VersionInfo> PeerEngine::version_info(const std::string& model, std::uint64_t version) const {
  auto known = core_->resolve_version(model, VersionNumber{version});
  if (!known) return with_join_status(known.status());
  return known->info();
}

Result<std::shared_ptr<const manifest::SealedVersion>> PeerEngine::sealed_version(const std::string& model,
                                                                                   std::uint64_t version) const {
  auto known = core_->resolve_version(model, VersionNumber{version});
  if (!known) return with_join_status(known.status());
  return known->sealed();
}

namespace {

// The whole destination of a version in parts that the engine allocated,
// kept by every part's fetch until the last is released.
class WholeMemory final : public DestinationOwner {
 public:
  explicit WholeMemory(core::AnonymousMemory memory) : memory_(std::move(memory)) {}
  void fetch_failed() override {}

 private:
  core::AnonymousMemory memory_;
};

}  // namespace

Result<PeerEngine::PartsFetch> PeerEngine::fetch_parts(std::shared_ptr<const manifest::SealedVersion> sealed,
                                                       core::MutableRegions destination, const MemoryDomain& domain,
                                                       std::shared_ptr<DestinationOwner> backing) {
  const std::string what = sealed->model() + " v" + std::to_string(sealed->version());
  if (destination.empty()) {
    if (!domain.host_accessible()) {
      return Status::invalid_argument("a fetch into " + std::string(domain.name()) + " memory needs its destination");
    }
    auto memory = core::AnonymousMemory::allocate(sealed->total_size());
    if (!memory) return memory.status().with_context("the destination of " + what);
    destination = core::MutableRegions(memory->bytes());
    backing = std::make_shared<WholeMemory>(std::move(*memory));
  } else if (destination.size() != sealed->total_size()) {
    return Status::invalid_argument("the destination holds " + std::to_string(destination.size()) + " bytes; " + what +
                                    " has " + std::to_string(sealed->total_size()));
  }
  std::vector<std::shared_ptr<LocalVersion>> parts;
  std::vector<std::vector<manifest::LandingRun>> all_runs;
  for (std::uint32_t i = 0; i < sealed->parts().size(); ++i) {
    all_runs.push_back(sealed->landing_runs(i));
    auto v = fetch_landing(sealed->parts()[i], all_runs.back(), destination, domain, backing, {});
    if (!v) return release_started(parts, v.status().with_context("part " + std::to_string(i) + " of " + what));
    parts.push_back(std::move(*v));
  }
  pump();
  return PartsFetch{std::move(parts), std::move(destination), std::move(all_runs)};
}

Status PeerEngine::release_started(const std::vector<std::shared_ptr<LocalVersion>>& started, Status why) {
  for (const auto& v : started) core_->release(now(), v, ReleaseMode::kNow);
  pump();
  return why;
}

Result<std::shared_ptr<LocalVersion>> PeerEngine::fetch_landing(const std::shared_ptr<const Manifest>& m,
                                                                std::span<const manifest::LandingRun> runs,
                                                                const core::MutableRegions& destination,
                                                                const MemoryDomain& domain,
                                                                const std::shared_ptr<DestinationOwner>& backing,
                                                                core::Bitfield wanted,
                                                                std::optional<ManifestId> selection) {
  const std::uint64_t gap_bytes = manifest::SealedVersion::gap_bytes(runs);
  core::AnonymousMemory gaps;
  if (gap_bytes > 0) {
    if (!domain.host_accessible()) {
      return Status::invalid_argument(std::to_string(gap_bytes) + " bytes of its image land nowhere (bytes of no "
                                      "tensor, or not selected), which a fetch into " + std::string(domain.name()) +
                                      " memory cannot take yet");
    }
    // Sparse: of a selection's scratch, only the fetched shards' pages are written.
    auto memory = wanted.size() == 0 ? core::AnonymousMemory::allocate(gap_bytes)
                                     : core::AnonymousMemory::reserve_sparse(gap_bytes);
    if (!memory) return memory.status();
    gaps = std::move(*memory);
  }
  auto v = core_->fetch(now(), m, manifest::landing_regions(runs, destination, gaps.bytes()), domain, std::nullopt,
                        std::move(wanted), std::move(selection));
  if (!v) return v.status();
  (*v)->owned = std::move(gaps);
  (*v)->backing = backing;
  watches_.add(*v);
  return v;
}

Result<std::vector<TensorEntry>> PeerEngine::selection_layout(const std::string& model, std::uint64_t number,
                                                              std::span<const TensorSelection> selection) const {
  auto known = core_->resolve_version(model, VersionNumber{number});
  if (!known) return with_join_status(known.status());
  const std::string what = model + " v" + std::to_string(known->info().version);
  if (known->in_parts()) return manifest::selected_layout(known->sealed()->tensors(), selection, what);
  auto m = core_->resolve(model, VersionNumber{known->info().version});
  if (!m) return with_join_status(m.status());
  return manifest::selected_layout((*m)->tensors(), selection, what);
}

Result<PeerEngine::SelectionFetch> PeerEngine::fetch_selection(const std::string& model, std::uint64_t number,
                                                               std::span<const TensorSelection> selection,
                                                               core::MutableRegions destination,
                                                               const MemoryDomain& domain,
                                                               std::shared_ptr<DestinationOwner> backing) {
  if (!domain.host_accessible() && destination.empty()) {
    return Status::invalid_argument("a fetch by selection into " + std::string(domain.name()) +
                                    " memory needs its destination");
  }
  auto known = core_->resolve_version(model, VersionNumber{number});
  if (!known) return with_join_status(known.status());
  const std::string what = model + " v" + std::to_string(known->info().version);
  std::vector<std::shared_ptr<const Manifest>> images;
  if (known->in_parts()) {
    images = known->sealed()->parts();
  } else {
    auto m = core_->resolve(model, VersionNumber{known->info().version});
    if (!m) return with_join_status(m.status());
    images.push_back(*m);
  }
  auto layout = known->in_parts() ? manifest::selected_layout(known->sealed()->tensors(), selection, what)
                                  : manifest::selected_layout(images[0]->tensors(), selection, what);
  if (!layout) return layout.status();
  std::uint64_t size = 0;
  for (const TensorEntry& t : *layout) size += t.byte_length;
  if (size == 0) return Status::invalid_argument("the selection of " + what + " holds no bytes");
  if (destination.empty()) {
    auto memory = core::AnonymousMemory::allocate(size);
    if (!memory) return memory.status().with_context("the destination of a selection of " + what);
    destination = core::MutableRegions(memory->bytes());
    backing = std::make_shared<WholeMemory>(std::move(*memory));
  } else if (destination.size() != size) {
    return Status::invalid_argument("the destination holds " + std::to_string(destination.size()) +
                                    " bytes; the selection of " + what + " has " + std::to_string(size));
  }
  // Its views are announced in one part set, named by this key.
  const ManifestId key = manifest::selection_key(*layout);
  std::vector<std::shared_ptr<LocalVersion>> fetches;
  std::vector<std::vector<manifest::LandingRun>> fetched_runs;
  for (std::size_t i = 0; i < images.size(); ++i) {
    const std::string which = known->in_parts() ? "part " + std::to_string(i) + " of " + what : what;
    // The image's view of the selection, when its publisher declared it:
    // exactly the selected bytes, hashed at their grain. Not when this peer
    // holds the image whole (its shards are copied locally), nor when no
    // peer can serve the view (the publisher let its part go, and no other
    // fetcher of the selection holds it): then whole shards.
    // Into memory the host cannot write (GPU memory) only views go: a
    // view lands whole in the destination, where whole shards would need
    // host scratch for their bytes the selection does not take.
    auto view = declared_view(*images[i], *layout);
    const bool host = domain.host_accessible();
    if (auto held = core_->find(images[i]->id()); host && held && held->holds_all()) view.reset();
    if (view && host && !core_->view_has_source(**view, key)) view.reset();
    if (view) {
      auto runs = manifest::selection_runs((*view)->tensors(), (*view)->total_size(), *layout, which);
      auto v = runs ? fetch_landing(*view, *runs, destination, domain, backing, {}, key) : runs.status();
      if (!v) return release_started(fetches, v.status().with_context(which));
      fetches.push_back(std::move(*v));
      fetched_runs.push_back(std::move(*runs));
      continue;
    }
    auto runs = manifest::selection_runs(*images[i], *layout);
    if (!runs) return release_started(fetches, runs.status());
    core::Bitfield wanted = manifest::shards_selected(*images[i], *runs);
    if (wanted.none()) continue;  // the selection takes nothing of this image
    if (!host) {
      return release_started(fetches, Status::invalid_argument(
                                          which + " has no declared view of this selection (or none that a peer "
                                          "serves): a selection into " + std::string(domain.name()) +
                                          " memory moves views only (PartOptions::views); fetch it into host memory"));
    }
    auto v = fetch_landing(images[i], *runs, destination, domain, backing, std::move(wanted));
    if (!v) return release_started(fetches, v.status().with_context(which));
    fetches.push_back(std::move(*v));
    fetched_runs.push_back(std::move(*runs));
  }
  pump();
  return SelectionFetch{PartsFetch{std::move(fetches), std::move(destination), std::move(fetched_runs)},
                        std::move(*layout)};
}

std::optional<std::shared_ptr<const Manifest>> PeerEngine::declared_view(const Manifest& image,
                                                                         std::span<const TensorEntry> selected) {
  if (image.views().empty()) return std::nullopt;
  auto view = manifest::part_view(image, selected);
  if (!view || view->size == 0 || image.find_view(view->key) == nullptr) return std::nullopt;
  auto m = manifest::view_manifest(image, *view);
  if (!m) return std::nullopt;
  return std::move(*m);
}

std::vector<bool> PeerEngine::verified_shards(const LocalVersion& v) const {
  const std::uint32_t count = v.manifest->shard_count();
  std::vector<bool> out(count, false);
  if (v.state == VersionState::kComplete) {
    for (std::uint32_t i = 0; i < count; ++i) out[i] = v.wants(ShardIndex{i});
  } else if (v.role == VersionRole::kCopy) {
    // A private copy is written all at once from the version held here:
    // the swarm's bitfield is that version's, not the copy's.
  } else if (const core::Bitfield* have = core_->swarm().have(v.manifest->id())) {
    for (std::uint32_t i = 0; i < count && i < have->size(); ++i) out[i] = have->test(i);
  }
  return out;
}

Result<std::shared_ptr<const Manifest>> PeerEngine::manifest(const std::string& model, std::uint64_t version) const {
  auto m = core_->resolve(model, VersionNumber{version});
  if (!m) return with_join_status(m.status());
  return m;
}

std::shared_ptr<const VersionWatch> PeerEngine::watch_of(const std::shared_ptr<LocalVersion>& v) const {
  return watches_.of(*v);
}

void PeerEngine::release(const std::shared_ptr<LocalVersion>& v, ReleaseMode mode, std::function<void()> done) {
  if (closed_) mode = ReleaseMode::kNow;
  if (done) watches_.on_released(*v, std::move(done));
  core_->release(now(), v, mode);
  pump();
}

void PeerEngine::subscribe(const std::string& model, std::function<void(const VersionInfo&)> callback) {
  if (auto head = core_->latest(model)) {
    run_callback_([callback, head = *head] { callback(head); });
  }
  subscribers_[model].push_back(std::move(callback));
}

void PeerEngine::head_changed(const VersionInfo& head) {
  TH_LOG_INFO(kLog, "head " << head.model << " v" << head.version << " (" << head.id.short_hex() << ")");
  auto it = subscribers_.find(head.model);
  if (it == subscribers_.end()) return;
  for (const auto& callback : it->second) {
    run_callback_([callback, head] { callback(head); });
  }
}

// --------------------------------------------------------------------------
// The core's actions

void PeerEngine::pump() {
  if (!core_) return;
  if (closed_) return pump_closed();
  bool changed = false;
  while (auto action = core_->poll()) {
    std::visit(core::Overloaded{
                   [&](swarm::OpenConnection& open) { transport_for(open.peer).connect(open.peer); },
                   [&](swarm::CloseConnection& close) { transport_for(close.peer).disconnect(close.peer, close.reason); },
                   [&](swarm::SendMessage& message) {
                     const int times =
                         message.message.type == swarm::MessageType::kRequest ? internal_.repeat_requests : 1;
                     for (int i = 0; i < std::max(times, 1); ++i) {
                       transport_for(message.peer).send(message.peer, message.message);
                     }
                   },
                   [&](swarm::ServePiece& serve) { serve_piece(serve); },
                   [&](swarm::DropQueuedPieces& drop) {
                     transport_for(drop.peer).cancel_pieces_of(drop.peer, drop.version_id);
                     if (drop.fetch_ended) requester_done(drop.peer, drop.version_id);
                   },
                   [&](CancelQueuedPiece& cancel) { transport_for(cancel.peer).cancel_piece(cancel.peer, cancel.request_id); },
                   [&](HashShard& hash) { hash_shard(hash); },
                   [&](CopyShards& copy) { copy_shards(std::move(copy)); },
                   [&](CopyFromMate& mate) { copy_from_mate(std::move(mate)); },
                   [&](ReleaseMemory& release) { release_memory(std::move(release)); },
                   [&](FetchDone& done) {
                     // Waiters see the version's state; an output file lets go of its name and blocks now.
                     if (!done.status.is_ok() && done.version->backing) done.version->backing->fetch_failed();
                   },
                   [&](HeadChanged& head) { head_changed(head.head); },
                   [&](GossipChanged&) { gossip_->pump(); },
                   [&](StateChanged&) { changed = true; },
                   [&](Report& report) { log_report(report); },
               },
               *action);
  }
  arm_timer();
  if (changed) {
    watches_.refresh_all();
    for (const auto& listener : change_listeners_) listener();
  }
}

void PeerEngine::log_report(const Report& report) {
  switch (report.level) {
    case Report::kError: TH_LOG_ERROR(kLog, report.text); break;
    case Report::kWarn: TH_LOG_WARN(kLog, report.text); break;
    case Report::kInfo: TH_LOG_INFO(kLog, report.text); break;
    case Report::kDebug: TH_LOG_DEBUG(kLog, report.text); break;
  }
}

void PeerEngine::pump_closed() {
  // Closed: nothing goes out any more, but memory still goes back to its
  // owners (a handle released while the peer shuts down must not wait for
  // ever), and waiters still hear of it.
  bool changed = false;
  while (auto action = core_->poll()) {
    std::visit(core::Overloaded{
                   [&](ReleaseMemory& release) { release_memory(std::move(release)); },
                   [&](StateChanged&) { changed = true; },
                   [&](Report& report) { log_report(report); },
                   // Closed: no connection, transfer or job starts any more.
                   [](const auto&) {},
               },
               *action);
  }
  if (changed) {
    watches_.refresh_all();
    for (const auto& listener : change_listeners_) listener();
  }
}

void PeerEngine::arm_timer() {
  const TimePoint next = core_->next_timeout();
  if (next == timer_at_) return;
  timer_at_ = next;
  if (next == kTimeNever) {
    timer_.cancel();
    return;
  }
  const TimePoint at = now();
  timer_.expires_after(next > at ? std::chrono::duration_cast<std::chrono::steady_clock::duration>(next - at)
                                 : std::chrono::steady_clock::duration::zero());
  timer_.async_wait([this](std::error_code ec) {
    if (ec || closed_) return;
    timer_at_ = kTimeNever;
    core_->handle_timeout(now());
    pump();
  });
}

std::shared_ptr<VersionLease> PeerEngine::lease_of(const std::shared_ptr<LocalVersion>& v) {
  auto& lease = leases_[v.get()];
  if (!lease) {
    lease = std::make_shared<VersionLease>();
    lease->version = v;
    lease->watch = watches_.of(*v);
  }
  return lease;
}

void PeerEngine::requester_done(const PeerId& peer, const ManifestId& version_id) {
  auto v = core_->find(version_id);
  if (!v) return;
  if (auto it = leases_.find(v.get()); it != leases_.end()) it->second->bytes_to.erase(peer);
}

void PeerEngine::release_memory(ReleaseMemory release) {
#if TENSORHUB_HAVE_RDMA
  // Grants end and registrations go before the memory can be given back.
  if (rdma_) rdma_->forget_version(release.version->id);
#endif
  // The views served from this memory (released just before it) may still
  // be read: a piece being sent, a copy. The memory waits for them too.
  for (const auto& [held, lease] : leases_) {
    if (held->served_from != release.version || lease->uses == 0) continue;
    std::shared_ptr<VersionLease> image = lease_of(release.version);
    ++image->uses;
    lease->on_idle.push_back([image] { image->end_use(); });
  }
  auto it = leases_.find(release.version.get());
  if (it == leases_.end() || it->second->uses == 0) {
    if (it != leases_.end()) leases_.erase(it);
    watches_.released(*release.version);
    return;
  }
  // Runs once the last piece or job using the memory is done.
  it->second->on_idle.push_back([this, version = release.version] {
    leases_.erase(version.get());
    watches_.released(*version);
  });
  // A reader that stopped reading would hold the memory until TCP gives up
  // (30 s or more): past the grace, the connections still being written
  // from it are closed, which ends their pieces.
  auto timer = release_timers_.emplace(release_timers_.end(), io_, kReleaseGrace);
  timer->async_wait([this, timer, lease = std::weak_ptr<VersionLease>(it->second)](std::error_code ec) {
    if (ec) return;  // the engine is going: nothing here is touched
    release_timers_.erase(timer);
    auto held = lease.lock();
    if (closed_ || !held || held->sending_to.empty()) return;
    const auto stalled = held->sending_to;  // closing retires pieces, which changes it
    for (const auto& [peer, pieces] : stalled) {
      TH_LOG_WARN(kLog, "closing the connection to " << peer.short_hex() << ": " << pieces.size() << " piece(s) of "
                                                     << held->version->model << " v" << held->version->number
                                                     << " still unsent " << kReleaseGrace.count()
                                                     << " s after its release (a stalled reader)");
      transport_for(peer).disconnect(peer, "pieces of a released version still unsent after the grace");
    }
  });
}

void PeerEngine::serve_piece(const swarm::ServePiece& s) {
  auto v = core_->find(s.version_id);
  if (!v) return;
  if (s.offset + s.length > v->memory.size()) {
    TH_LOG_ERROR(kLog, "the swarm core asked for bytes " << s.offset << "+" << s.length << " of " << v->model << " v"
                                                         << v->number << ", which holds " << v->memory.size());
    return;
  }
  DataTransport& to = transport_for(s.peer);
  serve_pieces_.clear();
  v->memory.pieces(s.offset, s.length, serve_pieces_);  // one per region the block spans
  std::shared_ptr<VersionLease> source = lease_of(v);
  // Refused: a block this requester asked for and has not been sent yet, or
  // more than its share queued. Either only takes upload from the others.
  auto& queued = source->sending_to[s.peer];
  std::uint64_t& sent = source->bytes_to[s.peer];
  const char* refusal = queued.size() >= kMaxQueuedPiecesPerRequester ? "too many requests queued"
                        : queued.count(s.offset) != 0                ? "that block is queued already"
                        : sent + s.length > max_bytes_to_one_requester(v->memory.size())
                            ? "this version was sent to you twice over"
                            : nullptr;
  if (refusal != nullptr) {
    if (queued.empty()) source->sending_to.erase(s.peer);
    if (source->watch) ++source->watch->requests_refused;
    to.send(s.peer, swarm::SwarmMessage::refuse(s.version_id, s.header.request_id,
                                                std::vector<std::uint8_t>(refusal, refusal + std::strlen(refusal))));
    return;
  }
  queued.insert(s.offset);
  sent += s.length;
  ++source->uses;
  if (internal_.corrupt_serving || !v->domain->host_accessible()) {
    if (!internal_.corrupt_serving && (serve_from_mirror(s, v, source) || serve_through_stage(s, v, source))) return;
    serve_copied_piece(s, v, std::move(source));
    return;
  }
  auto piece = std::make_shared<LeasedPiece>();
  piece->lease = std::move(source);
  piece->peer = s.peer;
  piece->offset = s.offset;
  to.send_piece(s.peer, s.header, serve_pieces_, std::move(piece));
}

}  // namespace tensorhub::peer
