// PeerCore: gossip in, manifests, data connections, work results, time.
// The versions this peer holds, and their release, are in peer_versions.cpp.
#include "peer/peer_core.hpp"

#include <algorithm>

#include "core/overloaded.hpp"

namespace tensorhub::peer {
namespace {

class PlainManifestDecoder final : public ManifestDecoder {
 public:
  Result<std::shared_ptr<const Manifest>> decode(std::span<const std::uint8_t> encoded) override {
    auto m = decode_manifest(encoded);
    if (!m) return m.status();
    return std::shared_ptr<const Manifest>(std::make_shared<Manifest>(std::move(*m)));
  }
};

}  // namespace

std::string_view version_state_name(VersionState s) {
  switch (s) {
    case VersionState::kFetching: return "fetching";
    case VersionState::kComplete: return "complete";
    case VersionState::kFailed: return "failed";
    case VersionState::kReleased: return "released";
  }
  return "?";
}

std::shared_ptr<ManifestDecoder> default_manifest_decoder() { return std::make_shared<PlainManifestDecoder>(); }

PeerCore::PeerCore(PeerCoreConfig config, PeerId self, std::uint64_t seed, gossip::GossipCore* gossip,
                   std::shared_ptr<swarm::LocationBook> locations, std::shared_ptr<ManifestDecoder> decoder)
    : config_(std::move(config)),
      self_(self),
      gossip_(gossip),
      rng_(seed ^ 0x6a09e667f3bcc909ull),
      challenges_answered_(4, 16, 4096),
      views_served_on_request_(256, 2048, 4096),
      decoder_(decoder ? std::move(decoder) : default_manifest_decoder()),
      swarm_(config_.swarm, config_.location, self, seed, std::move(locations)),
      heads_(config_.trusted_publishers, config_.manifest_retry),
      parts_(config_.trusted_publishers, config_.manifest_retry),
      deferred_(config_.retention) {}

PeerCore::~PeerCore() = default;

// --------------------------------------------------------------------------
// Gossip

void PeerCore::on_member_event(TimePoint now, const gossip::MemberEvent& event) {
  switch (event.kind) {
    case gossip::MemberEventKind::kDead:
    case gossip::MemberEventKind::kLeft:
    case gossip::MemberEventKind::kRemoved:
      peer_gone(now, event.id);
      groups_.on_gone(now, event.id);
      break;
    case gossip::MemberEventKind::kIdentityConflict: break;  // our own identity: the runtime reports it
    default:
      if (event.record) {
        learn_from_record(now, event.record->record);
        // A part set may claim a thousand parts held here: a few of them,
        // chosen at random, are challenged a record.
        std::vector<const LocalVersion*> claimed;
        for (const gossip::HoldingEntry& h : event.record->record.holdings) {
          for_each_claimed(h, [&](const LocalVersion& v, bool complete) {
            if (complete) claimed.push_back(&v);
          });
        }
        for (std::size_t i = 0; i < claimed.size() && i < kMaxChallengesPerRecord; ++i) {
          std::swap(claimed[i], claimed[i + rng_.below(claimed.size() - i)]);
          challenge_member(now, *claimed[i], event.record->record);
        }
      }
      break;
  }
  release_due(now, /*all=*/false);
  state_changed();
}

void PeerCore::learn_from_record(TimePoint now, const gossip::PeerRecord& r) {
  swarm_.set_location(r.id, r.topology);
  groups_.on_record(now, r.id, r.leaving ? std::vector<gossip::GroupEntry>{} : r.groups);
  send_group_states(now);
  for (const gossip::HoldingEntry& h : r.holdings) {
    // Holding or fetching: a neighbour either way.
    for_each_claimed(h, [&](const LocalVersion& v, bool complete) { swarm_.add_holder(now, v.id, r.id, complete); });
    if (h.is_part_set()) continue;  // of a sealed version: nothing to seal, no view's publisher
    if (h.complete() && r.id != self_) {
      for (const auto& [id, v] : versions_) {
        if (v->state == VersionState::kFetching && serves_view(*v->manifest, r, h)) {
          swarm_.add_holder(now, id, r.id, true);
        }
      }
    }
    // A part of a version this peer publishes a part of: wanted, to seal.
    send_manifest_request(parts_.on_named(now, r.id, h.model, VersionNumber{h.version}, h.manifest_id));
  }
  // Views fetched here that a holder of their image may serve when asked.
  for (auto& [id, v] : versions_) {
    if (v->view_of && v->state == VersionState::kFetching) ask_to_serve_view(now, *v, r);
  }
  for (const gossip::HeadEntry& head : r.heads) {
    if (heads_.equivocated(head.model, VersionNumber{head.version})) {
      for (const Equivocation& e : heads_.equivocations()) {
        if (e.model == head.model && e.version == VersionNumber{head.version}) send_proof(e, r.id);
      }
      continue;
    }
    send_manifest_request(heads_.on_head_named(now, r.id, head.model, VersionNumber{head.version}, head.manifest_id));
  }
  drain_swarm(now);
}

bool PeerCore::serves_view(const Manifest& view, const gossip::PeerRecord& record, const gossip::HoldingEntry& h) {
  const auto part = manifest::view_of(view);
  return part && h.manifest_id == *part && h.complete() && record.id == view.publisher();
}

bool PeerCore::view_has_source(const Manifest& view, const std::optional<ManifestId>& selection) const {
  if (find(view.id())) return true;
  if (!gossip_) return true;
  const std::optional<PartSlot> slot = slot_in_seal(view, selection);
  std::optional<PartSlot> part_slot = slot;
  if (part_slot) part_slot->selection.reset();
  for (const auto& member : gossip_->members()) {
    if (member.liveness != gossip::Liveness::kAlive || !member.record) continue;
    const gossip::PeerRecord& r = member.record->record;
    if (r.id == self_ || r.leaving) continue;
    for (const gossip::HoldingEntry& h : r.holdings) {
      if (claim_on(h, view.id(), slot) || serves_view(view, r, h)) return true;
      const std::optional<bool> part = claim_on(h, *manifest::view_of(view), part_slot);
      if (part && *part) return true;
    }
  }
  return false;
}

void PeerCore::ask_to_serve_view(TimePoint now, LocalVersion& v, const gossip::PeerRecord& member) {
  if (!v.view_of || member.id == self_ || member.leaving || member.data_addr.empty() ||
      member.id == v.manifest->publisher()) {
    return;
  }
  if (v.asked_to_serve.size() >= kMaxViewServersAsked) return;
  const auto asked = [&](const LocalVersion::ServeAsk& a) { return a.peer == member.id; };
  if (std::any_of(v.asked_to_serve.begin(), v.asked_to_serve.end(), asked)) return;
  auto slow = std::find(v.slow_to_serve.begin(), v.slow_to_serve.end(), member.id);
  if (slow != v.slow_to_serve.end()) {
    if (!v.asked_to_serve.empty()) return;  // others are asked; a slow one waits its turn
    v.slow_to_serve.erase(slow);
  }
  std::optional<PartSlot> part_slot = v.slot;
  if (part_slot) part_slot->selection.reset();
  const bool holds_part = std::any_of(member.holdings.begin(), member.holdings.end(), [&](const gossip::HoldingEntry& h) {
    const std::optional<bool> complete = claim_on(h, *v.view_of, part_slot);
    return complete && *complete;
  });
  if (!holds_part) return;
  std::vector<std::uint8_t> bytes(v.view_of->bytes.begin(), v.view_of->bytes.end());
  const std::vector<std::uint8_t> table = manifest::view_table_bytes(v.manifest->tensors());
  if (bytes.size() + table.size() > swarm::kMaxServeViewBytes) return;
  bytes.insert(bytes.end(), table.begin(), table.end());
  v.asked_to_serve.push_back({member.id, now, false});
  next_view_ask_check_ = std::min(next_view_ask_check_, now + kViewAskTimeout);
  actions_.push(swarm::SendMessage{member.id, swarm::SwarmMessage::with_bytes(swarm::MessageType::kServeView, v.id,
                                                                              std::move(bytes))});
}

void PeerCore::on_serve_view(TimePoint now, const PeerId& peer, const swarm::SwarmMessage& message) {
  const ManifestId& view_id = message.version_id;
  const auto served = [&] {
    actions_.push(swarm::SendMessage{peer, swarm::SwarmMessage::signal(swarm::MessageType::kViewServed, view_id)});
  };
  if (auto held = find(view_id)) {
    if (held->role == VersionRole::kPublished || held->state == VersionState::kComplete) served();
    return;  // a fetcher of it serves what it has, as any fetcher does
  }
  if (message.bytes.size() <= sizeof(ManifestId::bytes)) return;
  ManifestId part_id;
  std::copy_n(message.bytes.begin(), part_id.bytes.size(), part_id.bytes.begin());
  auto part = find(part_id);
  if (!part || !part->holds_all() || !part->served() || part->memory.empty() ||
      !views_served_on_request_.allow(peer.hex(), now)) {
    return;
  }
  const std::span<const std::uint8_t> table(message.bytes.data() + part_id.bytes.size(),
                                            message.bytes.size() - part_id.bytes.size());
  auto view = manifest::declared_view_of_table(*part->manifest, table);
  if (!view || manifest::view_id(part_id, view->key) != view_id) return;
  auto view_manifest = manifest::view_manifest(*part->manifest, *view);
  if (!view_manifest) return;
  std::vector<ConstRegion> gathered;
  for (const manifest::LandingRun& run : view->gather) part->memory.pieces(run.part_offset, run.length, gathered);
  serve_view(now, part, std::move(*view_manifest), core::ConstRegions(std::span<const ConstRegion>(gathered)));
  served();
}

void PeerCore::on_view_served(TimePoint now, const PeerId& peer, const ManifestId& view) {
  auto v = find(view);
  if (!v || v->state != VersionState::kFetching) return;
  auto ask = std::find_if(v->asked_to_serve.begin(), v->asked_to_serve.end(),
                          [&](const LocalVersion::ServeAsk& a) { return a.peer == peer; });
  if (ask == v->asked_to_serve.end() || ask->served) return;
  ask->served = true;
  swarm_.add_holder(now, v->id, peer, /*complete=*/true);
  drain_swarm(now);
}

void PeerCore::expire_view_asks(TimePoint now) {
  if (now < next_view_ask_check_) return;
  next_view_ask_check_ = kTimeNever;
  for (auto& [id, v] : versions_) {
    if (!v->view_of || v->state != VersionState::kFetching) continue;
    bool expired = false;
    std::erase_if(v->asked_to_serve, [&](const LocalVersion::ServeAsk& a) {
      if (a.served || a.asked + kViewAskTimeout > now) return false;
      if (v->slow_to_serve.size() >= kMaxSlowServersKept) v->slow_to_serve.clear();
      v->slow_to_serve.push_back(a.peer);
      expired = true;
      return true;
    });
    if (expired && gossip_) {
      for (const auto& member : gossip_->members()) {
        if (member.liveness == gossip::Liveness::kAlive && member.record) {
          ask_to_serve_view(now, *v, member.record->record);
        }
      }
    }
    for (const LocalVersion::ServeAsk& a : v->asked_to_serve) {
      if (!a.served) next_view_ask_check_ = std::min(next_view_ask_check_, a.asked + kViewAskTimeout);
    }
  }
}

std::optional<PartSlot> PeerCore::slot_in_seal(const Manifest& m, const std::optional<ManifestId>& selection) const {
  const std::optional<ManifestId> view_of = manifest::view_of(m);
  if (view_of && !selection) return std::nullopt;  // a view is known in a part set by its selection
  auto known = resolve_version(m.model(), number_of(m));
  if (!known || !known->in_parts()) return std::nullopt;
  const auto& parts = known->sealed()->parts();
  if (parts.size() > gossip::kMaxPartSetParts) return std::nullopt;
  const ManifestId& part = view_of ? *view_of : m.id();
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (parts[i]->id() != part) continue;
    return PartSlot{known->id(), static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(parts.size()),
                    view_of ? selection : std::nullopt};
  }
  return std::nullopt;
}

std::optional<PartSlot> PeerCore::slot_of(const LocalVersion& v) const {
  if (v.slot) return v.slot;
  if (v.view_of || !v.manifest->part()) return std::nullopt;
  return slot_in_seal(*v.manifest, std::nullopt);
}

std::optional<bool> PeerCore::claim_on(const gossip::HoldingEntry& h, const ManifestId& id,
                                       const std::optional<PartSlot>& slot) {
  if (!h.is_part_set()) return h.manifest_id == id ? std::optional<bool>(h.complete()) : std::nullopt;
  if (!slot || slot->seal != h.manifest_id || slot->selection != h.selection || slot->count != h.parts.size() ||
      !h.parts.test(slot->index)) {
    return std::nullopt;
  }
  return h.complete_parts.test(slot->index);
}

template <typename Fn>
void PeerCore::for_each_claimed(const gossip::HoldingEntry& h, Fn&& fn) const {
  if (!h.is_part_set()) {
    if (auto v = find(h.manifest_id)) fn(*v, h.complete());
    return;
  }
  const auto claimed = [&](std::uint32_t index, const ManifestId& id) {
    if (index >= h.parts.size() || !h.parts.test(index)) return;
    if (auto v = find(id)) fn(*v, h.complete_parts.test(index));
  };
  if (h.selection) {
    // Views: only a fetcher of the same selection knows their ids, from
    // its own views of that selection.
    if (const PartSets::Members* members = part_sets_.members(h.manifest_id, h.selection)) {
      for (const auto& [index, id] : *members) claimed(index, id);
    }
    return;
  }
  auto known = resolve_version(h.model, VersionNumber{h.version});
  if (!known || !known->in_parts() || known->id() != h.manifest_id) return;
  const auto& parts = known->sealed()->parts();
  if (parts.size() != h.parts.size()) return;
  for (std::size_t i = h.parts.find_next(0, true); i < h.parts.size(); i = h.parts.find_next(i + 1, true)) {
    claimed(static_cast<std::uint32_t>(i), parts[i]->id());
  }
}

void PeerCore::add_holder(TimePoint now, const ManifestId& id, const PeerId& peer, bool complete) {
  swarm_.add_holder(now, id, peer, complete);
  drain_swarm(now);
}

void PeerCore::peer_gone(TimePoint now, const PeerId& peer) {
  swarm_.peer_gone(now, peer);
  heads_.forget_peer(peer);
  parts_.forget_peer(peer);
  drain_swarm(now);
}

std::optional<HostMate> PeerCore::host_mate_holding(const ManifestId& id) const {
  if (!gossip_ || config_.location.host.empty()) return std::nullopt;
  for (const auto& member : gossip_->members()) {
    if (member.liveness != gossip::Liveness::kAlive || !member.record) continue;
    const gossip::PeerRecord& r = member.record->record;
    if (r.id == self_ || r.topology != config_.location) continue;  // the same dc, rack and host
    for (const auto& h : r.holdings) {
      if (h.manifest_id == id && h.complete() && !r.data_addr.empty()) return HostMate{r.id, r.data_addr};
    }
  }
  return std::nullopt;
}

std::size_t PeerCore::replicas(const ManifestId& id) const {
  if (!gossip_) return 0;
  const auto v = find(id);
  const std::optional<PartSlot> slot = v ? slot_of(*v) : std::nullopt;
  std::size_t n = 0;
  for (const auto& member : gossip_->members()) {
    if (member.liveness != gossip::Liveness::kAlive && member.liveness != gossip::Liveness::kSuspect) continue;
    const gossip::PeerRecord& r = member.record->record;
    for (const auto& h : r.holdings) {
      const std::optional<bool> complete = claim_on(h, id, slot);
      if (complete && *complete && proofs_.proved(id, r.id, r.incarnation)) ++n;
    }
  }
  return n;
}

void PeerCore::challenge_holders(TimePoint now, const ManifestId& id) {
  if (!gossip_) return;
  auto v = find(id);
  if (!v) return;
  for (const auto& member : gossip_->members()) {
    if (member.liveness != gossip::Liveness::kAlive && member.liveness != gossip::Liveness::kSuspect) continue;
    challenge_member(now, *v, member.record->record);
  }
}

void PeerCore::challenge_member(TimePoint now, const LocalVersion& v, const gossip::PeerRecord& member) {
  if (member.id == self_ || !v.holds_all()) return;
  const std::optional<PartSlot> slot = slot_of(v);
  const bool claims = std::any_of(member.holdings.begin(), member.holdings.end(), [&](const gossip::HoldingEntry& h) {
    const std::optional<bool> complete = claim_on(h, v.id, slot);
    return complete && *complete;
  });
  if (!claims) return;
  const ManifestId& id = v.id;
  auto challenge = proofs_.challenge(now, id, member.id, member.incarnation, v.memory.size(), rng_);
  if (!challenge) return;
  const std::vector<std::uint8_t> bytes = encode_challenge(*challenge);
  proofs_.expect(id, member.id, v.domain->digest_ranges(challenge->nonce, challenge->ranges, v.memory));
  actions_.push(swarm::SendMessage{member.id, swarm::SwarmMessage::with_bytes(swarm::MessageType::kChallenge, id, bytes)});
}

void PeerCore::answer_challenge(TimePoint now, const PeerId& peer, const swarm::SwarmMessage& message) {
  auto v = find(message.version_id);
  if (!v) return;
  if (!v->holds_all()) return;
  auto challenge = decode_challenge(message.bytes, v->memory.size());
  if (!challenge || !challenges_answered_.allow(peer.hex(), now)) return;
  const core::Blake2bDigest answer = v->domain->digest_ranges(challenge->nonce, challenge->ranges, v->memory);
  actions_.push(swarm::SendMessage{
      peer, swarm::SwarmMessage::with_bytes(swarm::MessageType::kProof, message.version_id, {answer.begin(), answer.end()})});
}

void PeerCore::gossip_changed() {
  if (!gossip_ || gossip_dirty_) return;
  gossip_dirty_ = true;
  actions_.push(GossipChanged{});
}

void PeerCore::note_left_out() {
  if (!gossip_) return;
  const gossip::GossipStats& st = gossip_->stats();
  const std::pair<std::uint64_t, std::uint64_t> now_left{st.record_heads_left_out, st.record_holdings_left_out};
  if (now_left == left_out_reported_) return;
  const bool more = now_left.first > left_out_reported_.first || now_left.second > left_out_reported_.second;
  left_out_reported_ = now_left;
  if (now_left.first == 0 && now_left.second == 0) {
    report(Report::kInfo, "the gossip record announces every head and holding again");
  } else if (more) {
    report(Report::kWarn, "the gossip record is full (" + std::to_string(gossip::kMaxRecordBytes) +
                              " bytes): it leaves out " + std::to_string(now_left.first) + " head(s) and " +
                              std::to_string(now_left.second) +
                              " holding(s), chosen by the rule in docs/gossip.md; peers do not fetch what is left "
                              "out from this one");
  }
}

void PeerCore::state_changed() {
  if (state_dirty_) return;
  state_dirty_ = true;
  actions_.push(StateChanged{});
}

// --------------------------------------------------------------------------
// Manifests

void PeerCore::send_manifest_request(const std::optional<ManifestRequest>& request) {
  if (!request) return;
  actions_.push(swarm::SendMessage{request->peer, swarm::SwarmMessage::signal(swarm::MessageType::kGetManifest, request->id)});
}

void PeerCore::answer_get_manifest(const PeerId& peer, const ManifestId& id) {
  if (const KnownVersion* k = heads_.known(id); k && k->in_parts()) {
    const auto seal = k->encoded();
    actions_.push(swarm::SendMessage{peer, swarm::SwarmMessage::with_bytes(swarm::MessageType::kSeal, id, {seal.begin(), seal.end()})});
    return;
  }
  std::shared_ptr<const Manifest> m = heads_.manifest(id);
  if (!m) m = parts_.manifest(id);
  if (!m) m = heads_.part(id);
  if (!m) {
    // A view's manifest is never sent: its fetchers derive it.
    if (auto v = find(id); v && !v->view_of) m = v->manifest;
  }
  if (!m) {
    actions_.push(swarm::SendMessage{peer, swarm::SwarmMessage::signal(swarm::MessageType::kNoManifest, id)});
    return;
  }
  actions_.push(swarm::SendMessage{peer, swarm::SwarmMessage::with_bytes(swarm::MessageType::kManifest, id, {m->encoded().begin(), m->encoded().end()})});
}

void PeerCore::on_manifest(TimePoint now, const PeerId& from, const swarm::SwarmMessage& message) {
  auto decoded = decoder_->decode(message.bytes);
  if (!decoded || (*decoded)->id() != message.version_id) {
    report(Report::kWarn, "peer " + from.short_hex() + " sent a bad manifest: " +
                              (decoded ? std::string("wrong id") : decoded.status().to_string()));
    // A namer that answers with garbage names nothing here for a while.
    send_manifest_request(heads_.on_bad_manifest(now, from, message.version_id));
    return;
  }
  if (!heads_.trusts((*decoded)->publisher())) {
    report(Report::kWarn, "refused manifest " + message.version_id.short_hex() + " from " + from.short_hex() +
                              ": signed by " + (*decoded)->publisher().short_hex() + ", not a trusted publisher");
    send_manifest_request(heads_.on_foreign_manifest(now, from, message.version_id));
    return;
  }
  if ((*decoded)->part()) return on_part_manifest(now, from, std::move(*decoded));
  const std::size_t equivocations = heads_.equivocations().size();
  auto accepted = accept_manifest(now, std::move(*decoded));
  if (!accepted) {
    // A publisher's key signed two contents for one number: a fault or a
    // compromise an operator must hear of, not a peer's bad message.
    const bool proof = heads_.equivocations().size() != equivocations;
    report(proof ? Report::kError : Report::kWarn, "refused manifest " + message.version_id.short_hex() + " from " +
                                                      from.short_hex() + ": " + accepted.status().to_string());
  }
}

void PeerCore::send_proof(const Equivocation& e, const PeerId& to) {
  if (to == self_ || proofs_sent_.size() >= kMaxProofsSent || !proofs_sent_.emplace(to, e.model, e.version).second) return;
  for (const KnownVersion* k : {&e.first, &e.second}) {
    const auto bytes = k->encoded();
    const auto type = k->in_parts() ? swarm::MessageType::kSeal : swarm::MessageType::kManifest;
    actions_.push(swarm::SendMessage{to, swarm::SwarmMessage::with_bytes(type, k->id(), {bytes.begin(), bytes.end()})});
  }
}

void PeerCore::spread_proofs_found(std::size_t known_before) {
  if (!gossip_) return;
  const auto& found = heads_.equivocations();
  for (std::size_t i = known_before; i < found.size(); ++i) {
    const Equivocation& e = found[i];
    std::size_t sent = 0;
    for (const auto& member : gossip_->members()) {
      if (sent >= kProofFanout) break;
      if (member.liveness != gossip::Liveness::kAlive && member.liveness != gossip::Liveness::kSuspect) continue;
      for (const gossip::HeadEntry& head : member.record->record.heads) {
        if (head.model == e.model && VersionNumber{head.version} == e.version) {
          send_proof(e, member.record->record.id);
          ++sent;
        }
      }
    }
  }
}

Result<bool> PeerCore::accept_manifest(TimePoint now, std::shared_ptr<const Manifest> m) {
  const std::string model = m->model();
  const std::optional<VersionInfo> before = heads_.head(model);
  const std::size_t proofs_before = heads_.equivocations().size();
  auto accepted = heads_.accept(std::move(m));
  after_accept(now, model, before, proofs_before);
  return accepted;
}

Result<bool> PeerCore::accept_sealed(TimePoint now, std::shared_ptr<const manifest::SealedVersion> sealed) {
  const std::string model = sealed->model();
  const std::optional<VersionInfo> before = heads_.head(model);
  const std::size_t proofs_before = heads_.equivocations().size();
  auto accepted = heads_.accept(std::move(sealed));
  after_accept(now, model, before, proofs_before);
  return accepted;
}

void PeerCore::after_accept(TimePoint now, const std::string& model, const std::optional<VersionInfo>& before,
                            std::size_t proofs_before) {
  spread_proofs_found(proofs_before);
  for (auto& request : heads_.parent_requests(now)) send_manifest_request(std::move(request));
  const std::optional<VersionInfo> after = heads_.head(model);
  if (after && (!before || before->id != after->id)) {
    if (gossip_) {
      gossip_->set_head(gossip::HeadEntry{after->model, after->version, after->id});
      note_left_out();
    }
    gossip_changed();
    actions_.push(HeadChanged{*after});
    // The previous head may have been waiting for this one to let go.
    release_due(now, /*all=*/false);
    // Parts of versions two below the head are history (a sealed version
    // keeps its own).
    if (after->version > 2) parts_.forget_through(model, VersionNumber{after->version - 2});
  }
  state_changed();
}

// --------------------------------------------------------------------------
// Versions in parts

void PeerCore::on_seal(TimePoint now, const PeerId& from, const swarm::SwarmMessage& message) {
  auto seal = decode_seal(message.bytes);
  if (!seal || seal->id() != message.version_id) {
    report(Report::kWarn, "peer " + from.short_hex() + " sent a bad seal: " +
                              (seal ? std::string("wrong id") : seal.status().to_string()));
    send_manifest_request(heads_.on_bad_manifest(now, from, message.version_id));
    return;
  }
  if (Status trusted = verify_seal_signature(*seal, config_.trusted_publishers); !trusted.is_ok()) {
    report(Report::kWarn, "refused seal " + message.version_id.short_hex() + " from " + from.short_hex() + ": " +
                              trusted.to_string());
    send_manifest_request(heads_.on_foreign_manifest(now, from, message.version_id));
    return;
  }
  if (heads_.known(seal->id()) || heads_.equivocated(seal->body().model, VersionNumber{seal->body().version})) return;
  // At or below the head, a seal is news only when another version of its
  // number is believed here: it proves equivocation.
  const auto head = heads_.head(seal->body().model);
  if (head && head->version >= seal->body().version && !heads_.known(seal->body().model, VersionNumber{seal->body().version})) {
    return;
  }
  for (auto& request : parts_.on_seal(now, from, std::move(*seal))) send_manifest_request(std::move(request));
  drain_parts(now);
}

void PeerCore::on_part_manifest(TimePoint now, const PeerId& from, std::shared_ptr<const Manifest> part) {
  const std::string what = "part " + std::to_string(part->part()->index) + " of " + part->model() + " v" +
                           std::to_string(part->version());
  auto added = parts_.on_part(part);
  if (!added) {
    report(Report::kWarn, "refused " + what + " (" + part->id().short_hex() + ") from " + from.short_hex() + ": " +
                              added.status().to_string());
    return;
  }
  if (*added) {
    const PartConflict& c = **added;
    const std::string signers = c.first->publisher() == c.second->publisher()
                                    ? c.first->publisher().short_hex()
                                    : c.first->publisher().short_hex() + " and " + c.second->publisher().short_hex();
    report(Report::kError, "equivocation: two manifests of " + what + " (" + c.first->id().short_hex() + " and " +
                               c.second->id().short_hex() + "), signed by " + signers +
                               "; the version is never sealed or believed here");
    const std::optional<VersionInfo> before = heads_.head(part->model());
    const std::size_t proofs_before = heads_.equivocations().size();
    heads_.record_equivocation(
        Equivocation{part->model(), VersionNumber{part->version()}, KnownVersion(c.first), KnownVersion(c.second)});
    // Peers that believe a seal of it hear of the pair (spread_proofs_found).
    after_accept(now, part->model(), before, proofs_before);
    return;
  }
  drain_parts(now);
}

void PeerCore::drain_parts(TimePoint now) {
  for (SealBody& body : parts_.take_ready()) seal(now, std::move(body));
  for (JoinedSeal& joined : parts_.take_joined()) {
    if (!joined.version) {
      report(Report::kError, "refused seal " + joined.seal.short_hex() + ": " + joined.version.status().to_string());
      continue;
    }
    const std::string what = (*joined.version)->model() + " v" + std::to_string((*joined.version)->version());
    auto accepted = accept_sealed(now, std::move(*joined.version));
    if (!accepted) report(Report::kWarn, "refused seal " + joined.seal.short_hex() + " of " + what + ": " +
                                             accepted.status().to_string());
  }
  state_changed();
}

void PeerCore::seal(TimePoint now, SealBody body) {
  if (!sealer_) return;
  const std::string what = body.model + " v" + std::to_string(body.version);
  const VersionNumber number{body.version};
  const std::string model = body.model;
  auto made = make_seal(std::move(body), *sealer_);
  Result<std::shared_ptr<const manifest::SealedVersion>> joined =
      made ? manifest::SealedVersion::join(std::move(*made), parts_.parts(model, number)) : made.status();
  if (!joined) {
    report(Report::kError, "cannot seal " + what + ": " + joined.status().to_string());
    parts_.seal_failed(model, number, Status::verify_failed("cannot seal " + what + ": " + joined.status().message()));
    return;
  }
  const ManifestId id = (*joined)->id();
  auto accepted = accept_sealed(now, std::move(*joined));
  if (!accepted) {
    report(Report::kError, "cannot seal " + what + ": " + accepted.status().to_string());
    parts_.seal_failed(model, number, accepted.status().with_context("cannot seal " + what));
    return;
  }
  report(Report::kInfo, "sealed " + what + " (" + id.short_hex() + ") from " +
                            std::to_string(parts_.part_count(model, number)) + " parts");
}

Status PeerCore::part_sealed(const LocalVersion& part) const {
  const Manifest& m = *part.manifest;
  const std::string what = m.model() + " v" + std::to_string(m.version());
  if (const KnownVersion* k = heads_.known(m.model(), part.number)) {
    if (k->in_parts()) {
      const auto& ids = k->sealed()->seal().body().parts;
      if (std::find(ids.begin(), ids.end(), m.id()) != ids.end()) return Status::ok();
    }
    return Status::already_exists(what + " is another version (" + k->id().short_hex() + "), without this part");
  }
  if (heads_.equivocated(m.model(), part.number)) {
    return Status::verify_failed("equivocation: " + what + " was signed twice (a part or its seal); it is never sealed");
  }
  TENSORHUB_RETURN_IF_ERROR(parts_.seal_failure(m.model(), part.number));
  if (const auto head = heads_.head(m.model()); head && head->version > m.version()) {
    return Status::already_exists(what + " was never sealed here, and the head is v" + std::to_string(head->version) +
                                  " now");
  }
  std::string missing;
  for (std::uint32_t i : parts_.missing(m.model(), part.number)) {
    missing += (missing.empty() ? "part " : ", part ") + std::to_string(i);
  }
  if (missing.empty()) return Status::unavailable(what + " has every part here and waits for its seal");
  return Status::unavailable(what + " waits for " + missing + " of " + std::to_string(m.part()->count) +
                             " (no record names them yet)");
}

Status PeerCore::learn_manifest(TimePoint now, std::shared_ptr<const Manifest> manifest) {
  auto accepted = accept_manifest(now, std::move(manifest));
  return accepted ? Status::ok() : accepted.status();
}

Result<std::shared_ptr<const Manifest>> PeerCore::resolve(const std::string& model, VersionNumber version) const {
  auto known = resolve_version(model, version);
  if (!known) return known.status();
  if (known->in_parts()) {
    return Status::invalid_argument(model + " v" + std::to_string(known->version()) + " was published in " +
                                    std::to_string(known->sealed()->parts().size()) +
                                    " parts: it has no single manifest (its seal names one per part)");
  }
  return known->manifest();
}

Result<KnownVersion> PeerCore::resolve_version(const std::string& model, VersionNumber version) const {
  const auto head = heads_.head(model);
  const bool latest = version == VersionNumber{kLatestVersion};
  if (latest) TENSORHUB_RETURN_IF_ERROR(equivocation_above(model, head ? number_of(*head) : VersionNumber{}));
  if (!latest && heads_.equivocated(model, version)) {
    return Status::verify_failed("equivocation: " + model + " v" + std::to_string(version.value) +
                                 " was signed twice with different contents; neither is believed");
  }
  if (latest) {
    if (!head) return Status::unavailable("no version of model '" + model + "' is known yet");
    version = number_of(*head);
  }
  if (const KnownVersion* k = heads_.known(model, version)) return *k;
  return Status::not_found("version " + std::to_string(version.value) + " of model '" + model + "' is not known" +
                           (head ? " (the newest known is v" + std::to_string(head->version) + ")"
                                 : std::string(" (no version is known yet)")));
}

Status PeerCore::equivocation_above(const std::string& model, VersionNumber after) const {
  const Equivocation* newest = nullptr;
  for (const Equivocation& e : heads_.equivocations()) {
    if (e.model == model && e.version > after && (!newest || e.version > newest->version)) newest = &e;
  }
  if (!newest) return Status::ok();
  return Status::verify_failed("equivocation: " + model + " v" + std::to_string(newest->version.value) +
                               " was signed twice with different contents by " +
                               newest->first.publisher().short_hex() +
                               "; neither is believed (tensorhub status --json shows the pair)");
}

// --------------------------------------------------------------------------
// Data connections

void PeerCore::on_connected(TimePoint now, const PeerId& peer) {
  swarm_.on_connected(now, peer);
  drain_swarm(now);
}

void PeerCore::on_connect_failed(TimePoint now, const PeerId& peer) {
  swarm_.on_connect_failed(now, peer);
  drain_swarm(now);
}

void PeerCore::on_disconnected(TimePoint now, const PeerId& peer) {
  swarm_.on_disconnected(now, peer);
  drain_swarm(now);
}

void PeerCore::on_message(TimePoint now, const PeerId& peer, const swarm::SwarmMessage& message) {
  switch (message.type) {
    case swarm::MessageType::kGetManifest: return answer_get_manifest(peer, message.version_id);
    case swarm::MessageType::kManifest: return on_manifest(now, peer, message);
    case swarm::MessageType::kSeal: return on_seal(now, peer, message);
    case swarm::MessageType::kGroup: return on_group_state(now, peer, message);
    case swarm::MessageType::kNoManifest:
      send_manifest_request(parts_.on_no_manifest(now, peer, message.version_id));
      return send_manifest_request(heads_.on_no_manifest(now, peer, message.version_id));
    case swarm::MessageType::kChallenge: return answer_challenge(now, peer, message);
    case swarm::MessageType::kServeView: return on_serve_view(now, peer, message);
    case swarm::MessageType::kViewServed: return on_view_served(now, peer, message.version_id);
    case swarm::MessageType::kProof:
      if (proofs_.on_answer(message.version_id, peer, message.bytes)) {
        release_due(now, /*all=*/false);  // a deferred release may wait for this replica
        state_changed();
      }
      return;
    case swarm::MessageType::kCancel:
      // The requester got the block elsewhere, or gave up on us: a piece
      // still queued here would cross the link for nothing.
      actions_.push(CancelQueuedPiece{peer, message.request_id});
      return;
    default:
      swarm_.on_message(now, peer, message);
      drain_swarm(now);
      return;
  }
}

std::optional<PieceLanding> PeerCore::landing_for(const std::optional<swarm::PieceTarget>& target) const {
  if (!target) return std::nullopt;
  auto v = find(target->version_id);
  if (!v || (!v->destination.empty() && target->offset + target->length > v->destination.size())) {
    return std::nullopt;
  }
  return PieceLanding{std::move(v), target->offset, target->length};
}

// --------------------------------------------------------------------------
// Work done for the core

void PeerCore::shard_failed(const swarm::ShardFailed& failed) {
  auto v = find(failed.version_id);
  if (!v) return;
  report(Report::kWarn, v->model + " v" + std::to_string(v->number.value) + ": shard " + std::to_string(failed.shard.value) +
                            " failed verification; fetching it again");
  ++v->bad_shards;
  state_changed();
}

void PeerCore::shard_held(TimePoint now, const swarm::ShardHeld& held) {
  auto v = find(held.version_id);
  if (!v) return;
  const ShardEntry& e = v->manifest->shard(held.shard);
  ++v->progress.shards_verified;
  v->progress.bytes_verified += e.byte_length;
  if (auto p = swarm_.progress(v->id)) v->progress.bytes_received = p->bytes_received + p->duplicate_bytes;
  const double seconds = to_seconds(now - v->started);
  if (seconds > 0) v->progress.bytes_per_second = static_cast<double>(v->progress.bytes_verified) / seconds;
  state_changed();
  announce_holding(*v);
}

void PeerCore::drain_swarm(TimePoint now) {
  while (auto action = swarm_.poll()) {
    std::visit(core::Overloaded{
                   [&](swarm::VerifyShard& verify) {
                     if (auto v = find(verify.version_id)) {
                       actions_.push(HashShard{std::move(v), verify.shard, verify.fetch_serial});
                     }
                   },
                   [&](swarm::ShardFailed& failed) { shard_failed(failed); },
                   [&](swarm::ShardHeld& held) { shard_held(now, held); },
                   [&](swarm::FetchFinished& finished) {
                     if (auto v = find(finished.version_id)) finish(now, v, finished.status);
                   },
                   // The wire and the memory's: the driver's, in order.
                   [&](swarm::OpenConnection& a) { actions_.push(std::move(a)); },
                   [&](swarm::CloseConnection& a) { actions_.push(std::move(a)); },
                   [&](swarm::SendMessage& a) { actions_.push(std::move(a)); },
                   [&](swarm::ServePiece& a) { actions_.push(std::move(a)); },
                   [&](swarm::DropQueuedPieces& a) { actions_.push(std::move(a)); },
               },
               *action);
  }
}

// --------------------------------------------------------------------------
// Time and actions

void PeerCore::handle_timeout(TimePoint now) {
  if (now >= swarm_.next_timeout()) swarm_.handle_timeout(now);
  for (auto& request : heads_.handle_timeout(now)) send_manifest_request(std::move(request));
  for (auto& request : parts_.handle_timeout(now)) send_manifest_request(std::move(request));
  if (now >= groups_.next_timeout()) {
    if (groups_.handle_timeout(now)) state_changed();
    refresh_group_stages(now);  // progress rides on the heartbeats
  }
  expire_view_asks(now);
  release_due(now, /*all=*/false);
  drain_swarm(now);
}

TimePoint PeerCore::next_timeout() const {
  return std::min({swarm_.next_timeout(), heads_.next_timeout(), parts_.next_timeout(), groups_.next_timeout(),
                   deferred_.next_deadline(), next_view_ask_check_});
}

std::optional<PeerAction> PeerCore::poll() {
  auto action = actions_.poll();
  if (action) {
    if (std::holds_alternative<GossipChanged>(*action)) gossip_dirty_ = false;
    if (std::holds_alternative<StateChanged>(*action)) state_dirty_ = false;
  }
  return action;
}

}  // namespace tensorhub::peer
