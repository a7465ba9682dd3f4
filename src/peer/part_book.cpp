#include "peer/part_book.hpp"

#include <algorithm>

namespace tensorhub::peer {
namespace {

std::string name_of(const std::string& model, VersionNumber version) {
  return model + " v" + std::to_string(version.value);
}

}  // namespace

PartBook::PartBook(std::vector<PublicKey> trusted_publishers, Duration retry)
    : trusted_(std::move(trusted_publishers)), retry_(retry) {}

PartBook::Slots* PartBook::slots(const Key& key) {
  auto it = versions_.find(key);
  return it == versions_.end() ? nullptr : &it->second;
}

bool PartBook::needed(const Key& key) const {
  return std::any_of(pending_.begin(), pending_.end(), [&](const auto& p) {
    return p.second.seal.body().model == key.first && VersionNumber{p.second.seal.body().version} == key.second;
  });
}

void PartBook::refresh_needed() {
  needed_.clear();
  for (const auto& [id, p] : pending_) needed_.insert(p.seal.body().parts.begin(), p.seal.body().parts.end());
}

PartBook::Slots* PartBook::make_slots(const Key& key) {
  if (auto* s = slots(key)) return s;
  if (versions_.size() >= kMaxVersions) {
    // The lowest number of the same model makes room, else of any model;
    // never a version this peer publishes a part of or a seal waits for.
    auto victim = versions_.end();
    for (auto it = versions_.begin(); it != versions_.end(); ++it) {
      if (it->second.own || needed(it->first)) continue;
      const bool same = it->first.first == key.first;
      if (victim == versions_.end()) {
        victim = it;
        continue;
      }
      const bool victim_same = victim->first.first == key.first;
      if ((same && !victim_same) || (same == victim_same && it->first.second < victim->first.second)) victim = it;
    }
    if (victim == versions_.end()) return nullptr;
    for (const auto& [index, part] : victim->second.parts) by_id_.erase(part->id());
    versions_.erase(victim);
  }
  return &versions_[key];
}

std::size_t PartBook::named_by(const PeerId& peer) const {
  std::size_t n = 0;
  for (const auto& [id, w] : wanted_) n += std::count(w.namers.begin(), w.namers.end(), peer);
  return n;
}

Status PartBook::fits(const Slots& s, const Manifest& part) const {
  if (s.count == 0) return Status::ok();
  const std::string what = "part " + std::to_string(part.part()->index) + " of " +
                           name_of(part.model(), VersionNumber{part.version()});
  if (part.part()->count != s.count) {
    return Status::invalid_argument(what + " says the version has " + std::to_string(part.part()->count) +
                                    " parts; its other parts say " + std::to_string(s.count));
  }
  if (part.parent() != s.parent) {
    return Status::invalid_argument(what + " follows " + part.parent().short_hex() + "; its other parts follow " +
                                    s.parent.short_hex());
  }
  return Status::ok();
}

Status PartBook::add_own(std::shared_ptr<const Manifest> part) {
  const Key key{part->model(), VersionNumber{part->version()}};
  const std::uint32_t index = part->part()->index;
  if (const Slots* s = slots(key)) {
    TENSORHUB_RETURN_IF_ERROR(fits(*s, *part));
    auto held = s->parts.find(index);
    if (held != s->parts.end() && held->second->id() != part->id()) {
      return Status::already_exists("part " + std::to_string(index) + " of " + name_of(key.first, key.second) +
                                    " is published already, as " + held->second->id().short_hex());
    }
  }
  Slots* s = make_slots(key);
  if (s == nullptr) {
    return Status::resource_exhausted("this peer keeps the parts of " + std::to_string(kMaxVersions) +
                                      " versions, each one it publishes a part of or a seal waits for; " +
                                      "release an older part first");
  }
  s->count = part->part()->count;
  s->parent = part->parent();
  s->own = true;
  by_id_[part->id()] = part;
  s->parts[index] = std::move(part);
  check_pending();
  return Status::ok();
}

std::optional<ManifestRequest> PartBook::on_named(TimePoint now, const PeerId& peer, const std::string& model,
                                                  VersionNumber version, const ManifestId& id) {
  const Key key{model, version};
  if (by_id_.count(id)) return std::nullopt;
  if (needed(id)) return want(now, key, id, peer);  // a waiting seal's part: any holder will do
  const Slots* s = slots(key);
  if (s == nullptr || !s->own || s->equivocated) return std::nullopt;
  if (s->parts.size() >= s->count) return std::nullopt;  // every slot is filled: nothing is wanted
  return want(now, key, id, peer);
}

std::optional<ManifestRequest> PartBook::want(TimePoint now, const Key& key, const ManifestId& id,
                                              const PeerId& peer) {
  auto it = wanted_.find(id);
  const bool names_it = it != wanted_.end() && it->second.names(peer);
  // One peer's word asks for a bounded number of parts: fake ids cannot
  // crowd out the real ones.
  if (!names_it && named_by(peer) >= kMaxNamedPerPeer) return std::nullopt;
  if (it == wanted_.end()) {
    if (wanted_.size() >= kMaxWanted) return std::nullopt;
    it = wanted_.emplace(id, Wanted{{}, key}).first;
  }
  Wanted& w = it->second;
  // An id is of the version a waiting seal (or the first record) puts it
  // in; a record's claim of another version for it is not believed.
  if (w.version != key) return std::nullopt;
  w.add(peer, kMaxNamers);
  if (w.awaiting(now, retry_)) return std::nullopt;
  // Not asked yet, or overdue: ask the peer that just spoke (it is alive).
  return ask(now, id, w, peer);
}

std::optional<ManifestRequest> PartBook::ask(TimePoint now, const ManifestId& id, Wanted& w,
                                             const std::optional<PeerId>& peer) {
  auto namer = w.ask(now, peer);
  if (!namer) return std::nullopt;
  return ManifestRequest{*namer, id, w.version.first, w.version.second};
}

std::vector<ManifestRequest> PartBook::on_seal(TimePoint now, const PeerId& from, Seal seal) {
  std::vector<ManifestRequest> requests;
  const SealBody& b = seal.body();
  const Key key{b.model, VersionNumber{b.version}};
  if (const Slots* s = slots(key); s && s->equivocated) return requests;
  const ManifestId id = seal.id();
  if (!pending_.count(id)) {
    if (pending_.size() >= kMaxPendingSeals) {
      // The lowest number makes room for a higher one.
      auto lowest = std::min_element(pending_.begin(), pending_.end(), [](const auto& x, const auto& y) {
        return x.second.seal.body().version < y.second.seal.body().version;
      });
      if (lowest->second.seal.body().version >= b.version) return requests;
      pending_.erase(lowest);
    }
    pending_.emplace(id, PendingSeal{std::move(seal), now});
    refresh_needed();
  }
  for (const ManifestId& part : pending_.at(id).seal.body().parts) {
    if (by_id_.count(part)) continue;
    if (auto r = want(now, key, part, from)) requests.push_back(std::move(*r));
  }
  check_pending();
  return requests;
}

Result<std::optional<PartConflict>> PartBook::on_part(std::shared_ptr<const Manifest> part) {
  if (by_id_.count(part->id())) return std::optional<PartConflict>{};
  const Key key{part->model(), VersionNumber{part->version()}};
  // Asked for, or of a version with an entry here (a proof of equivocation
  // for a slot held); anything else is not kept.
  if (!wanted_.count(part->id()) && !needed(part->id()) && slots(key) == nullptr) {
    return std::optional<PartConflict>{};
  }
  TENSORHUB_RETURN_IF_ERROR(verify_manifest_signature(*part, trusted_));
  const std::uint32_t index = part->part()->index;
  wanted_.erase(part->id());
  if (Slots* s = slots(key)) {
    if (s->equivocated) return std::optional<PartConflict>{};  // told once already
    if (Status fit = fits(*s, *part); !fit.is_ok()) {
      // This peer's own version cannot be sealed with it: its publishers hear why.
      if (s->own && s->seal_failure.is_ok()) s->seal_failure = Status::verify_failed(fit.message());
      return fit;
    }
    auto held = s->parts.find(index);
    if (held != s->parts.end()) {
      // Another manifest in this slot: equivocation. Neither is sealed.
      PartConflict conflict{held->second, part};
      s->equivocated = true;
      std::erase_if(pending_, [&](const auto& p) {
        return p.second.seal.body().model == key.first && VersionNumber{p.second.seal.body().version} == key.second;
      });
      refresh_needed();
      return std::optional<PartConflict>{std::move(conflict)};
    }
  }
  Slots* s = make_slots(key);
  if (s == nullptr) return std::optional<PartConflict>{};  // no room: asked again while it is wanted
  s->count = part->part()->count;
  s->parent = part->parent();
  by_id_[part->id()] = part;
  s->parts[index] = std::move(part);
  check_pending();
  return std::optional<PartConflict>{};
}

void PartBook::check_pending() {
  bool changed = false;
  for (auto it = pending_.begin(); it != pending_.end();) {
    const SealBody& b = it->second.seal.body();
    std::vector<std::shared_ptr<const Manifest>> parts;
    parts.reserve(b.parts.size());
    for (const ManifestId& id : b.parts) {
      auto found = by_id_.find(id);
      if (found == by_id_.end()) break;
      parts.push_back(found->second);
    }
    if (parts.size() < b.parts.size()) {
      ++it;
      continue;
    }
    const ManifestId id = it->second.seal.id();
    const Key key{b.model, VersionNumber{b.version}};  // copied: the seal moves into the join
    auto joined = manifest::SealedVersion::join(std::move(it->second.seal), std::move(parts));
    if (joined) {
      if (Slots* s = slots(key)) s->offered = true;  // sealed: no seal of ours is needed
    }
    joined_.push_back(JoinedSeal{id, std::move(joined)});
    it = pending_.erase(it);
    changed = true;
  }
  if (changed) refresh_needed();
}

std::optional<ManifestRequest> PartBook::on_no_manifest(TimePoint now, const PeerId& peer, const ManifestId& id) {
  auto it = wanted_.find(id);
  if (it == wanted_.end()) return std::nullopt;
  if (!it->second.drop(peer)) return std::nullopt;
  return ask(now, id, it->second);
}

void PartBook::forget_peer(const PeerId& peer) {
  for (auto& [id, w] : wanted_) w.drop(peer);
}

std::vector<JoinedSeal> PartBook::take_joined() { return std::exchange(joined_, {}); }

std::vector<SealBody> PartBook::take_ready() {
  std::vector<SealBody> ready;
  for (auto& [key, s] : versions_) {
    if (!s.own || s.offered || s.equivocated || s.parts.size() < s.count) continue;
    s.offered = true;
    SealBody body{key.first, key.second.value, s.parent, {}};
    for (const auto& [index, part] : s.parts) body.parts.push_back(part->id());
    ready.push_back(std::move(body));
  }
  return ready;
}

std::vector<ManifestRequest> PartBook::handle_timeout(TimePoint now) {
  std::vector<ManifestRequest> requests;
  // Seals whose parts did not come in time go; a later copy starts again.
  const std::size_t before = pending_.size();
  std::erase_if(pending_, [&](const auto& p) { return now - p.second.since >= kSealWait; });
  if (pending_.size() != before) refresh_needed();
  std::erase_if(wanted_, [&](const auto& w) {
    return w.second.namers.empty() && !needed(w.first) && slots(w.second.version) == nullptr;
  });
  for (auto& [id, w] : wanted_) {
    if (w.asked_at == kTimeNever || w.awaiting(now, retry_)) continue;
    if (auto r = ask(now, id, w)) requests.push_back(std::move(*r));
  }
  return requests;
}

TimePoint PartBook::next_timeout() const {
  TimePoint earliest = kTimeNever;
  for (const auto& [id, p] : pending_) earliest = std::min(earliest, p.since + kSealWait);
  for (const auto& [id, w] : wanted_) {
    if (w.asked_at != kTimeNever && !w.namers.empty()) earliest = std::min(earliest, w.asked_at + retry_);
  }
  return earliest;
}

std::shared_ptr<const Manifest> PartBook::manifest(const ManifestId& id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<const Manifest>> PartBook::parts(const std::string& model, VersionNumber version) const {
  std::vector<std::shared_ptr<const Manifest>> out;
  auto it = versions_.find({model, version});
  if (it == versions_.end()) return out;
  for (const auto& [index, part] : it->second.parts) out.push_back(part);
  return out;
}

std::uint32_t PartBook::part_count(const std::string& model, VersionNumber version) const {
  auto it = versions_.find({model, version});
  return it == versions_.end() ? 0 : it->second.count;
}

std::vector<std::uint32_t> PartBook::missing(const std::string& model, VersionNumber version) const {
  std::vector<std::uint32_t> out;
  auto it = versions_.find({model, version});
  if (it == versions_.end()) return out;
  for (std::uint32_t i = 0; i < it->second.count; ++i) {
    if (!it->second.parts.count(i)) out.push_back(i);
  }
  return out;
}

bool PartBook::equivocated(const std::string& model, VersionNumber version) const {
  auto it = versions_.find({model, version});
  return it != versions_.end() && it->second.equivocated;
}

void PartBook::seal_failed(const std::string& model, VersionNumber version, Status why) {
  if (Slots* s = slots({model, version})) s->seal_failure = std::move(why);
}

Status PartBook::seal_failure(const std::string& model, VersionNumber version) const {
  auto it = versions_.find({model, version});
  return it == versions_.end() ? Status::ok() : it->second.seal_failure;
}

void PartBook::forget_through(const std::string& model, VersionNumber version) {
  for (auto it = versions_.begin(); it != versions_.end();) {
    if (it->first.first != model || it->first.second > version || needed(it->first)) {
      ++it;
      continue;
    }
    for (const auto& [index, part] : it->second.parts) by_id_.erase(part->id());
    it = versions_.erase(it);
  }
  std::erase_if(wanted_, [&](const auto& w) {
    return w.second.version.first == model && w.second.version.second <= version && !needed(w.first);
  });
}

}  // namespace tensorhub::peer
