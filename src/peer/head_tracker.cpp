#include "peer/head_tracker.hpp"

#include <algorithm>

#include "manifest/chain_link.hpp"

namespace tensorhub::peer {
namespace {

constexpr std::size_t kMaxEquivocations = 64;

}  // namespace

HeadTracker::HeadTracker(std::vector<PublicKey> trusted_publishers, Duration retry)
    : trusted_(std::move(trusted_publishers)), retry_(retry) {}

bool HeadTracker::trusts(const PublicKey& publisher) const {
  return std::find(trusted_.begin(), trusted_.end(), publisher) != trusted_.end();
}

std::optional<ManifestRequest> HeadTracker::on_head_named(TimePoint now, const PeerId& peer, const std::string& model,
                                                          VersionNumber version, const ManifestId& id) {
  if (by_id_.count(id) || equivocated(model, version) || discredited(now, peer)) return std::nullopt;
  // Older than the head: not wanted, unless we believe another manifest of
  // that very version (this one would prove equivocation).
  if (auto h = head(model); h && number_of(*h) >= version && !find(model, version)) return std::nullopt;
  auto it = wanted_.find(id);
  const bool names_it = it != wanted_.end() && it->second.names(peer);
  if (!names_it && named_by(peer) >= kMaxNamedPerPeer) return std::nullopt;
  if (it == wanted_.end()) {
    if (wanted_.size() >= kMaxWanted) {
      // The oldest wanted version makes room, unless this one is older still.
      auto oldest = std::min_element(wanted_.begin(), wanted_.end(),
                                     [](const auto& a, const auto& b) { return a.second.version < b.second.version; });
      if (oldest->second.version >= version) return std::nullopt;
      wanted_.erase(oldest);
    }
    it = wanted_.emplace(id, Wanted{{}, model, version, false}).first;
  }
  Wanted& w = it->second;
  // The record's (model, version) must match what others said of this id;
  // a mismatch is a lie about the id and is not remembered.
  if (w.model != model || w.version != version) return std::nullopt;
  w.add(peer, kMaxNamers);
  if (w.awaiting(now, retry_)) return std::nullopt;
  // Not asked yet, or overdue: ask this namer (the one who just spoke is alive).
  return ask(now, id, w, peer);
}

std::optional<ManifestRequest> HeadTracker::ask(TimePoint now, const ManifestId& id, Wanted& w,
                                                const std::optional<PeerId>& peer) {
  auto namer = w.ask(now, peer);
  if (!namer) return std::nullopt;
  return ManifestRequest{*namer, id, w.model, w.version};
}

void HeadTracker::forget_peer(const PeerId& peer) {
  for (auto& [id, w] : wanted_) w.drop(peer);
}

std::optional<ManifestRequest> HeadTracker::on_no_manifest(TimePoint now, const PeerId& peer, const ManifestId& id) {
  auto it = wanted_.find(id);
  if (it != wanted_.end() && !it->second.parent) return on_bad_manifest(now, peer, id);
  return pass_over(now, peer, id);
}

std::optional<ManifestRequest> HeadTracker::on_foreign_manifest(TimePoint now, const PeerId& peer,
                                                                const ManifestId& id) {
  return pass_over(now, peer, id);
}

std::optional<ManifestRequest> HeadTracker::pass_over(TimePoint now, const PeerId& peer, const ManifestId& id) {
  auto it = wanted_.find(id);
  if (it == wanted_.end()) return std::nullopt;
  Wanted& w = it->second;
  if (!w.drop(peer)) return std::nullopt;  // not asked of it, or already dropped
  return ask(now, id, w);
}

std::optional<ManifestRequest> HeadTracker::on_bad_manifest(TimePoint now, const PeerId& peer, const ManifestId& id) {
  auto it = wanted_.find(id);
  if (it == wanted_.end()) return std::nullopt;
  if (!it->second.names(peer)) return std::nullopt;
  return discredit(now, peer, id);
}

bool HeadTracker::discredited(TimePoint now, const PeerId& peer) const {
  auto it = discredited_.find(peer);
  return it != discredited_.end() && now < it->second.until;
}

std::optional<ManifestRequest> HeadTracker::discredit(TimePoint now, const PeerId& peer, const ManifestId& id) {
  auto [d, fresh] = discredited_.try_emplace(peer, Discredit{now, Duration::zero()});
  d->second.last = fresh ? kDiscreditFor : std::min<Duration>(d->second.last * 2, kMaxDiscreditFor);
  d->second.until = now + d->second.last;
  if (discredited_.size() > kMaxDiscredited) {
    auto soonest = std::min_element(discredited_.begin(), discredited_.end(),
                                    [](const auto& a, const auto& b) { return a.second.until < b.second.until; });
    discredited_.erase(soonest);
  }
  // What only it named is wanted no more; the rest is asked of others.
  std::optional<ManifestRequest> next;
  for (auto it = wanted_.begin(); it != wanted_.end();) {
    Wanted& w = it->second;
    if (w.drop(peer)) {
      if (w.namers.empty() && !waiting_.count(it->first)) {
        it = wanted_.erase(it);
        continue;
      }
      if (it->first == id) next = ask(now, id, w);
    }
    ++it;
  }
  return next;
}

std::size_t HeadTracker::named_by(const PeerId& peer) const {
  std::size_t n = 0;
  for (const auto& [id, w] : wanted_) n += std::count(w.namers.begin(), w.namers.end(), peer);
  return n;
}


std::vector<ManifestRequest> HeadTracker::handle_timeout(TimePoint now) {
  std::vector<ManifestRequest> requests;
  // Parents that did not come: their children are believed without them.
  std::vector<ManifestId> overdue;
  for (const auto& [parent, children] : waiting_) {
    for (const Waiting& w : children) {
      if (w.since != kTimeNever && now - w.since >= kChainWait) {
        overdue.push_back(parent);
        break;
      }
    }
  }
  for (const ManifestId& parent : overdue) {
    wanted_.erase(parent);
    release_children(parent, /*skip_chain=*/true);
  }
  for (auto& [id, w] : wanted_) {
    if (w.asked_at == kTimeNever || w.awaiting(now, retry_)) continue;
    if (auto r = ask(now, id, w)) requests.push_back(std::move(*r));
  }
  return requests;
}

TimePoint HeadTracker::next_timeout() const {
  TimePoint earliest = kTimeNever;
  for (const auto& [parent, children] : waiting_) {
    for (const Waiting& w : children) {
      if (w.since != kTimeNever) earliest = std::min(earliest, w.since + kChainWait);
    }
  }
  for (const auto& [id, w] : wanted_) {
    if (w.asked_at != kTimeNever && !w.namers.empty()) earliest = std::min(earliest, w.asked_at + retry_);
  }
  return earliest;
}

Status verify_chain(const KnownVersion& parent, const KnownVersion& child) {
  return manifest::verify_chain_link({parent.model(), parent.version(), parent.id(), parent.parent()},
                                     {child.model(), child.version(), child.id(), child.parent()});
}

Result<bool> HeadTracker::accept(std::shared_ptr<const Manifest> m) {
  if (by_id_.count(m->id())) return false;
  if (m->part()) {
    // A version in parts becomes a version through its seal
    // (accept(SealedVersion)): a part alone is never one.
    return Status::invalid_argument(m->model() + " v" + std::to_string(m->version()) + ": manifest " +
                                    m->id().short_hex() + " is one part of a version published in parts; " +
                                    "only its seal makes it a version");
  }
  TENSORHUB_RETURN_IF_ERROR(verify_manifest_signature(*m, trusted_));
  return accept(KnownVersion(std::move(m)), false);
}

Result<bool> HeadTracker::accept(std::shared_ptr<const manifest::SealedVersion> sealed) {
  if (by_id_.count(sealed->id())) return false;
  TENSORHUB_RETURN_IF_ERROR(verify_seal_signature(sealed->seal(), trusted_));
  for (const auto& part : sealed->parts()) {
    TENSORHUB_RETURN_IF_ERROR(verify_manifest_signature(*part, trusted_).with_context(
        "part " + std::to_string(part->part()->index) + " of " + sealed->model() + " v" +
        std::to_string(sealed->version())));
  }
  return accept(KnownVersion(std::move(sealed)), false);
}

bool HeadTracker::wait_for_parent(const KnownVersion& m, std::vector<PeerId> namers) {
  if (namers.empty() || waiting_count_ >= kMaxWaiting) return false;
  auto model = models_.find(m.model());
  if (model == models_.end()) return false;
  // The newest version we believe below it: the chain should reach it.
  auto below = model->second.by_version.lower_bound(m.number());
  if (below == model->second.by_version.begin()) return false;
  --below;
  if (m.version() - below->first.value > kMaxChainBack) return false;
  auto& children = waiting_[m.parent()];
  for (const Waiting& w : children) {
    if (w.version.id() == m.id()) return true;
  }
  children.push_back(Waiting{m, kTimeNever});
  ++waiting_count_;
  auto it = wanted_.find(m.parent());
  if (it == wanted_.end()) {
    it = wanted_.emplace(m.parent(), Wanted{{}, m.model(), previous(m.number()), true}).first;
  }
  for (const PeerId& p : namers) it->second.add(p, kMaxNamers);
  return true;
}

std::vector<ManifestRequest> HeadTracker::parent_requests(TimePoint now) {
  std::vector<ManifestRequest> requests;
  for (auto& [parent, children] : waiting_) {
    for (Waiting& w : children) {
      if (w.since == kTimeNever) w.since = now;
    }
    auto it = wanted_.find(parent);
    if (it == wanted_.end() || it->second.asked_at != kTimeNever) continue;
    if (auto r = ask(now, parent, it->second)) requests.push_back(std::move(*r));
  }
  return requests;
}

bool HeadTracker::release_children(const ManifestId& parent, bool skip_chain) {
  auto it = waiting_.find(parent);
  if (it == waiting_.end()) return false;
  std::vector<Waiting> children = std::move(it->second);
  waiting_.erase(it);
  waiting_count_ -= children.size();
  bool changed = false;
  for (Waiting& w : children) {
    auto accepted = accept(std::move(w.version), skip_chain);
    changed = changed || (accepted.is_ok() && *accepted);
  }
  return changed;
}

Result<bool> HeadTracker::accept(KnownVersion m, bool skip_chain) {
  if (by_id_.count(m.id())) return false;
  const std::string& name = m.model();
  const std::string what = name + " v" + std::to_string(m.version());
  // Manifests that waited for one signed twice are never believed.
  auto drop_children = [&] {
    if (auto w = waiting_.find(m.id()); w != waiting_.end()) {
      waiting_count_ -= w->second.size();
      waiting_.erase(w);
    }
  };
  if (equivocated(name, m.number())) {
    drop_children();
    return Status::verify_failed("equivocation: " + what + " was signed twice already; no manifest of it is believed");
  }
  Model& model = models_[name];
  auto same = model.by_version.find(m.number());
  if (same != model.by_version.end()) {
    // Two validly signed versions of one number: keep both as proof,
    // believe neither.
    if (equivocations_.size() < kMaxEquivocations) {
      equivocations_.push_back(Equivocation{name, m.number(), same->second, m});
    }
    by_id_.erase(same->second.id());
    model.by_version.erase(same);
    equivocated_.insert({name, m.number()});
    drop_children();
    refresh_head(model);
    return Status::verify_failed("equivocation: two " + std::string(m.in_parts() ? "seals" : "manifests") + " of " +
                                 what + " signed by " + m.publisher().short_hex());
  }
  if (!m.parent().is_zero()) {
    auto parent = by_id_.find(m.parent());
    if (parent != by_id_.end()) {
      TENSORHUB_RETURN_IF_ERROR(verify_chain(parent->second, m));
    } else if (!skip_chain) {
      auto named = wanted_.find(m.id());
      if (wait_for_parent(m, named == wanted_.end() ? std::vector<PeerId>{} : named->second.namers)) {
        wanted_.erase(m.id());
        return false;
      }
    }
  }
  const ManifestId id = m.id();
  const VersionNumber number = m.number();
  const VersionInfo info = m.info();
  model.by_version.emplace(number, m);
  by_id_.emplace(id, std::move(m));
  wanted_.erase(id);
  const bool newer = !model.head || info.version > model.head->version;
  if (newer) {
    model.head = info;
    // Wanted manifests no newer than the head are wanted no more.
    std::erase_if(wanted_, [&](const auto& entry) {
      return entry.second.model == name && entry.second.version <= number && !waiting_.count(entry.first);
    });
  }
  prune(model);
  // Manifests that waited for this one extend the chain now (or break it).
  const bool child_changed = release_children(id, skip_chain);
  return newer || child_changed;
}

void HeadTracker::refresh_head(Model& model) {
  if (model.by_version.empty()) {
    model.head.reset();
    return;
  }
  model.head = model.by_version.rbegin()->second.info();
}

void HeadTracker::prune(Model& model) {
  while (model.by_version.size() > kKeptVersions) {
    by_id_.erase(model.by_version.begin()->second.id());
    model.by_version.erase(model.by_version.begin());
  }
}

std::vector<VersionInfo> HeadTracker::heads() const {
  std::vector<VersionInfo> out;
  for (const auto& [name, model] : models_) {
    if (model.head) out.push_back(*model.head);
  }
  return out;
}

std::optional<VersionInfo> HeadTracker::head(const std::string& model) const {
  auto it = models_.find(model);
  if (it == models_.end()) return std::nullopt;
  return it->second.head;
}

const KnownVersion* HeadTracker::known(const ManifestId& id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &it->second;
}

const KnownVersion* HeadTracker::known(const std::string& model, VersionNumber version) const {
  auto it = models_.find(model);
  if (it == models_.end()) return nullptr;
  auto v = it->second.by_version.find(version);
  return v == it->second.by_version.end() ? nullptr : &v->second;
}

std::shared_ptr<const Manifest> HeadTracker::manifest(const ManifestId& id) const {
  const KnownVersion* k = known(id);
  return k ? k->manifest() : nullptr;
}

std::shared_ptr<const Manifest> HeadTracker::find(const std::string& model, VersionNumber version) const {
  const KnownVersion* k = known(model, version);
  return k ? k->manifest() : nullptr;
}

std::shared_ptr<const Manifest> HeadTracker::part(const ManifestId& id) const {
  for (const auto& [version_id, k] : by_id_) {
    if (!k.in_parts()) continue;
    for (const auto& p : k.sealed()->parts()) {
      if (p->id() == id) return p;
    }
  }
  return nullptr;
}

HeadTracker::NextVersion HeadTracker::next_version(const std::string& model) const {
  NextVersion next;
  auto h = head(model);
  if (h) {
    next.version = tensorhub::next(number_of(*h));
    next.parent = h->id;
  }
  // Never reuse a number that was equivocated on.
  while (equivocated(model, next.version)) next.version = tensorhub::next(next.version);
  return next;
}

void HeadTracker::record_equivocation(Equivocation e) {
  if (equivocated(e.model, e.version)) return;
  Model& model = models_[e.model];
  if (auto same = model.by_version.find(e.version); same != model.by_version.end()) {
    if (auto w = waiting_.find(same->second.id()); w != waiting_.end()) {
      waiting_count_ -= w->second.size();
      waiting_.erase(w);
    }
    by_id_.erase(same->second.id());
    model.by_version.erase(same);
  }
  equivocated_.insert({e.model, e.version});
  refresh_head(model);
  if (equivocations_.size() < kMaxEquivocations) equivocations_.push_back(std::move(e));
}

bool HeadTracker::equivocated(const std::string& model, VersionNumber version) const {
  return equivocated_.count({model, version}) != 0;
}

}  // namespace tensorhub::peer
