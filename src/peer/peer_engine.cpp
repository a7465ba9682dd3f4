#include "peer/peer_engine.hpp"

#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/log.hpp"
#include "transport/status_json.hpp"

namespace tensorhub::peer {
namespace {

constexpr const char* kLog = "peer";
constexpr transport::DataConnectionTimeouts kDataTimeouts{};
// A manifest asked for and not here after this is asked of another peer.
constexpr Duration kManifestRetry = std::chrono::seconds(2);

std::uint64_t wall_clock_ms() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

swarm::ShardLayout layout_of(const Manifest& m, std::uint32_t block_size) {
  return swarm::ShardLayout{m.total_size(), m.shard_size(),
                            static_cast<std::uint32_t>(std::min<std::uint64_t>(block_size, m.shard_size()))};
}

swarm::SwarmMessage message_of(swarm::MessageType type, const ManifestId& id) {
  swarm::SwarmMessage m;
  m.type = type;
  m.version = id;
  return m;
}

std::string_view state_name(VersionState s) {
  switch (s) {
    case VersionState::kManifest: return "manifest";
    case VersionState::kFetching: return "fetching";
    case VersionState::kComplete: return "complete";
    case VersionState::kFailed: return "failed";
    case VersionState::kReleasing: return "releasing";
    case VersionState::kReleased: return "released";
  }
  return "?";
}

}  // namespace

PeerEngine::PeerEngine(asio::io_context& io, PeerOptions options, Identity identity, SwarmKey swarm_key)
    : io_(io),
      options_(std::move(options)),
      identity_(std::move(identity)),
      swarm_key_(std::move(swarm_key)),
      data_acceptor_(io),
      swarm_(
          [&] {
            swarm::SwarmConfig c;
            c.fetch.block_size = options_.block_size;
            c.fetch.max_neighbours = options_.max_neighbours;
            c.upload_slots = options_.upload_slots;
            c.serve_fetched = options_.serve_fetched;
            return c;
          }(),
          swarm::Location{options_.dc, options_.rack, options_.host}, identity_.public_key(), wall_clock_ms()),
      swarm_timer_(io),
      deferred_releases_(swarm::RetentionPolicy{options_.retain_head_replicas, options_.max_release_deferral}),
      deferral_timer_(io) {
  if (options_.trusted_publishers.empty()) options_.trusted_publishers.push_back(identity_.public_key());
}

PeerEngine::~PeerEngine() { close(); }

Status PeerEngine::start() {
  if (options_.data_lanes < 1 || options_.data_lanes > transport::kMaxLanes) {
    return Status::invalid_argument("data lanes must be 1 to " + std::to_string(transport::kMaxLanes) + ", not " +
                                    std::to_string(options_.data_lanes));
  }
  auto listen = core::parse_host_port(options_.listen);
  if (!listen) return listen.status().with_context("listen");
  core::HostPort data = *listen;
  data.port = static_cast<std::uint16_t>(listen->port == 0 ? 0 : listen->port + 1);
  if (!options_.data_listen.empty()) {
    auto parsed = core::parse_host_port(options_.data_listen);
    if (!parsed) return parsed.status().with_context("data listen");
    data = *parsed;
  }
  std::error_code ec;
  const auto address = asio::ip::make_address(data.host, ec);
  if (ec) return Status::invalid_argument("data listen host '" + data.host + "' is not an IP address");
  const asio::ip::tcp::endpoint endpoint(address, data.port);
  data_acceptor_.open(endpoint.protocol(), ec);
  if (!ec) data_acceptor_.set_option(asio::ip::tcp::acceptor::reuse_address(true), ec);
  if (!ec) data_acceptor_.bind(endpoint, ec);
  if (!ec) data_acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Status::unavailable("cannot listen for data on " + data.to_string() + ": " + ec.message());
  data_bound_ = core::HostPort{data.host, data_acceptor_.local_endpoint().port()};

  transport::GossipRuntimeOptions g;
  g.listen = *listen;
  g.advertise = options_.advertise;
  g.seeds = options_.seeds;
  g.topology = gossip::Topology{options_.dc, options_.rack, options_.host};
  std::string advertised_host = data_bound_.host;
  if (!options_.advertise.empty()) {
    if (auto a = core::parse_host_port(options_.advertise)) advertised_host = a->host;
  }
  g.data_addr = core::HostPort{advertised_host, data_bound_.port}.to_string();
  auto runtime = transport::GossipRuntime::start(io_, std::move(g), identity_.clone(), swarm_key_);
  if (!runtime) return runtime.status();
  gossip_ = std::move(*runtime);
  gossip_->on_event([this](const gossip::MemberEvent& e) { on_member_event(e); });
  TH_LOG_INFO(kLog, "data plane on " << data_bound_.to_string());
  accept_data();
  return Status::ok();
}

void PeerEngine::leave(std::function<void()> done) {
  release_due(/*all=*/true);  // a peer that goes cannot keep anything alive
  if (!gossip_) {
    done();
    return;
  }
  gossip_->leave(std::chrono::seconds(3), std::move(done));
}

void PeerEngine::close() {
  if (closed_) return;
  closed_ = true;
  std::error_code ignored;
  data_acceptor_.close(ignored);
  swarm_timer_.cancel();
  release_due(/*all=*/true);
  deferral_timer_.cancel();
  std::vector<std::shared_ptr<transport::DataConnection>> all = accepting_;
  for (auto& [id, link] : links_) {
    for (auto& lane : link.lanes) {
      if (lane) all.push_back(lane);
    }
  }
  for (auto& [id, c] : connecting_) all.push_back(c);
  for (auto& c : all) c->close(Status::cancelled("the peer is stopping"));
  links_.clear();
  connecting_.clear();
  accepting_.clear();
  if (gossip_) gossip_->close();
}

// --------------------------------------------------------------------------
// Gossip

void PeerEngine::on_member_event(const gossip::MemberEvent& event) {
  switch (event.kind) {
    case gossip::MemberEventKind::kDead:
    case gossip::MemberEventKind::kLeft:
    case gossip::MemberEventKind::kRemoved:
      swarm_.peer_gone(steady_now_(), event.id);
      pump_swarm();
      break;
    default:
      if (event.record) learn_from_record(event.record->record);
      break;
  }
  release_due(/*all=*/false);
  notify_changed();
}

TimePoint PeerEngine::steady_now_() { return transport::steady_now(); }

void PeerEngine::learn_from_record(const gossip::PeerRecord& r) {
  const TimePoint now = steady_now_();
  swarm_.set_location(r.id, swarm::Location{r.topology.dc, r.topology.rack, r.topology.host});
  for (const gossip::HoldingEntry& h : r.holdings) {
    auto v = find_version(h.manifest_id);
    if (v) swarm_.add_holder(now, h.manifest_id, r.id, h.complete());  // holding or fetching: a neighbour either way
  }
  for (const gossip::HeadEntry& head : r.heads) {
    Model& model = models_[head.model];
    const bool newer = !model.head || head.version > model.head->version;
    auto asked = model.asked.find(head.manifest_id);
    const bool waiting = asked != model.asked.end() && now - asked->second < kManifestRetry;
    if (newer && !model.manifests.count(head.manifest_id) && !waiting) {
      request_manifest(head.model, head, r.id);
    }
  }
  pump_swarm();
}

void PeerEngine::request_manifest(const std::string& model, const gossip::HeadEntry& head, const PeerId& from) {
  models_[model].asked[head.manifest_id] = steady_now_();
  TH_LOG_DEBUG(kLog, "asking " << from.short_hex() << " for the manifest of " << model << " v" << head.version);
  send(from, message_of(swarm::MessageType::kGetManifest, head.manifest_id));
}

Status PeerEngine::accept_manifest(const Manifest& m) {
  TENSORHUB_RETURN_IF_ERROR(verify_manifest_signature(m, options_.trusted_publishers));
  Model& model = models_[m.model()];
  if (!m.parent().is_zero()) {
    for (const auto& [id, known] : model.manifests) {
      if (id == m.parent()) TENSORHUB_RETURN_IF_ERROR(verify_manifest_chain(known, m));
    }
  }
  // Two manifests for one (model, version) are equivocation.
  for (const auto& [id, known] : model.manifests) {
    if (known.version() == m.version() && id != m.id()) {
      return Status::verify_failed("equivocation: two manifests of " + m.model() + " v" + std::to_string(m.version()) +
                                   " signed by " + m.publisher().short_hex());
    }
  }
  model.manifests.emplace(m.id(), m);
  model.asked.erase(m.id());
  if (!model.head || m.version() > model.head->version) {
    model.head = VersionInfo{m.model(), m.version(), m.id(), m.total_size()};
    gossip_->core().set_head(gossip::HeadEntry{m.model(), m.version(), m.id()});
    gossip_->pump();
    TH_LOG_INFO(kLog, "head " << m.model() << " v" << m.version() << " (" << m.id().short_hex() << ")");
    for (const auto& callback : model.subscribers) callback(*model.head);
    // The previous head may have been waiting for this one to let go.
    asio::post(io_, [this] {
      if (!closed_) release_due(/*all=*/false);
    });
  }
  return Status::ok();
}

void PeerEngine::on_manifest(const PeerId& from, const swarm::SwarmMessage& msg) {
  auto decoded = decode_manifest(msg.bytes);
  if (!decoded || decoded->id() != msg.version) {
    TH_LOG_WARN(kLog, "peer " << from.short_hex() << " sent a bad manifest: "
                              << (decoded ? "wrong id" : decoded.status().to_string()));
    return;
  }
  Status s = accept_manifest(*decoded);
  if (!s.is_ok()) {
    TH_LOG_WARN(kLog, "refused manifest " << msg.version.short_hex() << " from " << from.short_hex() << ": "
                                          << s.to_string());
    return;
  }
  auto waiting = awaiting_manifest_.find(msg.version);
  if (waiting != awaiting_manifest_.end()) {
    auto versions = std::move(waiting->second);
    awaiting_manifest_.erase(waiting);
    for (auto& v : versions) start_fetch(v);
  }
  notify_changed();
}

// --------------------------------------------------------------------------
// Versions

std::shared_ptr<LocalVersion> PeerEngine::find_version(const ManifestId& id) const {
  auto it = versions_.find(id);
  return it == versions_.end() ? nullptr : it->second;
}

Result<std::shared_ptr<LocalVersion>> PeerEngine::publish(const std::string& model, std::span<const std::byte> image,
                                                          std::vector<TensorEntry> tensors) {
  Model& m = models_[model];
  ManifestBuildOptions o;
  o.model = model;
  o.version = m.head ? m.head->version + 1 : 1;
  if (m.head) o.parent = m.head->id;
  o.created_unix_ms = wall_clock_ms();
  o.shard_size = options_.shard_size;
  auto manifest = build_manifest(o, image, std::move(tensors), identity_);
  if (!manifest) return manifest.status();
  if (!verify_manifest_signature(*manifest, options_.trusted_publishers).is_ok()) {
    return Status::permission_denied("this peer's key is not among its trusted publishers");
  }
  auto v = std::make_shared<LocalVersion>();
  v->model = model;
  v->number = manifest->version();
  v->id = manifest->id();
  v->manifest = *manifest;
  v->memory = image;
  v->published = true;
  v->started_unix_ms = manifest->body().created_unix_ms;  // before the shards were hashed
  v->complete_unix_ms = wall_clock_ms();             // announced
  v->state = VersionState::kComplete;
  v->progress.bytes_total = v->progress.bytes_verified = image.size();
  v->progress.shards_total = v->progress.shards_verified = static_cast<std::uint32_t>(manifest->shard_count());
  v->progress.done = true;
  versions_[v->id] = v;
  swarm_.serve(steady_now_(), v->id, layout_of(*manifest, options_.block_size),
               core::Bitfield(manifest->shard_count(), true),
               options_.super_seed ? swarm::SwarmCore::ServeMode::kSuperSeed : swarm::SwarmCore::ServeMode::kPlain);
  Status accepted = accept_manifest(*manifest);
  if (!accepted.is_ok()) return accepted;
  update_holding(*v, 1000);
  TH_LOG_INFO(kLog, "published " << model << " v" << v->number << " (" << v->id.short_hex() << "), "
                                 << manifest->shard_count() << " shards");
  return v;
}

Result<std::shared_ptr<LocalVersion>> PeerEngine::fetch(const std::string& model_name, std::uint64_t number,
                                                        std::span<std::byte> destination) {
  Model& model = models_[model_name];
  const Manifest* manifest = nullptr;
  if (number == 0) {
    if (!model.head) return Status::unavailable("no version of model '" + model_name + "' is known yet");
    manifest = &model.manifests.at(model.head->id);
  } else {
    for (const auto& [id, m] : model.manifests) {
      if (m.version() == number) manifest = &m;
    }
    if (manifest == nullptr) {
      return Status::not_found("version " + std::to_string(number) + " of model '" + model_name + "' is not known" +
                               (model.head ? " (the newest known is v" + std::to_string(model.head->version) + ")"
                                           : std::string(" (no version is known yet)")));
    }
  }
  if (auto existing = find_version(manifest->id())) return existing;
  if (!destination.empty() && destination.size() != manifest->total_size()) {
    return Status::invalid_argument("the destination holds " + std::to_string(destination.size()) +
                                    " bytes; the version needs " + std::to_string(manifest->total_size()));
  }
  auto v = std::make_shared<LocalVersion>();
  v->model = model_name;
  v->number = manifest->version();
  v->id = manifest->id();
  v->manifest = *manifest;
  if (destination.empty()) {
    auto memory = core::AnonymousMemory::allocate(manifest->total_size());
    if (!memory) return memory.status().with_context("the destination of " + model_name + " v" + std::to_string(number));
    v->owned = std::move(*memory);
    v->destination = v->owned.bytes();
  } else {
    v->destination = destination;
  }
  v->memory = v->destination;
  v->started = steady_now_();
  v->started_unix_ms = wall_clock_ms();
  versions_[v->id] = v;
  start_fetch(v);
  return v;
}

void PeerEngine::start_fetch(const std::shared_ptr<LocalVersion>& v) {
  const Manifest& m = *v->manifest;
  core::Bitfield have(m.shard_count());
  // Shards unchanged since a version we hold need no transfer: copy them.
  for (const auto& [id, other] : versions_) {
    std::lock_guard lock(other->mutex);
    if (other == v || other->model != v->model || other->state != VersionState::kComplete || !other->manifest) continue;
    const ManifestDiff diff = diff_manifests(*other->manifest, m);
    if (!diff.comparable) continue;
    std::vector<bool> changed(m.shard_count(), false);
    for (ShardIndex s : diff.changed) changed[s.value] = true;
    for (std::uint32_t s = 0; s < m.shard_count(); ++s) {
      if (changed[s] || have.test(s) || s >= other->manifest->shard_count()) continue;
      const ShardEntry& e = m.shard(ShardIndex{s});
      std::memcpy(v->destination.data() + e.byte_offset, other->memory.data() + e.byte_offset, e.byte_length);
      have.set(s);
    }
  }
  {
    std::lock_guard lock(v->mutex);
    v->state = VersionState::kFetching;
    v->progress.bytes_total = m.total_size();
    v->progress.shards_total = static_cast<std::uint32_t>(m.shard_count());
    v->progress.shards_verified = static_cast<std::uint32_t>(have.count());
    for (std::uint32_t s = 0; s < m.shard_count(); ++s) {
      if (have.test(s)) v->progress.bytes_verified += m.shard(ShardIndex{s}).byte_length;
    }
  }
  const TimePoint now = steady_now_();
  swarm_.fetch(now, v->id, layout_of(m, options_.block_size), have);
  // Everyone gossip says holds or fetches it is a candidate.
  for (const auto& member : gossip_->core().members()) {
    if (member.liveness != gossip::Liveness::kAlive) continue;
    const auto& r = member.record->record;
    swarm_.set_location(r.id, swarm::Location{r.topology.dc, r.topology.rack, r.topology.host});
    for (const auto& h : r.holdings) {
      if (h.manifest_id == v->id) swarm_.add_holder(now, v->id, r.id, h.complete());
    }
  }
  update_holding(*v, static_cast<std::uint16_t>(1000 * have.count() / std::max<std::size_t>(1, m.shard_count())));
  TH_LOG_INFO(kLog, "fetching " << v->model << " v" << v->number << ": " << have.count() << " of " << m.shard_count()
                                << " shards unchanged locally");
  pump_swarm();
}

void PeerEngine::release(const std::shared_ptr<LocalVersion>& v, ReleaseMode mode, std::function<void()> done) {
  if (mode == ReleaseMode::kHonourRetention && !closed_) {
    const swarm::ReleaseFacts facts = release_facts(*v);
    if (deferred_releases_.deferred(v->id) || deferred_releases_.must_defer(facts)) {
      if (!deferred_releases_.deferred(v->id)) {
        TH_LOG_INFO(kLog, "deferring the release of " << v->model << " v" << v->number << ": it is the head and "
                                                      << facts.other_holders << " other peer(s) hold it");
      }
      deferred_releases_.defer(v->id, steady_now_());
      deferred_done_[v->id].push_back(std::move(done));
      arm_deferral_timer();
      return;
    }
  }
  if (deferred_releases_.deferred(v->id)) {  // kNow cuts a deferral short; its waiters are done too
    deferred_releases_.forget(v->id);
    auto waiting = std::move(deferred_done_[v->id]);
    deferred_done_.erase(v->id);
    waiting.push_back(std::move(done));
    done = [waiting = std::move(waiting)] {
      for (const auto& fn : waiting) fn();
    };
  }
  release_now(v, std::move(done));
}

swarm::ReleaseFacts PeerEngine::release_facts(const LocalVersion& v) const {
  swarm::ReleaseFacts facts;
  auto model = models_.find(v.model);
  facts.is_head = model != models_.end() && model->second.head && model->second.head->id == v.id;
  {
    std::lock_guard lock(v.mutex);
    facts.complete = v.state == VersionState::kComplete;
  }
  facts.other_holders = replicas(v.id);
  return facts;
}

void PeerEngine::release_due(bool all) {
  if (deferred_releases_.empty()) return;
  const TimePoint now = all ? kTimeNever : steady_now_();
  for (const ManifestId& id : deferred_releases_.due(now, [this](const ManifestId& id) {
         auto v = find_version(id);
         return v ? release_facts(*v) : swarm::ReleaseFacts{};
       })) {
    auto waiting = std::move(deferred_done_[id]);
    deferred_done_.erase(id);
    auto v = find_version(id);
    if (!v) continue;
    TH_LOG_INFO(kLog, "releasing " << v->model << " v" << v->number << " after its deferral");
    release_now(v, [waiting = std::move(waiting)] {
      for (const auto& fn : waiting) fn();
    });
  }
  arm_deferral_timer();
}

void PeerEngine::arm_deferral_timer() {
  const TimePoint next = deferred_releases_.next_deadline();
  if (next == kTimeNever) {
    deferral_timer_.cancel();
    return;
  }
  const auto now = steady_now_();
  deferral_timer_.expires_after(next > now ? std::chrono::duration_cast<std::chrono::steady_clock::duration>(next - now)
                                           : std::chrono::steady_clock::duration::zero());
  deferral_timer_.async_wait([this](std::error_code ec) {
    if (!ec && !closed_) release_due(/*all=*/false);
  });
}

void PeerEngine::release_now(const std::shared_ptr<LocalVersion>& v, std::function<void()> done) {
  swarm_.stop(steady_now_(), v->id);
  gossip_->core().remove_holding(v->model, v->number);
  gossip_->pump();
  versions_.erase(v->id);
  {
    std::lock_guard lock(v->mutex);
    if (v->state == VersionState::kFetching || v->state == VersionState::kManifest) {
      v->state = VersionState::kFailed;
      v->result = Status::cancelled("released before it finished");
    }
  }
  auto finish = [v, done = std::move(done)] {
    {
      std::lock_guard lock(v->mutex);
      v->state = VersionState::kReleased;
    }
    v->changed.notify_all();
    done();
  };
  if (v->pins == 0) {
    finish();
  } else if (v->on_unpinned) {  // released twice while pieces are in flight: both wait
    v->on_unpinned = [first = std::move(v->on_unpinned), second = std::move(finish)] {
      first();
      second();
    };
  } else {
    v->on_unpinned = std::move(finish);
  }
  pump_swarm();
}

void PeerEngine::update_holding(const LocalVersion& v, std::uint16_t permille) {
  if (!options_.serve_fetched && !v.published) return;  // a leech announces nothing
  gossip_->core().set_holding(gossip::HoldingEntry{v.model, v.number, v.id, permille});
  gossip_->pump();
}

std::optional<VersionInfo> PeerEngine::latest(const std::string& model) const {
  auto it = models_.find(model);
  if (it == models_.end()) return std::nullopt;
  return it->second.head;
}

void PeerEngine::subscribe(const std::string& model, std::function<void(const VersionInfo&)> callback) {
  Model& m = models_[model];
  if (m.head) callback(*m.head);
  m.subscribers.push_back(std::move(callback));
}

std::size_t PeerEngine::replicas(const ManifestId& id) const {
  std::size_t n = 0;
  for (const auto& member : gossip_->core().members()) {
    if (member.liveness != gossip::Liveness::kAlive && member.liveness != gossip::Liveness::kSuspect) continue;
    for (const auto& h : member.record->record.holdings) {
      if (h.manifest_id == id && h.complete()) ++n;
    }
  }
  return n;
}

std::string PeerEngine::status_json() const {
  auto j = transport::gossip_status_json(gossip_->core(), steady_now_());
  nlohmann::ordered_json versions = nlohmann::ordered_json::array();
  for (const auto& [id, v] : versions_) {
    const auto swarm_progress = swarm_.progress(id);
    std::lock_guard lock(v->mutex);
    versions.push_back({{"model", v->model},
                        {"version", v->number},
                        {"id", id.hex()},
                        {"state", std::string(state_name(v->state))},
                        {"published", v->published},
                        {"bytes_total", v->progress.bytes_total},
                        {"bytes_verified", v->progress.bytes_verified},
                        {"shards_total", v->progress.shards_total},
                        {"shards_verified", v->progress.shards_verified},
                        {"sources", v->progress.sources},
                        {"fetch_seconds", v->fetch_seconds},
                        {"started_unix_ms", v->started_unix_ms},
                        {"complete_unix_ms", v->complete_unix_ms},
                        {"bytes_served", v->bytes_served},
                        {"bad_shards", v->bad_shards},
                        {"requests_timed_out", swarm_progress ? swarm_progress->requests_timed_out : 0},
                        {"duplicate_bytes", swarm_progress ? swarm_progress->duplicate_bytes : 0},
                        {"endgame", swarm_progress ? swarm_progress->endgame : false},
                        {"replicas", replicas(id)}});
  }
  j["versions"] = std::move(versions);
  nlohmann::ordered_json links = nlohmann::ordered_json::array();
  for (const auto& [peer, link] : links_) {
    nlohmann::ordered_json lanes = nlohmann::ordered_json::array();
    for (std::size_t lane = 0; lane < link.lanes.size(); ++lane) {
      const auto& c = link.lanes[lane];
      if (!c || !c->established() || c->closed()) continue;
      lanes.push_back({{"lane", lane}, {"bytes_sent", c->bytes_sent()}, {"bytes_received", c->bytes_received()}});
    }
    links.push_back({{"peer", peer.hex()}, {"lanes", std::move(lanes)}});
  }
  j["data_links"] = std::move(links);
  j["data_addr"] = data_bound_.to_string();
  j["discarded_piece_bytes"] = swarm_.discarded_piece_bytes();
  return j.dump();
}

void PeerEngine::notify_changed() {
  for (const auto& listener : change_listeners_) listener();
}

// --------------------------------------------------------------------------
// Swarm actions

void PeerEngine::pump_swarm() {
  if (closed_) return;
  while (auto action = swarm_.poll()) {
    if (auto* open = std::get_if<swarm::OpenConnection>(&*action)) {
      open_connection(open->peer);
    } else if (auto* close = std::get_if<swarm::CloseConnection>(&*action)) {
      auto it = links_.find(close->peer);
      if (it != links_.end()) {
        TH_LOG_INFO(kLog, "disconnecting " << close->peer.short_hex() << ": " << close->reason);
        auto primary = it->second.lanes[0];
        primary->close(Status::cancelled(close->reason));  // the other lanes follow (on_closed)
      }
    } else if (auto* send_message = std::get_if<swarm::SendMessage>(&*action)) {
      send(send_message->peer, send_message->message);
    } else if (auto* serve = std::get_if<swarm::ServePiece>(&*action)) {
      serve_piece(*serve);
    } else if (auto* drop = std::get_if<swarm::DropQueuedPieces>(&*action)) {
      if (auto link = links_.find(drop->peer); link != links_.end()) {
        for (const auto& lane : link->second.lanes) {
          if (lane) lane->cancel_pieces_of(drop->version);
        }
      }
    } else if (auto* verify_shard = std::get_if<swarm::VerifyShard>(&*action)) {
      verify(*verify_shard);
    } else if (auto* held = std::get_if<swarm::ShardHeld>(&*action)) {
      auto v = find_version(held->version);
      if (!v) continue;
      std::uint16_t permille = 0;
      {
        std::lock_guard lock(v->mutex);
        const ShardEntry& e = v->manifest->shard(held->shard);
        ++v->progress.shards_verified;
        v->progress.bytes_verified += e.byte_length;
        if (auto p = swarm_.progress(v->id)) v->progress.sources = p->neighbours;
        const double seconds = to_seconds(steady_now_() - v->started);
        if (seconds > 0) v->progress.bytes_per_second = static_cast<double>(v->progress.bytes_verified) / seconds;
        permille = static_cast<std::uint16_t>(std::min<std::uint64_t>(
            999, 1000 * v->progress.shards_verified / std::max<std::uint32_t>(1, v->progress.shards_total)));
      }
      v->changed.notify_all();
      update_holding(*v, permille);
    } else if (auto* finished_fetch = std::get_if<swarm::FetchFinished>(&*action)) {
      finished(finished_fetch->version, finished_fetch->status);
    }
  }
  arm_swarm_timer();
}

void PeerEngine::arm_swarm_timer() {
  const TimePoint next = swarm_.next_timeout();
  if (next == swarm_timer_at_) return;
  swarm_timer_at_ = next;
  if (next == kTimeNever) {
    swarm_timer_.cancel();
    return;
  }
  const auto now = steady_now_();
  swarm_timer_.expires_after(next > now ? std::chrono::duration_cast<std::chrono::steady_clock::duration>(next - now)
                                        : std::chrono::steady_clock::duration::zero());
  swarm_timer_.async_wait([this](std::error_code ec) {
    if (ec || closed_) return;
    swarm_timer_at_ = kTimeNever;
    swarm_.handle_timeout(steady_now_());
    pump_swarm();
  });
}

void PeerEngine::finished(const ManifestId& id, const Status& status) {
  auto v = find_version(id);
  if (!v) return;
  {
    std::lock_guard lock(v->mutex);
    v->result = status;
    v->state = status.is_ok() ? VersionState::kComplete : VersionState::kFailed;
    v->progress.done = true;
    v->fetch_seconds = to_seconds(steady_now_() - v->started);
    if (status.is_ok()) v->complete_unix_ms = wall_clock_ms();
  }
  v->changed.notify_all();
  if (status.is_ok()) {
    update_holding(*v, 1000);
    TH_LOG_INFO(kLog, "fetched " << v->model << " v" << v->number << " in " << to_seconds(steady_now_() - v->started)
                                 << " s, every shard verified");
  } else {
    TH_LOG_WARN(kLog, "fetch of " << v->model << " v" << v->number << " failed: " << status.to_string());
    swarm_.stop(steady_now_(), id);
    gossip_->core().remove_holding(v->model, v->number);
    gossip_->pump();
  }
  notify_changed();
}

void PeerEngine::verify(const swarm::VerifyShard& request) {
  auto v = find_version(request.version);
  if (!v) return;
  const ShardEntry& e = v->manifest->shard(request.shard);
  const bool good =
      verify_shard(*v->manifest, request.shard, std::span<const std::byte>(v->destination).subspan(e.byte_offset, e.byte_length));
  if (!good) {
    TH_LOG_WARN(kLog, v->model << " v" << v->number << ": shard " << request.shard.value
                               << " failed verification; fetching it again");
    std::lock_guard lock(v->mutex);
    ++v->bad_shards;
  }
  swarm_.on_verified(steady_now_(), request.version, request.shard, good);
}

void PeerEngine::serve_piece(const swarm::ServePiece& s) {
  auto v = find_version(s.version);
  auto link = links_.find(s.peer);
  if (!v || link == links_.end()) return;
  transport::DataConnection& lane = link->second.lane_for(s.header.request_id);
  if (s.offset + s.length > v->memory.size()) return;
  std::span<const std::byte> payload = v->memory.subspan(s.offset, s.length);
  ++v->pins;
  if (options_.test_corrupt_serving) {
    // A deliberately bad holder (tests only): serves a corrupted copy.
    struct CorruptedCopy : transport::PieceSource {
      std::vector<std::byte> bytes;
      std::shared_ptr<LocalVersion> version;
      void on_piece_sent(std::uint32_t length, bool sent) override { version->on_piece_sent(length, sent); }
    };
    auto copy = std::make_shared<CorruptedCopy>();
    copy->bytes.assign(payload.begin(), payload.end());
    copy->bytes[copy->bytes.size() / 2] ^= std::byte{0x01};
    copy->version = v;
    lane.send_piece(s.header, copy->bytes, copy);
    return;
  }
  lane.send_piece(s.header, payload, v);
}

// --------------------------------------------------------------------------
// Data connections

void PeerEngine::accept_data() {
  data_acceptor_.async_accept([this](std::error_code ec, asio::ip::tcp::socket socket) {
    if (closed_) return;
    if (!ec) {
      accepting_.push_back(
          transport::DataConnection::accept(std::move(socket), identity_, swarm_key_, *this, kDataTimeouts));
    } else if (ec != asio::error::operation_aborted) {
      TH_LOG_WARN(kLog, "data accept failed: " << ec.message());
    }
    accept_data();
  });
}

std::optional<asio::ip::tcp::endpoint> PeerEngine::data_endpoint_of(const PeerId& peer) const {
  auto member = gossip_->core().member(peer);
  if (!member) return std::nullopt;
  auto hp = core::parse_host_port(member->record->record.data_addr);
  if (!hp) return std::nullopt;
  std::error_code ec;
  auto ip = asio::ip::make_address(hp->host, ec);
  if (ec) return std::nullopt;
  return asio::ip::tcp::endpoint(ip, hp->port);
}

void PeerEngine::open_connection(const PeerId& peer) {
  if (links_.count(peer)) {
    swarm_.on_connected(steady_now_(), peer);
    return;
  }
  if (connecting_.count(peer)) return;
  auto endpoint = data_endpoint_of(peer);
  if (!endpoint) {
    swarm_.on_connect_failed(steady_now_(), peer);
    return;
  }
  connecting_[peer] = transport::DataConnection::connect(io_, *endpoint, identity_, swarm_key_, *this, kDataTimeouts);
}

void PeerEngine::send(const PeerId& peer, const swarm::SwarmMessage& message) {
  auto it = links_.find(peer);
  if (it != links_.end()) {
    const DataLink& link = it->second;
    (message.type == swarm::MessageType::kRequest ? link.lane_for(message.request_id) : link.primary()).send(message);
    return;
  }
  pending_[peer].push_back(message);
  open_connection(peer);
}

void PeerEngine::on_established(transport::DataConnection& connection) {
  if (connection.lane() > 0) return attach_lane(connection);
  const PeerId remote = connection.remote();
  std::shared_ptr<transport::DataConnection> self;
  bool outbound = false;
  for (auto it = connecting_.begin(); it != connecting_.end(); ++it) {
    if (it->second.get() != &connection) continue;
    self = it->second;
    outbound = true;
    if (it->first != remote) {
      connection.close(Status::verify_failed("the peer at that address is not the one gossip named"));
      return;
    }
    connecting_.erase(it);
    break;
  }
  if (!self) {
    for (auto it = accepting_.begin(); it != accepting_.end(); ++it) {
      if (it->get() == &connection) {
        self = *it;
        accepting_.erase(it);
        break;
      }
    }
  }
  if (!self) return;
  auto existing = links_.find(remote);
  if (existing != links_.end()) {
    // Both sides connected at once: keep the connection the smaller id opened.
    const PeerId& new_initiator = outbound ? id() : remote;
    if (new_initiator < (new_initiator == id() ? remote : id())) {
      auto old = std::move(existing->second.lanes);
      links_.erase(existing);
      for (auto& lane : old) {
        if (lane) lane->close(Status::cancelled("a duplicate connection"));
      }
      // What was in flight on the old link went with it: its requests, and
      // a payload half landed. Unsaid, the swarm core waited for them, and
      // the landing held its block hostage until it counted as stalled
      // (cluster chaos: a host after its link came back took 6.4 s more,
      // while every other copy of that block was sent and discarded, 6x
      // the version).
      TH_LOG_INFO(kLog, "replacing the connection to " << remote.short_hex() << " (both sides connected)");
      swarm_.on_disconnected(steady_now_(), remote);
    } else {
      connection.close(Status::cancelled("a duplicate connection"));
      return;
    }
  }
  DataLink& link = links_[remote];
  link.lanes = {self};
  if (outbound && options_.data_lanes > 1) {
    if (auto endpoint = data_endpoint_of(remote)) {
      link.lanes.resize(options_.data_lanes);
      for (std::size_t lane = 1; lane < link.lanes.size(); ++lane) {
        link.lanes[lane] = transport::DataConnection::connect(io_, *endpoint, identity_, swarm_key_, *this,
                                                              kDataTimeouts, static_cast<std::uint8_t>(lane));
      }
    }
  }
  if (auto pending = pending_.find(remote); pending != pending_.end()) {
    for (const auto& m : pending->second) self->send(m);
    pending_.erase(pending);
  }
  swarm_.on_connected(steady_now_(), remote);
  pump_swarm();
}

void PeerEngine::on_message(transport::DataConnection& connection, swarm::SwarmMessage message) {
  const PeerId remote = connection.remote();
  switch (message.type) {
    case swarm::MessageType::kGetManifest: {
      for (const auto& [name, model] : models_) {
        auto m = model.manifests.find(message.version);
        if (m != model.manifests.end()) {
          swarm::SwarmMessage reply = message_of(swarm::MessageType::kManifest, message.version);
          reply.bytes.assign(m->second.encoded().begin(), m->second.encoded().end());
          connection.send(reply);
          return;
        }
      }
      connection.send(message_of(swarm::MessageType::kNoManifest, message.version));
      return;
    }
    case swarm::MessageType::kManifest:
      on_manifest(remote, message);
      return;
    case swarm::MessageType::kCancel:
      // The requester got the block elsewhere, or gave up on us: a piece still
      // queued here would cross the link for nothing (seen: a congestion
      // collapse over a slow link, 2x the version sent in vain).
      if (auto link = links_.find(remote); link != links_.end()) {
        for (const auto& lane : link->second.lanes) {
          if (lane && lane->cancel_piece(message.request_id)) break;
        }
      }
      return;
    default:
      swarm_.on_message(steady_now_(), remote, message);
      pump_swarm();
      return;
  }
}

std::span<std::byte> PeerEngine::piece_destination(transport::DataConnection& connection,
                                                   const swarm::SwarmMessage& header) {
  auto target = swarm_.begin_piece(steady_now_(), connection.remote(), header);
  if (!target) return {};
  arm_swarm_timer();  // the landing has a deadline
  auto v = find_version(target->version);
  if (!v || target->offset + target->length > v->destination.size()) return {};
  return v->destination.subspan(target->offset, target->length);
}

void PeerEngine::on_piece(transport::DataConnection& connection, const swarm::SwarmMessage& header, bool stored) {
  swarm_.on_piece(steady_now_(), connection.remote(), header, stored);
  pump_swarm();
}

void PeerEngine::on_piece_progress(transport::DataConnection& connection, const swarm::SwarmMessage& header) {
  swarm_.on_piece_progress(steady_now_(), connection.remote(), header);
  arm_swarm_timer();  // the landing's deadline moved
}

void PeerEngine::attach_lane(transport::DataConnection& connection) {
  const PeerId remote = connection.remote();
  const std::uint8_t lane = connection.lane();
  auto link = links_.find(remote);
  // An extra lane we opened: it is in its slot already.
  if (link != links_.end() && lane < link->second.lanes.size() && link->second.lanes[lane].get() == &connection) return;
  auto accepted = std::find_if(accepting_.begin(), accepting_.end(), [&](const auto& c) { return c.get() == &connection; });
  if (accepted == accepting_.end()) {
    // Opened by us towards an address whose peer is not the one gossip named.
    connection.close(Status::verify_failed("the peer at that address is not the one gossip named"));
    return;
  }
  auto self = std::move(*accepted);
  accepting_.erase(accepted);
  if (link == links_.end()) {
    connection.close(Status::cancelled("an extra lane without its primary connection"));
    return;
  }
  auto& lanes = link->second.lanes;
  if (lane >= lanes.size()) lanes.resize(lane + 1);
  if (lanes[lane] && !lanes[lane]->closed()) {
    connection.close(Status::cancelled("a duplicate lane"));
    return;
  }
  lanes[lane] = std::move(self);
}

void PeerEngine::on_closed(transport::DataConnection& connection, const Status& why) {
  if (closed_) return;
  for (auto it = connecting_.begin(); it != connecting_.end(); ++it) {
    if (it->second.get() == &connection) {
      const PeerId peer = it->first;
      connecting_.erase(it);
      pending_.erase(peer);
      TH_LOG_DEBUG(kLog, "connection to " << peer.short_hex() << " failed: " << why.to_string());
      swarm_.on_connect_failed(steady_now_(), peer);
      pump_swarm();
      return;
    }
  }
  std::erase_if(accepting_, [&](const auto& c) { return c.get() == &connection; });
  auto it = links_.begin();
  while (it != links_.end() && !it->second.holds(&connection)) ++it;
  if (it == links_.end()) return;
  if (!connection.established()) {
    // An extra lane that never opened: the link does without it.
    for (auto& lane : it->second.lanes) {
      if (lane.get() == &connection) lane.reset();
    }
    return;
  }
  // An established lane: the whole link goes, and the swarm core puts the
  // requests it had in flight back at once.
  const PeerId remote = it->first;
  auto lanes = std::move(it->second.lanes);
  links_.erase(it);
  for (auto& lane : lanes) {
    if (lane && lane.get() != &connection) lane->close(Status::cancelled("another lane to this peer closed"));
  }
  swarm_.on_disconnected(steady_now_(), remote);
  pump_swarm();
}

}  // namespace tensorhub::peer
