// GossipCore: its own record, what it sends, and what it tells of others.
// Incoming datagrams, failure detection and anti-entropy are in
// gossip_intake.cpp, gossip_failure_detection.cpp and gossip_sync.cpp.
#include "gossip/gossip_core.hpp"
#include "core/key_derivation.hpp"

#include <algorithm>
#include <cmath>

namespace tensorhub::gossip {
namespace {

// Largest plaintext header of a datagram before its items: array, sender,
// kind, seq, target, address, items array header.
constexpr std::size_t kPacketHeaderBytes = 1 + 34 + 1 + 5 + 34 + 2 + kMaxRecordAddrBytes + 3;
constexpr std::size_t kMaxEvents = 1u << 16;

}  // namespace

std::string_view member_event_name(MemberEventKind kind) {
  switch (kind) {
    case MemberEventKind::kJoined: return "joined";
    case MemberEventKind::kUpdated: return "updated";
    case MemberEventKind::kSuspect: return "suspect";
    case MemberEventKind::kAlive: return "alive";
    case MemberEventKind::kDead: return "dead";
    case MemberEventKind::kLeft: return "left";
    case MemberEventKind::kRemoved: return "removed";
    case MemberEventKind::kIdentityConflict: return "identity-conflict";
  }
  return "unknown";
}

GossipCore::GossipCore(GossipConfig config, Identity identity, const SwarmKey& swarm_key, LocalPeerInfo local,
                       std::uint64_t initial_incarnation, std::uint64_t rng_seed, TimePoint now,
                       std::shared_ptr<RecordDecoder> decoder)
    : config_(config),
      identity_(std::move(identity)),
      gossip_key_(core::derive_subkey(swarm_key, "gossip")),
      sealer_(gossip_key_, identity_.public_key(), core::mix64(rng_seed ^ 0xb0070b0070b0070bull)),
      pair_keys_(identity_, gossip_key_, config.max_members),
      rng_(rng_seed),
      seq_rng_(rng_seed ^ 0x9e3779b97f4a7c15ull),
      decoder_(decoder ? std::move(decoder) : default_record_decoder()),
      table_(config.max_members),
      rate_limiter_(config.rate_limit_per_second, config.rate_limit_burst, config.rate_limit_addresses),
      sync_limiter_(config.sync_answers_per_second, config.sync_answers_burst, config.rate_limit_addresses) {
  self_.id = identity_.public_key();
  self_.incarnation = initial_incarnation;
  self_.seq = 0;
  self_.boot = sealer_.boot_id();
  self_.gossip_addr = std::move(local.gossip_addr);
  self_.data_addr = std::move(local.data_addr);
  self_.topology = std::move(local.topology);
  resign(now);
  // Spread the periodic work of many peers started at once.
  const auto jitter = [&](Duration d) { return Duration(static_cast<std::int64_t>(rng_.below(d.count() + 1))); };
  next_probe_at_ = now + jitter(config_.probe_interval);
  next_gossip_at_ = now + jitter(config_.gossip_interval);
  // The first anti-entropy exchange comes early (2-5 s): it repairs the join
  // records that the epidemic misses when many peers join at once (each of
  // N^2 record-peer pairs misses with a small chance), instead of leaving a
  // gap until the first regular push-pull 15-30 s later.
  next_push_pull_at_ = now + std::chrono::seconds(2) + jitter(std::chrono::seconds(3));
  next_reconnect_at_ = now + config_.reconnect_interval / 2 + jitter(config_.reconnect_interval / 2);
  next_reap_at_ = now + config_.probe_interval * 10;
  last_input_ = now;
  caught_up_at_ = now;
}

void GossipCore::note_input(TimePoint now) {
  if (now - last_input_ > config_.probe_interval) {
    caught_up_at_ = now + config_.probe_interval;
    adjust_awareness(1);
  }
  last_input_ = std::max(last_input_, now);
}

// --------------------------------------------------------------------------
// Local record

void GossipCore::resign(TimePoint now) {
  auto signed_record = sign_record(self_, identity_);
  self_dirty_ = false;  // a record that cannot be signed is not tried again until it changes
  if (!signed_record) {
    // The entries are chosen to fit (record_budget.hpp), so this is a bug or
    // a field set outside those rules; the previous record stays in force.
    ++stats_.records_unsigned;
    sign_error_ = signed_record.status();
    return;
  }
  self_signed_ = std::move(*signed_record);
  last_signed_ = now;
  ++stats_.records_signed;
  stats_.record_bytes = self_signed_->encoded.size();
  broadcasts_.enqueue(self_signed_);
}

void GossipCore::resign_if_due(TimePoint now) {
  if (self_dirty_ && (head_changed_ || now >= last_signed_ + config_.min_resign_interval)) {
    ++self_.seq;
    resign(now);
    if (head_changed_ && note_heads(self_.heads)) {
      eager_round_due_ = true;
      head_news_ = self_signed_;
    }
    head_changed_ = false;
  }
}

bool GossipCore::note_heads(const std::vector<HeadEntry>& heads) {
  bool newer = false;
  for (const HeadEntry& head : heads) {
    auto it = newest_head_.find(head.model);
    if (it == newest_head_.end()) {
      if (newest_head_.size() >= kMaxModelsTracked) continue;
      newest_head_.emplace(head.model, head.version);
      newer = true;
    } else if (head.version > it->second) {
      it->second = head.version;
      newer = true;
    }
  }
  return newer;
}

void GossipCore::choose_announced() {
  ChosenEntries chosen = choose_entries(self_, wanted_);
  if (chosen.heads != self_.heads) {
    self_.heads = std::move(chosen.heads);
    self_dirty_ = true;
    head_changed_ = true;
  }
  if (chosen.holdings != self_.holdings) {
    self_.holdings = std::move(chosen.holdings);
    self_dirty_ = true;
  }
  stats_.record_heads_left_out = chosen.heads_left_out;
  stats_.record_holdings_left_out = chosen.holdings_left_out;
}

Status GossipCore::can_announce_origin(const HeadEntry& head) const {
  Announcements with = wanted_;
  with.heads[head.model] = head;
  with.holdings[{head.model, head.version, head.manifest_id}] =
      LocalHolding{HoldingEntry{head.model, head.version, head.manifest_id, 1000}, /*origin=*/true};
  return check_required(self_, with);
}

bool GossipCore::announces(const std::string& model, std::uint64_t version) const {
  return std::any_of(self_.holdings.begin(), self_.holdings.end(),
                     [&](const HoldingEntry& h) { return h.model == model && h.version == version; });
}

Status GossipCore::set_groups(std::vector<GroupEntry> groups) {
  if (groups == self_.groups) return Status::ok();
  PeerRecord with = self_;
  with.groups = std::move(groups);
  TENSORHUB_RETURN_IF_ERROR(validate_record(with));
  TENSORHUB_RETURN_IF_ERROR(check_required(with, wanted_));
  self_.groups = std::move(with.groups);
  self_dirty_ = true;
  choose_announced();
  return Status::ok();
}

void GossipCore::set_head(const HeadEntry& head) {
  auto it = wanted_.heads.find(head.model);
  if (it != wanted_.heads.end()) {
    if (it->second == head) return;
    it->second = head;
  } else {
    if (wanted_.heads.size() >= kMaxWantedEntries) return;  // past the bound: not announced, nor counted
    wanted_.heads.emplace(head.model, head);
  }
  choose_announced();
}

void GossipCore::set_holding(const HoldingEntry& holding, bool origin) {
  const LocalHolding local{holding, origin};
  auto it = wanted_.holdings.find(key_of(holding));
  if (it != wanted_.holdings.end()) {
    if (it->second.entry == holding && it->second.origin == origin) return;
    it->second = local;
  } else {
    if (wanted_.holdings.size() >= kMaxWantedEntries) return;
    wanted_.holdings.emplace(key_of(holding), local);
  }
  choose_announced();
}

void GossipCore::remove_holding(const HoldingKey& key) {
  if (wanted_.holdings.erase(key) == 0) return;
  choose_announced();
}

void GossipCore::refute(TimePoint now, std::uint64_t accused_incarnation) {
  if (self_.leaving) return;
  // Saturates: an incarnation never wraps back below one others hold.
  const std::uint64_t above = std::max(self_.incarnation, accused_incarnation);
  self_.incarnation = above == UINT64_MAX ? above : above + 1;
  self_.seq = 0;
  ++stats_.refutations;
  adjust_awareness(1);  // being suspected hints that we are the slow one
  resign(now);
}

void GossipCore::adjust_awareness(int delta) {
  awareness_ = std::clamp(awareness_ + delta, 0, config_.awareness_max - 1);
}

void GossipCore::leave(TimePoint now) {
  if (self_.leaving) return;
  self_.leaving = true;
  ++self_.seq;
  resign(now);
  leave_at_ = now;
  leave_sends_ = 0;
  probe_.reset();
  // Tell a few peers right away; gossip rounds carry it further.
  for (const Member* m : sample(table_.live(), static_cast<std::size_t>(config_.gossip_fanout) * 2)) {
    Packet p;
    p.kind = PacketKind::kGossip;
    send_packet(*m, p, std::vector<OutgoingItem>{self_signed_});
    ++leave_sends_;
  }
}

bool GossipCore::leave_settled() const {
  return self_.leaving && (table_.live_count() == 0 || leave_sends_ >= retransmit_limit() || broadcasts_.empty());
}

// --------------------------------------------------------------------------
// Output helpers

void GossipCore::emit(MemberEventKind kind, const PeerId& id, const RecordPtr& record, std::uint64_t incarnation) {
  if (events_.size() >= kMaxEvents) {
    events_.pop_front();
    ++stats_.events_dropped;
  }
  events_.push_back(MemberEvent{kind, id, record, incarnation});
}

int GossipCore::retransmit_limit() const {
  // At least the limit of a 10..99-peer swarm: a peer that has just joined
  // knows few members, and with memberlist's bare log10(n) it would relay the
  // join records it learns only 4 times, which let a record miss a peer
  // until the next push-pull (seen: 50 peers joining at once took 17-30 s
  // to converge in half the seeds, 4 s in the others).
  const double scale = std::max(2.0, std::ceil(std::log10(static_cast<double>(cluster_size()) + 1.0)));
  return config_.retransmit_multiplier * static_cast<int>(scale);
}

SuspicionTimeouts GossipCore::suspicion_timeouts() const {
  const double n = static_cast<double>(cluster_size());
  const double node_scale = std::max(1.0, std::log10(std::max(1.0, n)));
  const Duration min = std::chrono::duration_cast<Duration>(config_.probe_interval * config_.suspicion_multiplier *
                                                            node_scale);
  const std::size_t expected = cluster_size() > 2 ? std::min<std::size_t>(config_.indirect_checks, cluster_size() - 2)
                                                  : 0;
  return SuspicionTimeouts{min, min * config_.suspicion_max_multiplier, expected};
}

Duration GossipCore::push_pull_interval() const {
  const double n = static_cast<double>(cluster_size());
  if (n <= 32) return config_.push_pull_interval;
  const double multiplier = std::ceil(std::log2(n) - std::log2(32.0)) + 1.0;
  return std::chrono::duration_cast<Duration>(config_.push_pull_interval * multiplier);
}

std::uint32_t GossipCore::next_probe_seq() {
  std::uint32_t seq = 0;
  while (seq == 0) seq = static_cast<std::uint32_t>(seq_rng_.next());
  return seq;
}

void GossipCore::send_packet(const PeerId& to, const std::string& addr, Packet packet,
                             std::span<const OutgoingItem> must_include, bool piggyback) {
  if (addr.empty()) return;
  const PairKey* pair_key = pair_keys_.key_for(to);
  stats_.pair_keys_derived = pair_keys_.derivations();
  if (pair_key == nullptr) return;  // not a usable key: nobody could read it
  packet.sender = self_id();
  std::size_t budget = config_.max_datagram_bytes - kDatagramOverhead - kPacketHeaderBytes;
  std::vector<OutgoingItem> items(must_include.begin(), must_include.end());
  for (const auto& item : items) budget -= std::min(budget, encoded_item_size(item));
  if (piggyback) {
    for (auto& item : broadcasts_.take(budget, retransmit_limit())) items.push_back(std::move(item));
  }
  OutgoingDatagram d{addr, sealer_.seal_packet(*pair_key, packet, items)};
  ++stats_.datagrams_out;
  stats_.bytes_out += d.bytes.size();
  datagrams_.push_back(std::move(d));
}

std::optional<OutgoingDatagram> GossipCore::poll_datagram() {
  if (datagrams_.empty()) return std::nullopt;
  OutgoingDatagram d = std::move(datagrams_.front());
  datagrams_.pop_front();
  return d;
}

std::optional<StreamAction> GossipCore::poll_stream() {
  return stream_actions_.poll();
}

std::optional<MemberEvent> GossipCore::poll_event() {
  if (events_.empty()) return std::nullopt;
  MemberEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

// --------------------------------------------------------------------------
// Queries

std::vector<MemberView> GossipCore::members() const {
  std::vector<MemberView> out;
  out.reserve(table_.size());
  table_.for_each([&](const Member& m) { out.push_back(MemberView{m.record, m.liveness, m.incarnation, m.since}); });
  return out;
}

std::optional<MemberView> GossipCore::member(const PeerId& id) const {
  const Member* m = table_.find(id);
  if (m == nullptr) return std::nullopt;
  return MemberView{m->record, m->liveness, m->incarnation, m->since};
}

VersionVector GossipCore::known_heads() const {
  VersionVector vv;
  for (const auto& [model, head] : wanted_.heads) vv.merge(head);
  table_.for_each([&](const Member& m) {
    if (m.is_live()) vv.merge(m.record->record.heads);
  });
  return vv;
}

}  // namespace tensorhub::gossip