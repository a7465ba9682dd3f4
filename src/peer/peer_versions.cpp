// PeerCore's versions: publishing, fetching (with the shards unchanged
// since a held version copied locally), private copies, progress announced
// in gossip, and release with retention.
#include "peer/peer_core.hpp"

#include <algorithm>

namespace tensorhub::peer {
namespace {

swarm::ShardLayout layout_of(const Manifest& m, std::uint32_t block_size) {
  return swarm::ShardLayout{m.total_size(), m.shard_size(),
                            static_cast<std::uint32_t>(std::min<std::uint64_t>(block_size, m.shard_size()))};
}

void set_totals(LocalVersion& v, const Manifest& m) {
  v.progress.bytes_total = 0;
  v.progress.shards_total = 0;
  for (std::uint32_t s = 0; s < m.shard_count(); ++s) {
    if (!v.wants(ShardIndex{s})) continue;
    v.progress.bytes_total += m.shard(ShardIndex{s}).byte_length;
    ++v.progress.shards_total;
  }
}

}  // namespace

// --------------------------------------------------------------------------
// Versions

std::shared_ptr<LocalVersion> PeerCore::find(const ManifestId& id) const {
  auto it = versions_.find(id);
  return it == versions_.end() ? nullptr : it->second;
}

Result<std::shared_ptr<LocalVersion>> PeerCore::publish(TimePoint now, std::shared_ptr<const Manifest> manifest,
                                                        core::ConstRegions memory, core::Bitfield have,
                                                        const MemoryDomain& domain) {
  const Manifest& m = *manifest;
  const std::string what = m.model() + " v" + std::to_string(m.version());
  if (!memory.empty() && memory.size() != m.total_size()) {
    return Status::invalid_argument("the memory holds " + std::to_string(memory.size()) + " bytes; " + what +
                                    " has " + std::to_string(m.total_size()));
  }
  if (have.size() != 0 && have.size() != m.shard_count()) {
    return Status::invalid_argument("a part of " + what + " must name each of its " + std::to_string(m.shard_count()) +
                                    " shards");
  }
  const HeadTracker::NextVersion next = heads_.next_version(m.model());
  if (number_of(m) != next.version || m.parent() != next.parent) {
    return Status::already_exists(what + " cannot be published: the next version of " + m.model() + " is v" +
                                  std::to_string(next.version.value) + " (another publication or a newer head arrived " +
                                  "meanwhile)");
  }
  if (gossip_) {
    // Announced or not at all: a publication nobody hears of stalls its readers.
    TENSORHUB_RETURN_IF_ERROR(gossip_->can_announce_origin(gossip::HeadEntry{m.model(), m.version(), m.id()})
                                  .with_context("cannot publish " + what));
  }
  // Believed first: a manifest the tracker refuses is never served.
  auto accepted = accept_manifest(now, manifest);
  if (!accepted) return accepted.status();
  const bool whole = have.size() == 0;
  return serve_published(now, std::move(manifest), std::move(memory), std::move(have), domain,
                         whole && config_.super_seed);
}

Result<std::shared_ptr<LocalVersion>> PeerCore::publish_part(TimePoint now, std::shared_ptr<const Manifest> manifest,
                                                             core::ConstRegions memory, const MemoryDomain& domain,
                                                             std::span<const manifest::PartView> views) {
  const Manifest& m = *manifest;
  const std::string what = m.model() + " v" + std::to_string(m.version());
  if (!m.part()) return Status::invalid_argument("manifest " + m.id().short_hex() + " of " + what + " is no part's");
  if (!memory.empty() && memory.size() != m.total_size()) {
    return Status::invalid_argument("the memory holds " + std::to_string(memory.size()) + " bytes; part " +
                                    std::to_string(m.part()->index) + " of " + what + " has " +
                                    std::to_string(m.total_size()));
  }
  if (const KnownVersion* k = heads_.known(m.model(), number_of(m))) {
    return Status::already_exists(what + " is known already (" + k->id().short_hex() + "): a part cannot join it");
  }
  if (heads_.equivocated(m.model(), number_of(m))) {
    return Status::already_exists(what + " was signed twice already; publish a later version");
  }
  TENSORHUB_RETURN_IF_ERROR(verify_manifest_signature(m, config_.trusted_publishers));
  std::vector<std::shared_ptr<const Manifest>> view_manifests;
  for (const manifest::PartView& view : views) {
    auto vm = manifest::view_manifest(m, view);
    if (!vm) return Status::invalid_argument("part " + std::to_string(m.part()->index) + " of " + what + ": " +
                                             vm.status().message());
    view_manifests.push_back(std::move(*vm));
  }
  TENSORHUB_RETURN_IF_ERROR(parts_.add_own(manifest));
  auto v = serve_published(now, manifest, memory, {}, domain, /*super_seed=*/false);
  for (std::size_t i = 0; i < views.size(); ++i) {
    std::vector<ConstRegion> gathered;
    if (!memory.empty()) {
      for (const manifest::LandingRun& run : views[i].gather) memory.pieces(run.part_offset, run.length, gathered);
    }
    serve_view(now, v, std::move(view_manifests[i]), core::ConstRegions(std::span<const ConstRegion>(gathered)));
  }
  // The other parts named in records already are asked for now.
  if (gossip_) {
    for (const auto& member : gossip_->members()) {
      if (member.liveness != gossip::Liveness::kAlive || !member.record) continue;
      for (const gossip::HoldingEntry& h : member.record->record.holdings) {
        if (h.is_part_set()) continue;  // of a version sealed already
        send_manifest_request(parts_.on_named(now, member.record->record.id, h.model, VersionNumber{h.version},
                                              h.manifest_id));
      }
    }
  }
  drain_parts(now);
  return v;
}

std::shared_ptr<LocalVersion> PeerCore::serve_published(TimePoint now, std::shared_ptr<const Manifest> manifest,
                                                        core::ConstRegions memory, core::Bitfield have,
                                                        const MemoryDomain& domain, bool super_seed) {
  auto v = serve_complete(now, manifest, std::move(memory), std::move(have), domain,
                          super_seed ? swarm::SwarmCore::ServeMode::kSuperSeed : swarm::SwarmCore::ServeMode::kPlain);
  const Manifest& m = *manifest;
  announce_holding(*v);
  report(Report::kInfo, "published " + m.model() + " v" + std::to_string(m.version()) +
                            (m.part() ? " part " + std::to_string(m.part()->index) + " of " +
                                            std::to_string(m.part()->count)
                                      : std::string()) +
                            " (" + v->id.short_hex() + "), " + std::to_string(m.shard_count()) + " shards");
  drain_swarm(now);
  state_changed();
  return v;
}

void PeerCore::serve_view(TimePoint now, const std::shared_ptr<LocalVersion>& image,
                          std::shared_ptr<const Manifest> view, core::ConstRegions memory) {
  // Super-seeded: the same TP rank of several instances fetches each view,
  // and they swap what the publisher revealed to each.
  auto v = serve_complete(now, std::move(view), std::move(memory), {}, *image->domain,
                          config_.super_seed ? swarm::SwarmCore::ServeMode::kSuperSeed
                                             : swarm::SwarmCore::ServeMode::kPlain);
  v->served_from = image;
  v->view_of = image->id;
  report(Report::kDebug, "serving view " + v->id.short_hex() + " of " + image->model + " v" +
                             std::to_string(image->number.value) + " (" + image->id.short_hex() + "), " +
                             std::to_string(v->manifest->shard_count()) + " shards");
  drain_swarm(now);
}

std::shared_ptr<LocalVersion> PeerCore::serve_complete(TimePoint now, std::shared_ptr<const Manifest> manifest,
                                                       core::ConstRegions memory, core::Bitfield have,
                                                       const MemoryDomain& domain, swarm::SwarmCore::ServeMode mode) {
  const Manifest& m = *manifest;
  if (have.size() == 0) have = core::Bitfield(m.shard_count(), true);
  auto v = std::make_shared<LocalVersion>();
  v->model = m.model();
  v->number = number_of(m);
  v->id = m.id();
  v->manifest = manifest;
  v->role = VersionRole::kPublished;
  v->memory = std::move(memory);
  v->domain = &domain;
  v->started = now;
  set_totals(*v, m);
  v->progress.shards_verified = static_cast<std::uint32_t>(have.count());
  for (std::uint32_t s = 0; s < m.shard_count(); ++s) {
    if (have.test(s)) v->progress.bytes_verified += m.shard(ShardIndex{s}).byte_length;
  }
  v->progress.done = true;
  v->state = VersionState::kComplete;
  v->completed = now;
  versions_[v->id] = v;
  swarm_.serve(now, v->id, layout_of(m, config_.swarm.fetch.block_size), std::move(have), mode);
  return v;
}

Result<std::shared_ptr<LocalVersion>> PeerCore::fetch(TimePoint now, std::shared_ptr<const Manifest> manifest,
                                                      core::MutableRegions destination,
                                                      const MemoryDomain& domain, std::optional<HostMate> host_mate,
                                                      core::Bitfield wanted, std::optional<ManifestId> selection) {
  const Manifest& m = *manifest;
  if (wanted.size() != 0 && (wanted.size() != m.shard_count() || wanted.none())) {
    return Status::invalid_argument("a selection of " + m.model() + " v" + std::to_string(m.version()) +
                                    " names " + std::to_string(wanted.count()) + " of " +
                                    std::to_string(wanted.size()) + " shards; the version has " +
                                    std::to_string(m.shard_count()));
  }
  if (config_.require_secure_hash && m.body().shard_hash != ShardHashAlgorithm::kBlake2b_256) {
    return Status::permission_denied(m.model() + " v" + std::to_string(m.version()) + " is hashed with " +
                                     std::string(shard_hash_name(m.body().shard_hash)) +
                                     "; this peer fetches only versions hashed with blake2b-256 (secure mode)");
  }
  if (!destination.empty() && destination.size() != m.total_size()) {
    return Status::invalid_argument("the destination holds " + std::to_string(destination.size()) +
                                    " bytes; the version needs " + std::to_string(m.total_size()));
  }
  auto v = std::make_shared<LocalVersion>();
  v->model = m.model();
  v->number = number_of(m);
  v->id = m.id();
  v->manifest = manifest;
  v->destination = std::move(destination);
  v->domain = &domain;
  v->host_mate = std::move(host_mate);
  v->started = now;
  v->wanted = std::move(wanted);
  v->view_of = manifest::view_of(m);
  v->slot = slot_in_seal(m, selection);
  set_totals(*v, m);
  if (auto held = find(m.id())) {
    if (!held->whole()) {
      return Status::already_exists("this peer holds a selection of " + m.model() + " v" +
                                    std::to_string(m.version()) + " already; release it to fetch " +
                                    (v->whole() ? "the whole version" : "another selection"));
    }
    // Held here already: a private copy, which never shares state with it.
    v->role = VersionRole::kCopy;
    copies_[v] = held;
    if (held->state == VersionState::kComplete) start_copy(v, held);  // otherwise once it completes (source_finished)
    state_changed();
    return v;
  }
  v->role = VersionRole::kFetched;
  v->memory = v->destination.as_const();
  versions_[v->id] = v;
  if (v->slot) part_sets_.add(*v->slot, v->id);
  start_fetch(now, v);
  return v;
}

void PeerCore::start_copy(const std::shared_ptr<LocalVersion>& copy, const std::shared_ptr<LocalVersion>& source) {
  const Manifest& m = *copy->manifest;
  std::vector<ShardIndex> all;
  core::Bitfield have(m.shard_count());
  for (std::uint32_t s = 0; s < m.shard_count(); ++s) {
    if (!copy->wants(ShardIndex{s})) continue;
    all.push_back(ShardIndex{s});
    have.set(s);
  }
  copies_[copy] = nullptr;
  copying_[copy.get()] = PendingCopies{1, std::move(have), 0};
  actions_.push(CopyShards{source, copy, std::move(all)});
}

void PeerCore::source_finished(TimePoint now, const std::shared_ptr<LocalVersion>& source, const Status& outcome) {
  std::vector<std::shared_ptr<LocalVersion>> waiting;
  for (const auto& [copy, from] : copies_) {
    if (from == source) waiting.push_back(copy);
  }
  // A whole copy takes a released source's place before a selection does:
  // copies wait only on a whole version.
  std::stable_partition(waiting.begin(), waiting.end(), [](const auto& copy) { return copy->whole(); });
  for (const auto& copy : waiting) {
    if (outcome.is_ok()) {
      start_copy(copy, source);
    } else if (outcome.code() != StatusCode::kCancelled && outcome.code() != StatusCode::kIoError) {
      copies_[copy] = nullptr;
      finish(now, copy, outcome);  // the fetch it waited for failed
    } else if (auto taken = find(copy->id); taken && taken->whole()) {
      copies_[copy] = taken;  // another copy took the released one's place: wait for that
    } else if (taken) {
      copies_[copy] = nullptr;
      finish(now, copy, Status::already_exists("this peer holds a selection of " + copy->model + " v" +
                                               std::to_string(copy->number.value) + " now; release it to fetch " +
                                               (copy->whole() ? "the whole version" : "another selection")));
    } else {
      // The held one was released before it completed, or its own memory
      // refused bytes: this fetch takes its place.
      copies_.erase(copy);
      copy->role = VersionRole::kFetched;
      copy->memory = copy->destination.as_const();
      versions_[copy->id] = copy;
      if (copy->slot) part_sets_.add(*copy->slot, copy->id);
      start_fetch(now, copy);
    }
  }
}

void PeerCore::start_fetch(TimePoint now, const std::shared_ptr<LocalVersion>& v) {
  const Manifest& m = *v->manifest;
  PendingCopies pending{0, core::Bitfield(m.shard_count()), 0};
  if (!v->destination.empty()) {
    for (const auto& [id, other] : versions_) {
      if (other == v || other->model != v->model || other->memory.empty()) continue;
      if (!other->holds_all()) continue;
      const ManifestDiff diff = diff_manifests(*other->manifest, m);
      if (!diff.comparable) continue;
      std::vector<bool> changed(m.shard_count(), false);
      for (ShardIndex s : diff.changed) changed[s.value] = true;
      std::vector<ShardIndex> shards;
      for (std::uint32_t s = 0; s < m.shard_count() && s < other->manifest->shard_count(); ++s) {
        if (changed[s] || pending.have.test(s) || !v->wants(ShardIndex{s})) continue;
        pending.have.set(s);
        shards.push_back(ShardIndex{s});
      }
      if (shards.empty()) continue;
      actions_.push(CopyShards{other, v, std::move(shards)});
      ++pending.jobs;
    }
  }
  if (v->host_mate && !v->destination.empty() && v->role != VersionRole::kCopy) {
    std::vector<ShardIndex> shards;
    for (std::uint32_t s = 0; s < m.shard_count(); ++s) {
      if (pending.have.test(s) || !v->wants(ShardIndex{s})) continue;
      pending.have.set(s);
      shards.push_back(ShardIndex{s});
    }
    if (!shards.empty()) {
      actions_.push(CopyFromMate{*v->host_mate, v, std::move(shards)});
      ++pending.jobs;
    }
  }
  if (pending.jobs == 0) return fetch_from_swarm(now, v, std::move(pending.have));
  copying_[v.get()] = std::move(pending);  // the swarm fetch starts once the copies are done
}

void PeerCore::on_local_write_failed(TimePoint now, const std::shared_ptr<LocalVersion>& version, const Status& why) {
  if (find(version->id) != version && copies_.count(version) == 0) return;  // released meanwhile
  copying_.erase(version.get());
  finish(now, version, why.with_context("cannot store " + version->model + " v" + std::to_string(version->number.value)));
  drain_swarm(now);  // what stopping the fetch told its sources goes out now
}

void PeerCore::on_shards_copied(TimePoint now, const std::shared_ptr<LocalVersion>& to,
                                std::span<const ShardIndex> failed, const std::string& mate_failure,
                                const Status& destination_error) {
  auto pending = copying_.find(to.get());
  if (pending == copying_.end()) return;
  if (!destination_error.is_ok()) return on_local_write_failed(now, to, destination_error);
  for (ShardIndex s : failed) {
    pending->second.have.reset(s.value);
    if (mate_failure.empty()) ++pending->second.failed;
  }
  if (!mate_failure.empty() && !failed.empty()) {
    report(Report::kInfo, to->model + " v" + std::to_string(to->number.value) + ": " + std::to_string(failed.size()) +
                              " shard(s) not copied from a host mate (" + mate_failure + "); fetching them");
  }
  if (--pending->second.jobs > 0) return;
  core::Bitfield have = std::move(pending->second.have);
  const std::size_t bad = pending->second.failed;
  copying_.erase(pending);
  if (to->state != VersionState::kFetching) return;  // released meanwhile
  if (bad > 0) {
    report(Report::kError, to->model + " v" + std::to_string(to->number.value) + ": " + std::to_string(bad) +
                               " shard(s) copied from a local version no longer match the manifest (memory changed "
                               "under the peer?)" + (to->role == VersionRole::kCopy ? "" : "; fetching them instead"));
  }
  if (to->role == VersionRole::kCopy) {
    if (bad > 0) {
      finish(now, to, Status::verify_failed(std::to_string(bad) + " shard(s) of the local copy of " + to->model + " v" +
                                            std::to_string(to->number.value) + " no longer match its manifest"));
      return;
    }
    to->progress.bytes_verified = to->progress.bytes_total;
    to->progress.shards_verified = to->progress.shards_total;
    finish(now, to, Status::ok());
    return;
  }
  fetch_from_swarm(now, to, std::move(have));
}

void PeerCore::fetch_from_swarm(TimePoint now, const std::shared_ptr<LocalVersion>& v, core::Bitfield have) {
  const Manifest& m = *v->manifest;
  v->progress.shards_verified = 0;
  v->progress.bytes_verified = 0;
  for (std::uint32_t s = 0; s < m.shard_count(); ++s) {
    if (!have.test(s) || !v->wants(ShardIndex{s})) continue;
    ++v->progress.shards_verified;
    v->progress.bytes_verified += m.shard(ShardIndex{s}).byte_length;
  }
  report(Report::kInfo, "fetching " + v->model + " v" + std::to_string(v->number.value) +
                            (v->whole() ? std::string() : " (a selection)") + ": " +
                            std::to_string(v->progress.shards_verified) + " of " +
                            std::to_string(v->progress.shards_total) +
                            (v->host_mate ? " shards here already (unchanged locally or copied from a host mate)"
                                          : " shards unchanged locally"));
  swarm_.fetch(now, v->id, layout_of(m, config_.swarm.fetch.block_size), std::move(have), v->wanted);
  // Everyone gossip says holds or fetches it is a candidate.
  if (gossip_) {
    for (const auto& member : gossip_->members()) {
      if (member.liveness != gossip::Liveness::kAlive || !member.record) continue;
      const auto& r = member.record->record;
      swarm_.set_location(r.id, r.topology);
      for (const auto& h : r.holdings) {
        if (auto complete = claim_on(h, v->id, v->slot)) swarm_.add_holder(now, v->id, r.id, *complete);
        if (serves_view(m, r, h)) swarm_.add_holder(now, v->id, r.id, /*complete=*/true);
      }
      if (v->view_of) ask_to_serve_view(now, *v, r);
    }
  }
  announce_holding(*v);
  drain_swarm(now);
  state_changed();
}

std::uint16_t PeerCore::permille(const LocalVersion& v) const {
  // A publisher is an origin: it never fetches, so what it publishes (the
  // whole version, or a trainer rank's part) counts as complete.
  if (v.role == VersionRole::kPublished) return 1000;
  if (v.holds_all()) return 1000;
  // A selection counts against the whole version: never complete.
  const std::uint64_t total = v.whole() ? v.progress.shards_total : v.manifest->shard_count();
  return static_cast<std::uint16_t>(
      std::min<std::uint64_t>(999, 1000ull * v.progress.shards_verified / std::max<std::uint64_t>(1, total)));
}

void PeerCore::announce_holding(const LocalVersion& v) {
  if (!gossip_ || !v.served()) return;
  if (!config_.swarm.serve_fetched && v.role != VersionRole::kPublished) return;  // a leech announces nothing
  if (v.slot) {
    announce_part_set(v.model, v.number, *v.slot);
  } else {
    gossip_->set_holding(gossip::HoldingEntry{v.model, v.number.value, v.id, permille(v)},
                         /*origin=*/v.role == VersionRole::kPublished);
  }
  note_left_out();
  gossip_changed();
}

void PeerCore::withdraw_holding(const LocalVersion& v) {
  if (v.slot) part_sets_.remove(*v.slot, v.id);
  if (!gossip_ || !v.served()) return;
  if (v.slot) {
    announce_part_set(v.model, v.number, *v.slot);
  } else {
    gossip_->remove_holding({v.model, v.number.value, v.id});
  }
  note_left_out();
  gossip_changed();
}

void PeerCore::announce_part_set(const std::string& model, VersionNumber number, const PartSlot& slot) {
  gossip::HoldingEntry set{model, number.value, slot.seal, 0};
  set.selection = slot.selection;
  set.parts = core::Bitfield(slot.count);
  set.complete_parts = core::Bitfield(slot.count);
  std::uint64_t permille_sum = 0;
  const PartSets::Members* members = part_sets_.members(slot.seal, slot.selection);
  if (members != nullptr && config_.swarm.serve_fetched) {
    for (const auto& [index, id] : *members) {
      auto v = find(id);
      if (!v || !v->served()) continue;
      const std::uint16_t p = permille(*v);
      set.parts.set(index);
      if (p >= 1000) set.complete_parts.set(index);
      permille_sum += p;
    }
  }
  const std::size_t held = set.parts.count();
  if (held == 0) {
    gossip_->remove_holding(gossip::key_of(set));
    return;
  }
  set.progress_permille = set.complete_parts == set.parts
                              ? 1000
                              : static_cast<std::uint16_t>(std::min<std::uint64_t>(999, permille_sum / held));
  gossip_->set_holding(set);
}

void PeerCore::finish(TimePoint now, const std::shared_ptr<LocalVersion>& v, const Status& status) {
  if (v->state != VersionState::kFetching) return;
  if (auto p = swarm_.progress(v->id); p && find(v->id) == v) {  // a copy's bytes came from here
    v->progress.bytes_received = p->bytes_received + p->duplicate_bytes;
  }
  v->result = status;
  v->state = status.is_ok() ? VersionState::kComplete : VersionState::kFailed;
  v->progress.done = true;
  if (status.is_ok()) v->completed = now;
  actions_.push(FetchDone{v, status});
  if (!staged_.empty()) refresh_group_stages(now);
  const std::string what = v->model + " v" + std::to_string(v->number.value);
  if (v->role == VersionRole::kCopy) {
    state_changed();
    return;
  }
  if (status.is_ok()) {
    announce_holding(*v);
    report(Report::kInfo, "fetched " + what + " in " + std::to_string(to_seconds(now - v->started)) +
                              " s, every shard verified");
  } else {
    report(Report::kWarn, "fetch of " + what + " failed: " + status.to_string());
    swarm_.stop(now, v->id);
    withdraw_holding(*v);
    // Forgotten at once: a retry is a new fetch, never a copy of this one.
    if (find(v->id) == v) {
      proofs_.forget(v->id);
      versions_.erase(v->id);
    }
  }
  source_finished(now, v, status);
  state_changed();
}

// --------------------------------------------------------------------------
// Release and retention

swarm::ReleaseFacts PeerCore::release_facts(const LocalVersion& v) const {
  swarm::ReleaseFacts facts;
  const auto head = heads_.head(v.model);
  facts.is_head = head && head->id == v.id;
  if (head && !facts.is_head && v.manifest->part()) {
    // A part of the head (a version in parts) is kept like the head: its
    // replicas are counted per part.
    if (const KnownVersion* k = heads_.known(head->id); k && k->in_parts()) {
      const auto& ids = k->sealed()->seal().body().parts;
      facts.is_head = std::find(ids.begin(), ids.end(), v.id) != ids.end();
    }
  }
  facts.complete = v.holds_all();
  facts.other_holders = replicas(v.id);
  return facts;
}

void PeerCore::release(TimePoint now, const std::shared_ptr<LocalVersion>& v, ReleaseMode mode) {
  if (!staged_.empty()) stage_released(now, *v);
  if (!v->served() || find(v->id) != v) {
    release_now(now, v);  // a private copy, or released already
    return;
  }
  if (mode == ReleaseMode::kHonourRetention) {
    if (deferred_.deferred(v->id) || deferred_.must_defer(release_facts(*v))) {
      if (!deferred_.deferred(v->id)) {
        report(Report::kInfo, "deferring the release of " + v->model + " v" + std::to_string(v->number.value) +
                                  ": it is the head and " + std::to_string(replicas(v->id)) + " other peer(s) hold it");
      }
      deferred_.defer(v->id, now);
      return;
    }
  }
  deferred_.forget(v->id);  // kNow cuts a deferral short
  release_now(now, v);
}

void PeerCore::release_deferred(TimePoint now) { release_due(now, /*all=*/true); }

void PeerCore::release_due(TimePoint now, bool all) {
  if (deferred_.empty()) return;
  const TimePoint at = all ? kTimeNever : now;
  for (const ManifestId& id : deferred_.due(at, [this](const ManifestId& id) {
         auto v = find(id);
         return v ? release_facts(*v) : swarm::ReleaseFacts{};
       })) {
    auto v = find(id);
    if (!v) continue;
    report(Report::kInfo, "releasing " + v->model + " v" + std::to_string(v->number.value) + " after its deferral");
    release_now(now, v);
  }
}

void PeerCore::release_now(TimePoint now, const std::shared_ptr<LocalVersion>& v) {
  // The views served from its memory go first.
  std::vector<std::shared_ptr<LocalVersion>> views;
  for (const auto& [id, other] : versions_) {
    if (other->served_from == v) views.push_back(other);
  }
  for (const auto& view : views) release_now(now, view);
  const bool registered = find(v->id) == v;
  if (registered) {
    swarm_.stop(now, v->id);
    withdraw_holding(*v);
    proofs_.forget(v->id);
    versions_.erase(v->id);
  }
  copies_.erase(v);
  copying_.erase(v.get());
  const bool was_fetching = v->state == VersionState::kFetching;
  if (was_fetching) {
    v->state = VersionState::kFailed;
    v->result = Status::cancelled("released before it finished");
    v->progress.done = true;
  }
  if (registered && was_fetching) source_finished(now, v, Status::cancelled("released"));
  actions_.push(ReleaseMemory{v});
  drain_swarm(now);
  state_changed();
}

std::optional<VersionNumber> PeerCore::unverified_head(const std::string& model) const {
  if (gossip_ == nullptr) return std::nullopt;
  const auto announced = gossip_->known_heads().head(model);
  if (!announced) return std::nullopt;
  const auto verified = heads_.head(model);
  if (verified && verified->version >= announced->version) return std::nullopt;
  return VersionNumber{announced->version};
}

}  // namespace tensorhub::peer
