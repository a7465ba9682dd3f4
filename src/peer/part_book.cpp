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

PartBook::Slots& PartBook::make_slots(const Key& key) {
  if (auto* s = slots(key)) return *s;
  if (versions_.size() >= kMaxVersions) {
    // The lowest number makes room (of any model: old versions go first).
    auto lowest = std::min_element(versions_.begin(), versions_.end(), [](const auto& a, const auto& b) {
      return a.first.second < b.first.second;
    });
    for (const auto& [index, part] : lowest->second.parts) by_id_.erase(part->id());
    versions_.erase(lowest);
  }
  return versions_[key];
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
  Slots& s = make_slots(key);
  s.count = part->part()->count;
  s.parent = part->parent();
  s.own = true;
  by_id_[part->id()] = part;
  s.parts[index] = std::move(part);
  check_pending();
  return Status::ok();
}

std::optional<ManifestRequest> PartBook::on_named(TimePoint now, const PeerId& peer, const std::string& model,
                                                  VersionNumber version, const ManifestId& id) {
  const Key key{model, version};
  const Slots* s = slots(key);
  if (s == nullptr || !s->own || s->equivocated || by_id_.count(id)) return std::nullopt;
  if (s->parts.size() >= s->count) return std::nullopt;  // every slot is filled: nothing is wanted
  return want(now, key, id, peer);
}

std::optional<ManifestRequest> PartBook::want(TimePoint now, const Key& key, const ManifestId& id,
                                              const PeerId& peer) {
  auto it = wanted_.find(id);
  if (it == wanted_.end()) {
    if (wanted_.size() >= kMaxWanted) return std::nullopt;
    it = wanted_.emplace(id, Wanted{key, {}, 0, kTimeNever}).first;
  }
  Wanted& w = it->second;
  if (w.version != key) return std::nullopt;  // a record's claim about another version's id: not believed
  if (std::find(w.namers.begin(), w.namers.end(), peer) == w.namers.end() && w.namers.size() < kMaxNamers) {
    w.namers.push_back(peer);
  }
  if (w.asked_at != kTimeNever && now - w.asked_at < retry_) return std::nullopt;
  return ask_next(now, id, w);
}

std::optional<ManifestRequest> PartBook::ask_next(TimePoint now, const ManifestId& id, Wanted& w) {
  if (w.namers.empty()) {
    w.asked_at = kTimeNever;  // asked again when someone names it
    return std::nullopt;
  }
  const PeerId& peer = w.namers[w.next % w.namers.size()];
  w.next = (w.next + 1) % w.namers.size();
  w.asked_at = now;
  return ManifestRequest{peer, id, w.version.first, w.version.second};
}

std::vector<ManifestRequest> PartBook::on_seal(TimePoint now, const PeerId& from, Seal seal) {
  std::vector<ManifestRequest> requests;
  const SealBody& b = seal.body();
  const Key key{b.model, VersionNumber{b.version}};
  if (const Slots* s = slots(key); s && s->equivocated) return requests;
  const ManifestId id = seal.id();
  if (!pending_.count(id)) {
    if (pending_.size() >= kMaxPendingSeals) return requests;
    pending_.emplace(id, std::move(seal));
  }
  for (const ManifestId& part : pending_.at(id).body().parts) {
    if (by_id_.count(part)) continue;
    if (auto r = want(now, key, part, from)) requests.push_back(std::move(*r));
  }
  check_pending();
  return requests;
}

Result<std::optional<PartConflict>> PartBook::on_part(std::shared_ptr<const Manifest> part) {
  if (by_id_.count(part->id())) return std::optional<PartConflict>{};
  TENSORHUB_RETURN_IF_ERROR(verify_manifest_signature(*part, trusted_));
  const Key key{part->model(), VersionNumber{part->version()}};
  const std::uint32_t index = part->part()->index;
  wanted_.erase(part->id());
  if (Slots* s = slots(key)) {
    if (s->equivocated) return std::optional<PartConflict>{};  // told once already
    TENSORHUB_RETURN_IF_ERROR(fits(*s, *part));
    auto held = s->parts.find(index);
    if (held != s->parts.end()) {
      // Another manifest in this slot: equivocation. Neither is sealed.
      PartConflict conflict{held->second, part};
      s->equivocated = true;
      std::erase_if(pending_, [&](const auto& p) {
        return p.second.body().model == key.first && VersionNumber{p.second.body().version} == key.second;
      });
      return std::optional<PartConflict>{std::move(conflict)};
    }
  }
  Slots& s = make_slots(key);
  s.count = part->part()->count;
  s.parent = part->parent();
  by_id_[part->id()] = part;
  s.parts[index] = std::move(part);
  check_pending();
  return std::optional<PartConflict>{};
}

void PartBook::check_pending() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    const SealBody& b = it->second.body();
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
    const ManifestId id = it->second.id();
    auto joined = manifest::SealedVersion::join(std::move(it->second), std::move(parts));
    if (joined) {
      if (Slots* s = slots({b.model, VersionNumber{b.version}})) s->offered = true;  // sealed: no seal of ours is needed
    }
    joined_.push_back(JoinedSeal{id, std::move(joined)});
    it = pending_.erase(it);
  }
}

std::optional<ManifestRequest> PartBook::on_no_manifest(TimePoint now, const PeerId& peer, const ManifestId& id) {
  auto it = wanted_.find(id);
  if (it == wanted_.end()) return std::nullopt;
  Wanted& w = it->second;
  auto pos = std::find(w.namers.begin(), w.namers.end(), peer);
  if (pos == w.namers.end()) return std::nullopt;
  w.namers.erase(pos);
  w.next = 0;
  return ask_next(now, id, w);
}

void PartBook::forget_peer(const PeerId& peer) {
  for (auto& [id, w] : wanted_) {
    auto pos = std::find(w.namers.begin(), w.namers.end(), peer);
    if (pos == w.namers.end()) continue;
    w.namers.erase(pos);
    w.next = 0;
  }
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
  for (auto& [id, w] : wanted_) {
    if (w.asked_at == kTimeNever || now - w.asked_at < retry_) continue;
    if (auto r = ask_next(now, id, w)) requests.push_back(std::move(*r));
  }
  return requests;
}

TimePoint PartBook::next_timeout() const {
  TimePoint earliest = kTimeNever;
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
    const bool waited_for = std::any_of(pending_.begin(), pending_.end(), [&](const auto& p) {
      return p.second.body().model == it->first.first && VersionNumber{p.second.body().version} == it->first.second;
    });
    if (it->first.first != model || it->first.second > version || waited_for) {
      ++it;
      continue;
    }
    for (const auto& [index, part] : it->second.parts) by_id_.erase(part->id());
    it = versions_.erase(it);
  }
  std::erase_if(wanted_, [&](const auto& w) { return w.second.version.first == model && w.second.version.second <= version; });
}

}  // namespace tensorhub::peer
