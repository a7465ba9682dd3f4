#include "support/peer_network.hpp"

#include "core/overloaded.hpp"

#include <cstring>

namespace tensorhub::testing {

using namespace std::chrono_literals;

PeerNetwork::PeerNetwork(std::uint64_t seed, peer::PeerCoreConfig config)
    : config_(std::move(config)), gossip_(seed, gossip::GossipConfig{}, sim::NetworkConditions{}, TimePoint(1s)) {
  gossip_.on_event([this](std::size_t peer, const gossip::MemberEvent& e) {
    if (peer >= peers_.size() || !peers_[peer].core) return;
    events_.advance_to(gossip_.now());
    peers_[peer].core->on_member_event(now(), e);
    drain(peer);
  });
}

PeerNetwork::~PeerNetwork() = default;

std::size_t PeerNetwork::add_peer(Location where, const std::vector<std::size_t>& seeds) {
  const std::size_t index = gossip_.add_peer(where);
  peer::PeerCoreConfig c = config_;
  c.location = where;
  if (c.trusted_publishers.empty()) {
    for (std::size_t i = 0; i < 64; ++i) c.trusted_publishers.push_back(identity(i).public_key());
  }
  peers_.emplace_back();
  links_.add_peer(1e9);
  peers_[index].core = std::make_unique<peer::PeerCore>(std::move(c), gossip_.id(index), 1000 + index, &gossip_.core(index));
  peers_[index].core->sign_seals_with(identity(index));
  if (index > 0) gossip_.join(index, seeds.empty() ? std::vector<std::size_t>{0} : seeds);
  drain(index);
  return index;
}

void PeerNetwork::crash(std::size_t peer) {
  peers_[peer].core.reset();
  peers_[peer].timer.cancel();
  gossip_.crash(peer);
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    if (i == peer || !peers_[i].core) continue;
    links_.close(now(), peer, i);
  }
}

Result<std::shared_ptr<peer::LocalVersion>> PeerNetwork::publish(std::size_t p, const std::string& model,
                                                                 std::span<const std::byte> image,
                                                                 std::vector<TensorEntry> tensors) {
  const ConstRegion one[] = {image};
  return publish(p, model, std::span<const ConstRegion>(one), std::move(tensors));
}

Result<std::shared_ptr<peer::LocalVersion>> PeerNetwork::publish(std::size_t p, const std::string& model,
                                                                 std::span<const ConstRegion> regions,
                                                                 std::vector<TensorEntry> tensors) {
  peer::PeerCore& c = *peers_[p].core;
  const auto next = c.next_version(model);
  ManifestBuildOptions o;
  o.model = model;
  o.version = next.version.value;
  o.parent = next.parent;
  o.shard_size = 64u << 10;
  o.threads = 1;
  auto m = build_manifest(o, regions, std::move(tensors), identity(p));
  if (!m) return m.status();
  auto v = c.publish(now(), std::make_shared<const Manifest>(std::move(*m)), core::ConstRegions(regions));
  drain(p);
  return v;
}

Result<std::shared_ptr<peer::LocalVersion>> PeerNetwork::publish_part(std::size_t p, const std::string& model,
                                                                      std::uint64_t version, PartOf part,
                                                                      std::span<const std::byte> image,
                                                                      std::vector<TensorEntry> tensors) {
  peer::PeerCore& c = *peers_[p].core;
  ManifestBuildOptions o;
  o.model = model;
  o.version = version;
  o.parent = c.next_version(model).parent;
  o.shard_size = 64u << 10;
  o.threads = 1;
  o.part = part;
  // Served from a copy this network owns: the caller's image may go.
  peers_[p].owned.emplace_back(image.begin(), image.end());
  const std::span<const std::byte> kept(peers_[p].owned.back());
  auto m = build_manifest(o, kept, std::move(tensors), identity(p));
  if (!m) return m.status();
  const ConstRegion one[] = {kept};
  auto v = c.publish_part(now(), std::make_shared<const Manifest>(std::move(*m)), core::ConstRegions(std::span<const ConstRegion>(one)));
  drain(p);
  return v;
}

Result<std::shared_ptr<peer::LocalVersion>> PeerNetwork::fetch(std::size_t p, const std::string& model,
                                                               std::uint64_t version, std::span<std::byte> destination) {
  if (destination.empty()) return fetch(p, model, version, std::span<const MutableRegion>());
  return fetch(p, model, version, std::span<const MutableRegion>(&destination, 1));
}

Result<std::shared_ptr<peer::LocalVersion>> PeerNetwork::fetch(std::size_t p, const std::string& model,
                                                               std::uint64_t version,
                                                               std::span<const MutableRegion> regions,
                                                               const peer::MemoryDomain& domain) {
  peer::PeerCore& c = *peers_[p].core;
  auto m = c.resolve(model, VersionNumber{version});
  if (!m) return m.status();
  core::MutableRegions destination(regions);
  if (regions.empty()) {
    peers_[p].owned.emplace_back((*m)->total_size());
    destination = core::MutableRegions(std::span<std::byte>(peers_[p].owned.back()));
  }
  auto v = c.fetch(now(), *m, std::move(destination), domain);
  drain(p);
  return v;
}

Result<PeerNetwork::PartsFetch> PeerNetwork::fetch_parts(std::size_t p, const std::string& model,
                                                         std::uint64_t version) {
  peer::PeerCore& c = *peers_[p].core;
  const peer::KnownVersion* k = c.heads().known(model, VersionNumber{version});
  if (k == nullptr || !k->in_parts()) return Status::not_found(model + " v" + std::to_string(version) + " in parts");
  const auto sealed = k->sealed();
  PartsFetch out;
  peers_[p].owned.emplace_back(sealed->total_size());
  out.whole = std::span<std::byte>(peers_[p].owned.back());
  const core::MutableRegions whole(out.whole);
  for (std::uint32_t i = 0; i < sealed->parts().size(); ++i) {
    const auto runs = sealed->landing_runs(i);
    peers_[p].owned.emplace_back(manifest::SealedVersion::gap_bytes(runs));
    auto v = c.fetch(now(), sealed->parts()[i], manifest::landing_regions(runs, whole, peers_[p].owned.back()));
    drain(p);
    if (!v) return v.status();
    out.parts.push_back(std::move(*v));
  }
  return out;
}

void PeerNetwork::release(std::size_t p, const std::shared_ptr<peer::LocalVersion>& v, peer::ReleaseMode mode,
                          std::function<void()> done) {
  if (done) peers_[p].release_waiters[v.get()].push_back(std::move(done));
  peers_[p].core->release(now(), v, mode);
  drain(p);
}

std::optional<std::size_t> PeerNetwork::index_of(const PeerId& id) const { return gossip_.index_of(id); }

void PeerNetwork::arm(std::size_t peer) {
  Peer& p = peers_[peer];
  if (!p.core) return;
  if (auto generation = p.timer.rearm(p.core->next_timeout(), now())) {
    schedule(Event{p.timer.at(), Kind::kTimer, peer, std::nullopt, *generation, nullptr, false, {}});
  }
}

void PeerNetwork::drain(std::size_t peer) {
  Peer& p = peers_[peer];
  while (p.core) {
    auto action = p.core->poll();
    if (!action) break;
    std::visit(
        core::Overloaded{
            [&](swarm::OpenConnection& open) {
              auto to = index_of(open.peer);
              links_.open(now(), peer, to, to && peers_[*to].core);
            },
            [&](swarm::CloseConnection& close) {
              if (auto to = index_of(close.peer)) links_.close(now(), peer, *to);
            },
            [&](swarm::SendMessage& send) {
              if (auto to = index_of(send.peer)) links_.send(now(), peer, *to, send.message);
            },
            [&](swarm::ServePiece& serve) {
              auto to = index_of(serve.peer);
              auto v = p.core->find(serve.version_id);
              if (!to || !v) return;
              std::vector<std::byte> bytes(serve.length);
              if (!v->domain->read(v->memory, serve.offset, bytes)) return;
              links_.serve(now(), peer, *to, serve.header, std::move(bytes));
            },
            // This network times each piece when it is served (the uplink is
            // a schedule, not a queue): nothing queued to drop or cancel.
            [](swarm::DropQueuedPieces&) {},
            [](peer::CancelQueuedPiece&) {},
            [&](peer::HashShard& hash) {
              const bool good = hash.version->domain->verify_shard(*hash.version->manifest, hash.shard,
                                                                   hash.version->destination.as_const());
              schedule(Event{now(), Kind::kHashed, peer, std::nullopt, hash.shard.value, hash.version, good, {},
                             hash.fetch_serial});
            },
            [&](peer::CopyShards& copy) {
              const Manifest& m = *copy.to->manifest;
              std::vector<ShardIndex> failed;
              Status destination_error;
              for (ShardIndex s : copy.shards) {
                p.bytes_copied += m.shard(s).byte_length;
                Status copied =
                    peer::copy_verified_shard(*copy.to->domain, m, s, copy.from->memory, copy.to->destination);
                if (copied.is_ok()) continue;
                failed.push_back(s);
                if (copied.code() == StatusCode::kIoError && destination_error.is_ok()) destination_error = copied;
              }
              if (!destination_error.is_ok()) {
                p.core->on_shards_copied(now(), copy.to, failed, {}, destination_error);
                return;
              }
              schedule(Event{now(), Kind::kCopied, peer, std::nullopt, 0, copy.to, false, std::move(failed)});
            },
            // No host mates share memory here: every shard comes from the swarm.
            [&](peer::CopyFromMate& mate) {
              p.core->on_shards_copied(now(), mate.to, mate.shards, "no host mate channel in this network");
            },
            // Pieces took their bytes when they were served: the memory is free at once.
            [&](peer::ReleaseMemory& release) {
              auto waiting = p.release_waiters.extract(release.version.get());
              if (!waiting.empty()) {
                for (auto& done : waiting.mapped()) done();
              }
            },
            [](peer::FetchDone&) {},      // tests read the version's state
            [&](peer::HeadChanged& head) { p.heads.push_back(head.head); },
            [&](peer::GossipChanged&) { gossip_.pump(peer); },
            [](peer::StateChanged&) {},   // tests read the versions' state
            [&](peer::Report& report) {
              p.reports.push_back(report.text);
              if (report.level == peer::Report::kError) p.errors.push_back(report.text);
            },
        },
        *action);
  }
  arm(peer);
}

namespace {

// What VirtualLinks delivers to, for a peer core: its connection events,
// and its pieces through the owner of their way (PeerCore::pieces).
struct LinkedCore {
  peer::PeerCore& core;

  void on_message(TimePoint now, const PeerId& from, const swarm::SwarmMessage& m) { core.on_message(now, from, m); }
  void on_connected(TimePoint now, const PeerId& from) { core.on_connected(now, from); }
  void on_connect_failed(TimePoint now, const PeerId& from) { core.on_connect_failed(now, from); }
  void on_disconnected(TimePoint now, const PeerId& from) { core.on_disconnected(now, from); }
  std::optional<peer::PieceLanding> begin_piece(TimePoint now, const PeerId& from, const swarm::SwarmMessage& header) {
    return core.landing_for(core.pieces(
        now, [&](swarm::PiecePath& path, TimePoint at) { return path.begin_piece(at, from, header); }));
  }
  void on_piece(TimePoint now, const PeerId& from, const swarm::SwarmMessage& header, bool stored) {
    core.pieces(now, [&](swarm::PiecePath& path, TimePoint at) { path.on_piece(at, from, header, stored); });
  }
  void on_piece_not_kept(TimePoint now, const PeerId& from, const swarm::SwarmMessage& header) {
    core.pieces(now, [&](swarm::PiecePath& path, TimePoint at) { path.on_piece_not_kept(at, from, header); });
  }
};

}  // namespace

void PeerNetwork::dispatch(Event& e) {
  Peer& p = peers_[e.to];
  if (!p.core) return;
  switch (e.kind) {
    case Kind::kLink: {
      const std::size_t from = e.link->from;
      std::shared_ptr<peer::LocalVersion> refused;
      Status why;
      LinkedCore linked{*p.core};
      links_.deliver(linked, now(), gossip_.id(from), peers_[from].core != nullptr, *e.link,
                     [&](const peer::PieceLanding& target, std::span<const std::byte> payload) {
                       // Through the domain: GPU memory is not the host's to write.
                       why = target.version->domain->write(target.version->destination, target.offset, payload);
                       if (!why.is_ok()) {
                         refused = target.version;
                         return false;
                       }
                       p.piece_bytes_received += payload.size();
                       return true;
                     });
      if (refused) p.core->on_local_write_failed(now(), refused, why);
      break;
    }
    case Kind::kTimer:
      if (!p.timer.fires(e.number)) return;
      p.core->handle_timeout(now());
      break;
    case Kind::kHashed:
      p.core->pieces(now(), [&](swarm::PiecePath& path, TimePoint at) {
        path.on_verified(at, e.version->id, ShardIndex{static_cast<std::uint32_t>(e.number)}, e.fetch_serial, e.good);
      });
      break;
    case Kind::kCopied: p.core->on_shards_copied(now(), e.version, e.failed); break;
  }
  drain(e.to);
}

void PeerNetwork::run_until(TimePoint t) {
  auto run_own = [this](Event& e) { dispatch(e); };
  while (true) {
    const TimePoint own = events_.empty() ? kTimeNever : events_.next_at();
    const TimePoint g = gossip_.next_event();
    const TimePoint next = std::min(own, g);
    if (next > t || next == kTimeNever) break;
    events_.advance_to(next);
    gossip_.run_until(next);
    events_.run_until(next, run_own);
  }
  gossip_.run_until(t);
  events_.run_until(t, run_own);
}

bool PeerNetwork::run_until(const std::function<bool()>& done, Duration limit, Duration step) {
  const TimePoint end = now() + limit;
  while (now() < end) {
    if (done()) return true;
    run_until(std::min(end, now() + step));
  }
  return done();
}

}  // namespace tensorhub::testing
