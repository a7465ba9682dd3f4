#include "gossip/gossip_core.hpp"

#include <algorithm>
#include <cmath>

namespace tensorhub::gossip {
namespace {

// Largest plaintext header of a datagram before its items: array, sender,
// kind, seq, target, address, items array header.
constexpr std::size_t kPacketHeaderBytes = 1 + 34 + 1 + 5 + 34 + 2 + kMaxRecordAddrBytes + 3;
constexpr std::size_t kMaxEvents = 1u << 16;
constexpr std::size_t kMaxStrangerWindows = 4096;

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
  }
  return "unknown";
}

GossipCore::GossipCore(GossipConfig config, Identity identity, const SwarmKey& swarm_key, LocalPeerInfo local,
                       std::uint64_t initial_incarnation, std::uint64_t rng_seed, TimePoint now,
                       std::shared_ptr<RecordDecoder> decoder)
    : config_(config),
      identity_(std::move(identity)),
      gossip_key_(swarm_key.derive("gossip")),
      sealer_(gossip_key_, identity_.public_key(), initial_incarnation),
      rng_(rng_seed),
      decoder_(decoder ? std::move(decoder) : default_record_decoder()),
      table_(config.max_members),
      rate_limiter_(config.rate_limit_per_second, config.rate_limit_burst, config.rate_limit_addresses) {
  self_.id = identity_.public_key();
  self_.incarnation = initial_incarnation;
  self_.seq = 0;
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
  // Our own record always fits: its limits are enforced by set_* below.
  if (!signed_record) return;
  self_signed_ = std::move(*signed_record);
  self_dirty_ = false;
  last_signed_ = now;
  ++stats_.records_signed;
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

void GossipCore::set_head(const HeadEntry& head) {
  auto it = std::lower_bound(self_.heads.begin(), self_.heads.end(), head,
                             [](const HeadEntry& a, const HeadEntry& b) { return a.model < b.model; });
  if (it != self_.heads.end() && it->model == head.model) {
    if (*it == head) return;
    *it = head;
  } else {
    if (self_.heads.size() >= kMaxRecordHeads) return;
    self_.heads.insert(it, head);
  }
  self_dirty_ = true;
  head_changed_ = true;
}

void GossipCore::set_holding(const HoldingEntry& holding) {
  auto less = [](const HoldingEntry& a, const HoldingEntry& b) {
    return std::tie(a.model, a.version) < std::tie(b.model, b.version);
  };
  auto it = std::lower_bound(self_.holdings.begin(), self_.holdings.end(), holding, less);
  if (it != self_.holdings.end() && it->model == holding.model && it->version == holding.version) {
    if (*it == holding) return;
    *it = holding;
  } else {
    if (self_.holdings.size() >= kMaxRecordHoldings) self_.holdings.erase(self_.holdings.begin());  // oldest model/version
    it = std::lower_bound(self_.holdings.begin(), self_.holdings.end(), holding, less);
    self_.holdings.insert(it, holding);
  }
  self_dirty_ = true;
}

void GossipCore::remove_holding(const std::string& model, std::uint64_t version) {
  auto it = std::find_if(self_.holdings.begin(), self_.holdings.end(),
                         [&](const HoldingEntry& h) { return h.model == model && h.version == version; });
  if (it == self_.holdings.end()) return;
  self_.holdings.erase(it);
  self_dirty_ = true;
}

void GossipCore::refute(TimePoint now, std::uint64_t accused_incarnation) {
  if (self_.leaving) return;
  self_.incarnation = std::max(self_.incarnation, accused_incarnation) + 1;
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
    p.sender = self_id();
    p.kind = PacketKind::kGossip;
    send_packet(m->record->record.gossip_addr, p, std::vector<OutgoingItem>{self_signed_});
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

void GossipCore::send_packet(const std::string& to, Packet packet, std::span<const OutgoingItem> must_include,
                             bool piggyback) {
  if (to.empty()) return;
  packet.sender = self_id();
  std::size_t budget = config_.max_datagram_bytes - kSealOverhead - kPacketHeaderBytes;
  std::vector<OutgoingItem> items(must_include.begin(), must_include.end());
  for (const auto& item : items) budget -= std::min(budget, encoded_item_size(item));
  if (piggyback) {
    for (auto& item : broadcasts_.take(budget, retransmit_limit())) items.push_back(std::move(item));
  }
  OutgoingDatagram d{to, sealer_.seal_packet(packet, items)};
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
// Incoming datagrams

void GossipCore::handle_datagram(TimePoint now, const std::string& from, std::span<const std::uint8_t> bytes) {
  note_input(now);
  ++stats_.datagrams_in;
  stats_.bytes_in += bytes.size();
  if (bytes.size() > config_.max_datagram_bytes) {
    ++stats_.dropped_oversized;
    return;
  }
  if (!rate_limiter_.allow(from, now)) {
    ++stats_.dropped_rate_limited;
    return;
  }
  Opened opened;
  switch (open_sealed(gossip_key_, /*stream=*/false, bytes, opened)) {
    case OpenError::kNone: break;
    case OpenError::kMalformed: ++stats_.dropped_malformed; return;
    default: ++stats_.dropped_unauthenticated; return;
  }
  if (opened.sender == self_id()) {
    ++stats_.dropped_misdirected;
    return;
  }
  // Anti-replay per sender; members keep their window in the member table.
  ReplayWindow* window = nullptr;
  if (Member* m = table_.find(opened.sender)) {
    window = &m->replay;
  } else {
    if (stranger_windows_.size() >= kMaxStrangerWindows) stranger_windows_.clear();
    window = &stranger_windows_[opened.sender];
  }
  if (!window->accept(opened.boot_id, opened.counter)) {
    ++stats_.dropped_replayed;
    return;
  }
  Packet packet;
  std::vector<IncomingItem> items;
  if (!decode_packet(opened.plaintext, packet, items).is_ok() || packet.sender != opened.sender) {
    ++stats_.dropped_malformed;
    return;
  }
  if (self_.leaving) return;  // a departing peer only talks
  std::vector<OutgoingItem> corrections;
  process_items(now, items, &corrections);
  if (!corrections.empty()) {
    // The sender spread news we know to be stale: send it the newer records
    // at once instead of letting it act on old beliefs (a false death).
    Packet correction;
    correction.kind = PacketKind::kGossip;
    send_packet(from, correction, corrections);
  }
  // A stranger that just became a member carries its window over.
  if (Member* m = table_.find(opened.sender); m != nullptr && window != &m->replay) {
    m->replay = *window;
    stranger_windows_.erase(opened.sender);
  }
  switch (packet.kind) {
    case PacketKind::kPing: on_ping(now, from, packet); break;
    case PacketKind::kAck: on_ack(now, packet); break;
    case PacketKind::kPingReq: on_ping_req(now, from, packet); break;
    case PacketKind::kNack: on_nack(packet); break;
    case PacketKind::kGossip: break;
  }
}

void GossipCore::process_items(TimePoint now, std::vector<IncomingItem>& items,
                               std::vector<OutgoingItem>* corrections) {
  for (auto& item : items) {
    if (auto* record = std::get_if<RecordBytes>(&item)) {
      process_record(now, *record, corrections);
    } else {
      process_liveness(now, std::get<LivenessItem>(item), corrections);
    }
  }
}

namespace {
void add_correction(std::vector<OutgoingItem>* corrections, const RecordPtr& record) {
  if (corrections == nullptr || corrections->size() >= 4) return;  // one datagram's worth
  for (const auto& item : *corrections) {
    if (const auto* r = std::get_if<RecordPtr>(&item); r && *r == record) return;
  }
  corrections->push_back(record);
}
}  // namespace

void GossipCore::process_record(TimePoint now, const RecordBytes& bytes, std::vector<OutgoingItem>* corrections) {
  const auto version = peek_record_version(bytes.bytes);
  if (!version) {
    ++stats_.records_rejected;
    return;
  }
  if (version->id == self_id()) {
    // Our own record echoed back is normal. One newer than ours comes from a
    // past life whose incarnation ran ahead of our clock: outbid it.
    const bool newer = version->incarnation != self_.incarnation ? version->incarnation > self_.incarnation
                                                                  : version->seq > self_.seq;
    if (newer && !self_.leaving) refute(now, version->incarnation);
    if (version->incarnation < self_.incarnation) add_correction(corrections, self_signed_);
    return;
  }
  if (!table_.is_news(*version)) {
    ++stats_.records_stale;
    if (const Member* m = table_.find(version->id);
        m != nullptr && m->is_live() && version->incarnation < m->record->record.incarnation) {
      add_correction(corrections, m->record);
    }
    return;
  }
  auto record = decoder_->decode(bytes.bytes);
  if (!record) {
    ++stats_.records_rejected;
    return;
  }
  ++stats_.records_accepted;
  const PeerRecord& r = (*record)->record;
  switch (table_.apply_record(*record, now)) {
    case RecordOutcome::kStale:
    case RecordOutcome::kFull:
      return;
    case RecordOutcome::kJoined: {
      emit(MemberEventKind::kJoined, r.id, *record, r.incarnation);
      // A random place in the probe order, so newcomers are probed soon.
      const std::size_t at = probe_order_.empty() ? 0 : rng_.below(probe_order_.size() + 1);
      probe_order_.insert(probe_order_.begin() + static_cast<std::ptrdiff_t>(at), r.id);
      break;
    }
    case RecordOutcome::kUpdated: emit(MemberEventKind::kUpdated, r.id, *record, r.incarnation); break;
    case RecordOutcome::kAliveAgain: {
      emit(MemberEventKind::kAlive, r.id, *record, r.incarnation);
      if (std::find(probe_order_.begin(), probe_order_.end(), r.id) == probe_order_.end()) {
        probe_order_.push_back(r.id);
      }
      break;
    }
    case RecordOutcome::kLeft: emit(MemberEventKind::kLeft, r.id, *record, r.incarnation); break;
  }
  broadcasts_.enqueue(*record);  // news spreads further
  if (note_heads(r.heads)) {
    eager_round_due_ = true;
    head_news_ = *record;
  }
}

void GossipCore::preload(TimePoint now, std::span<const RecordPtr> records) {
  for (const RecordPtr& record : records) {
    const PeerRecord& r = record->record;
    if (r.id == self_id() || !table_.is_news(RecordVersion{r.id, r.incarnation, r.seq})) continue;
    if (table_.apply_record(record, now) == RecordOutcome::kJoined) probe_order_.push_back(r.id);
  }
  for (std::size_t i = probe_order_.size(); i > 1; --i) std::swap(probe_order_[i - 1], probe_order_[rng_.below(i)]);
}

void GossipCore::process_liveness(TimePoint now, const LivenessItem& item, std::vector<OutgoingItem>* corrections) {
  if (item.target == self_id()) {
    if (item.incarnation >= self_.incarnation) {
      refute(now, item.incarnation);
    } else {
      add_correction(corrections, self_signed_);
    }
    return;
  }
  const Member* m = table_.find(item.target);
  if (m != nullptr && m->is_live() && item.incarnation < m->incarnation) {
    add_correction(corrections, m->record);  // the accuser has not seen the refutation
    return;
  }
  switch (table_.apply_liveness(item, now, suspicion_timeouts())) {
    case LivenessOutcome::kIgnored: return;
    case LivenessOutcome::kSuspected: emit(MemberEventKind::kSuspect, item.target, m->record, item.incarnation); break;
    case LivenessOutcome::kConfirmed: break;
    case LivenessOutcome::kDead: emit(MemberEventKind::kDead, item.target, m->record, item.incarnation); break;
  }
  broadcasts_.enqueue(item);
}

void GossipCore::on_ping(TimePoint, const std::string& from, const Packet& packet) {
  if (packet.target && *packet.target != self_id()) {
    ++stats_.dropped_misdirected;  // meant for whoever had this address before
    return;
  }
  Packet ack;
  ack.kind = PacketKind::kAck;
  ack.probe_seq = packet.probe_seq;
  send_packet(from, ack);
}

void GossipCore::on_ack(TimePoint, const Packet& packet) {
  if (probe_ && probe_->seq == packet.probe_seq) {
    probe_->acked = true;
    return;
  }
  auto relay = relays_.find(packet.probe_seq);
  if (relay != relays_.end()) {
    Packet forward;
    forward.kind = PacketKind::kAck;
    forward.probe_seq = relay->second.requester_seq;
    send_packet(relay->second.requester, forward);
    relays_.erase(relay);
  }
}

void GossipCore::on_ping_req(TimePoint now, const std::string& from, const Packet& packet) {
  if (!packet.target || packet.target_addr.empty() || *packet.target == self_id()) return;
  const std::uint32_t seq = ++next_seq_;
  relays_[seq] = Relay{from, packet.probe_seq, now + scaled(config_.probe_timeout)};
  Packet ping;
  ping.kind = PacketKind::kPing;
  ping.probe_seq = seq;
  ping.target = packet.target;
  send_packet(packet.target_addr, ping);
}

void GossipCore::on_nack(const Packet& packet) {
  if (probe_ && probe_->seq == packet.probe_seq) ++probe_->nacks;
}

// --------------------------------------------------------------------------
// Timers

TimePoint GossipCore::next_timeout() const {
  TimePoint t = std::min({next_gossip_at_, next_push_pull_at_, next_reconnect_at_, next_reap_at_});
  if (!seeds_.empty() && table_.live_count() == 0 && !self_.leaving) t = std::min(t, next_join_at_);
  if (!self_.leaving) t = std::min(t, next_probe_at_);
  if (probe_) t = std::min(t, probe_->indirect_sent || probe_->acked ? probe_->deadline : probe_->indirect_at);
  if (self_dirty_) t = std::min(t, head_changed_ ? last_input_ : last_signed_ + config_.min_resign_interval);
  if (eager_round_due_) t = std::min(t, last_input_);  // due now
  for (const auto& [seq, relay] : relays_) t = std::min(t, relay.nack_at);
  for (const auto& [id, stream] : streams_) t = std::min(t, stream.deadline);
  for (const PeerId& id : table_.suspects()) {
    const Member* m = table_.find(id);
    if (m->suspicion) t = std::min(t, std::max(m->suspicion->deadline(), caught_up_at_));
  }
  return t;
}

void GossipCore::handle_timeout(TimePoint now) {
  note_input(now);
  resign_if_due(now);
  if (probe_ && !probe_->indirect_sent && now >= probe_->indirect_at && !probe_->acked) {
    // Lifeguard: ask k others to probe, and expect their nacks if they fail.
    probe_->indirect_sent = true;
    const Member* target = table_.find(probe_->target);
    if (target != nullptr) {
      const PeerId target_id = probe_->target;
      for (const Member* m : sample(table_.live(), static_cast<std::size_t>(config_.indirect_checks),
                                    [&](const Member& c) { return c.liveness != Liveness::kAlive || c.id() == target_id; })) {
        Packet req;
        req.kind = PacketKind::kPingReq;
        req.probe_seq = probe_->seq;
        req.target = target_id;
        req.target_addr = target->record->record.gossip_addr;
        send_packet(m->record->record.gossip_addr, req);
        ++probe_->expected_nacks;
      }
      if (config_.tcp_fallback_probe) open_probe_stream(now, target->record->record.gossip_addr, probe_->seq);
    }
  }
  if (probe_ && now >= probe_->deadline) finish_probe(now);
  if (!self_.leaving && now >= next_probe_at_) {
    if (probe_) finish_probe(now);
    run_probe(now);
    next_probe_at_ = now + scaled(config_.probe_interval);
  }
  if (now >= next_gossip_at_) {
    run_gossip(now);
    next_gossip_at_ = now + config_.gossip_interval;
  } else if (eager_round_due_) {
    // An extra round, to twice the fanout: each peer pushes a new head once,
    // and with fanout f about e^-f of the swarm is missed by every push and
    // waits for a regular round (5% at f = 3, 0.25% at 6). The regular
    // rounds keep their pace.
    run_gossip(now, static_cast<std::size_t>(config_.gossip_fanout) * 2);
  }
  if (head_news_) push_to_host_mates(*head_news_);
  head_news_.reset();
  eager_round_due_ = false;
  if (now >= next_push_pull_at_) {
    if (!self_.leaving) run_push_pull(now);
    next_push_pull_at_ = now + push_pull_interval();
  }
  if (!seeds_.empty() && table_.live_count() == 0 && !self_.leaving && now >= next_join_at_) {
    for (const std::string& seed : seeds_) open_sync(now, seed);
    join_backoff_ = std::min(join_backoff_ * 2, config_.join_retry_interval * 10);
    next_join_at_ = now + join_backoff_;
  }
  if (now >= next_reconnect_at_) {
    if (!self_.leaving) run_reconnect(now);
    next_reconnect_at_ = now + config_.reconnect_interval;
  }
  check_suspicions(now);
  check_relays(now);
  check_streams(now);
  if (now >= next_reap_at_) {
    for (const PeerId& id : table_.expire_tombstones(now, config_.tombstone_ttl)) {
      emit(MemberEventKind::kRemoved, id, nullptr, 0);
    }
    next_reap_at_ = now + config_.probe_interval * 10;
  }
}

std::optional<PeerId> GossipCore::next_probe_target(TimePoint now) {
  // A suspect we have not probed lately goes first: the probe tells it of the
  // suspicion (so it refutes), and its answer brings us any refutation we
  // missed, before our own suspicion timer declares it dead.
  for (const PeerId& id : table_.suspects()) {
    const Member* m = table_.find(id);
    if (now - m->last_probed >= scaled(config_.probe_interval) * 2) return id;
  }
  for (std::size_t attempts = 0; attempts <= probe_order_.size(); ++attempts) {
    if (probe_index_ >= probe_order_.size()) {
      // Start a new round: drop the gone, reshuffle (memberlist does the same).
      std::erase_if(probe_order_, [&](const PeerId& id) {
        const Member* m = table_.find(id);
        return m == nullptr || !m->is_live();
      });
      for (std::size_t i = probe_order_.size(); i > 1; --i) {
        std::swap(probe_order_[i - 1], probe_order_[rng_.below(i)]);
      }
      probe_index_ = 0;
      if (probe_order_.empty()) return std::nullopt;
    }
    const PeerId id = probe_order_[probe_index_++];
    const Member* m = table_.find(id);
    if (m != nullptr && m->is_live()) return id;
  }
  return std::nullopt;
}

void GossipCore::run_probe(TimePoint now) {
  const auto target = next_probe_target(now);
  if (!target) return;
  Member* m = table_.find(*target);
  m->last_probed = now;
  Probe p;
  p.seq = ++next_seq_;
  p.target = *target;
  p.started = now;
  p.indirect_at = now + scaled(config_.probe_timeout);
  p.deadline = now + scaled(config_.probe_interval);
  Packet ping;
  ping.kind = PacketKind::kPing;
  ping.probe_seq = p.seq;
  ping.target = *target;
  // Lifeguard's buddy system: tell a suspect about its suspicion first.
  std::vector<OutgoingItem> first;
  if (m->liveness == Liveness::kSuspect) first.push_back(LivenessItem{Liveness::kSuspect, *target, m->incarnation, self_id()});
  ++stats_.probes;
  probe_ = p;
  send_packet(m->record->record.gossip_addr, ping, first);
}

void GossipCore::finish_probe(TimePoint now) {
  const Probe p = *probe_;
  probe_.reset();
  if (p.acked) {
    adjust_awareness(-1);
    return;
  }
  ++stats_.probes_failed;
  // Lifeguard: missing nacks mean our own network path may be the problem.
  adjust_awareness(p.expected_nacks > 0 ? std::max(0, p.expected_nacks - p.nacks) : 1);
  if (now < caught_up_at_) return;  // we were paused: the silence may be ours
  const Member* m = table_.find(p.target);
  if (m == nullptr || !m->is_live()) return;
  const LivenessItem suspect{Liveness::kSuspect, p.target, m->incarnation, self_id()};
  ++stats_.suspicions;
  process_liveness(now, suspect, nullptr);
}

void GossipCore::run_gossip(TimePoint now, std::size_t fanout) {
  if (broadcasts_.empty()) return;
  auto targets = sample(table_.live(), fanout != 0 ? fanout : static_cast<std::size_t>(config_.gossip_fanout));
  // Now and then a recently dead member is among them (as memberlist's
  // GossipToTheDead): if it is alive after all, it learns and refutes.
  if (!table_.dead().empty() && !targets.empty() &&
      rng_.below(table_.live().size() + table_.dead().size()) < table_.dead().size()) {
    const Member* dead = table_.find(table_.dead().at(rng_.below(table_.dead().size())));
    if (now - dead->since < config_.gossip_to_dead) targets[rng_.below(targets.size())] = dead;
  }
  for (const Member* m : targets) {
    if (broadcasts_.empty()) break;
    Packet p;
    p.kind = PacketKind::kGossip;
    send_packet(m->record->record.gossip_addr, p);
    if (self_.leaving) ++leave_sends_;
  }
}

void GossipCore::push_to_host_mates(const RecordPtr& news) {
  if (self_.topology.host.empty()) return;
  // A walk over the members, once per new head: little next to fetching
  // the head, and no index to keep as records change their labels.
  const OutgoingItem item = news;
  for (std::size_t i = 0; i < table_.live().size(); ++i) {
    const Member* m = table_.find(table_.live().at(i));
    const PeerRecord& r = m->record->record;
    if (r.topology != self_.topology || r.id == news->record.id) continue;
    Packet p;
    p.kind = PacketKind::kGossip;
    send_packet(r.gossip_addr, p, std::span<const OutgoingItem>(&item, 1), /*piggyback=*/false);
  }
}

void GossipCore::check_suspicions(TimePoint now) {
  std::vector<PeerId> expired;
  for (const PeerId& id : table_.suspects()) {
    Member* m = table_.find(id);
    const bool catching_up = now < caught_up_at_;
    if (m->suspicion && now >= m->suspicion->deadline() && !catching_up) {
      expired.push_back(id);
      continue;
    }
    // After a pause, read what arrived meanwhile before declaring anyone dead,
    // and ask again at once: what we missed comes back as corrections.
    const bool reminded_since_pause = m->last_reminded >= caught_up_at_ - config_.probe_interval;
    if (now - m->last_reminded >= config_.probe_interval * 2 || (catching_up && !reminded_since_pause)) {
      // Spread the suspicion again: whoever has seen a refutation answers
      // with it (a correction), which we may have missed, e.g. during a pause.
      m->last_reminded = now;
      broadcasts_.enqueue(LivenessItem{Liveness::kSuspect, id, m->incarnation, self_id()});
    }
  }
  for (const PeerId& id : expired) {
    const Member* m = table_.find(id);
    const LivenessItem dead{Liveness::kDead, id, m->incarnation, self_id()};
    ++stats_.deaths_declared;
    process_liveness(now, dead, nullptr);
  }
}

void GossipCore::check_relays(TimePoint now) {
  for (auto it = relays_.begin(); it != relays_.end();) {
    if (now >= it->second.nack_at) {
      Packet nack;
      nack.kind = PacketKind::kNack;
      nack.probe_seq = it->second.requester_seq;
      send_packet(it->second.requester, nack);
      it = relays_.erase(it);
    } else {
      ++it;
    }
  }
}

std::vector<const Member*> GossipCore::sample(const IdSet& from, std::size_t count,
                                              const std::function<bool(const Member&)>& skip) {
  std::vector<const Member*> chosen;
  if (count == 0 || from.empty()) return chosen;
  auto consider = [&](const PeerId& id) {
    const Member* m = table_.find(id);
    if (skip && skip(*m)) return;
    if (std::find(chosen.begin(), chosen.end(), m) == chosen.end()) chosen.push_back(m);
  };
  if (from.size() <= count * 4) {
    // Small sets: a partial Fisher-Yates shuffle of the indices, so that
    // every subset is equally likely (a rotation would always pick
    // neighbours in insertion order together).
    std::vector<std::size_t> order(from.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    for (std::size_t i = 0; i < order.size() && chosen.size() < count; ++i) {
      std::swap(order[i], order[i + rng_.below(order.size() - i)]);
      consider(from.at(order[i]));
    }
    return chosen;
  }
  // Large sets: draw with rejection; a few extra tries cover skips and repeats.
  for (std::size_t tries = 0; tries < count * 8 && chosen.size() < count; ++tries) {
    consider(from.at(rng_.below(from.size())));
  }
  return chosen;
}

// --------------------------------------------------------------------------
// Push-pull

void GossipCore::join(TimePoint now, std::span<const std::string> seeds) {
  for (const std::string& seed : seeds) {
    if (seed == self_.gossip_addr) continue;
    if (std::find(seeds_.begin(), seeds_.end(), seed) == seeds_.end()) seeds_.push_back(seed);
    open_sync(now, seed);
  }
  join_backoff_ = config_.join_retry_interval;
  next_join_at_ = now + join_backoff_;
}

void GossipCore::run_push_pull(TimePoint now) {
  auto chosen = sample(table_.live(), 1, [](const Member& m) { return m.liveness != Liveness::kAlive; });
  if (!chosen.empty()) open_sync(now, chosen.front()->record->record.gossip_addr);
}

void GossipCore::run_reconnect(TimePoint now) {
  // A peer declared dead may be alive behind a healed partition: an exchange
  // with it lets whichever side is wrong learn the truth (it refutes, or we
  // learn of its death).
  auto chosen = sample(table_.dead(), 1);
  if (!chosen.empty()) open_sync(now, chosen.front()->record->record.gossip_addr);
}

std::vector<DigestEntry> GossipCore::full_digest() const {
  std::vector<DigestEntry> digest = table_.digest();
  digest.push_back(DigestEntry{self_id(), self_.incarnation, self_.seq,
                               self_.leaving ? Liveness::kLeft : Liveness::kAlive, self_.incarnation});
  return digest;
}

void GossipCore::open_sync(TimePoint now, const std::string& to) {
  const StreamId id = next_stream_id_++;
  streams_[id] = Stream{StreamPhase::kAwaitResponse, now + config_.stream_timeout, to};
  StreamAction open;
  open.kind = StreamAction::Kind::kOpen;
  open.id = id;
  open.to = to;
  open.frame = sealer_.seal_stream(StreamKind::kSyncRequest, encode_sync_request(full_digest()));
  stats_.stream_bytes_out += open.frame.size();
  ++stats_.streams_opened;
  stream_actions_.push(std::move(open));
}

void GossipCore::open_probe_stream(TimePoint now, const std::string& to, std::uint32_t seq) {
  const StreamId id = next_stream_id_++;
  // Answered within the probe, or it does not count.
  streams_[id] = Stream{StreamPhase::kAwaitProbeAck, now + scaled(config_.probe_interval), to, seq};
  StreamAction open;
  open.kind = StreamAction::Kind::kOpen;
  open.id = id;
  open.to = to;
  open.frame = sealer_.seal_stream(StreamKind::kProbe, encode_stream_probe(seq));
  stats_.stream_bytes_out += open.frame.size();
  stream_actions_.push(std::move(open));
}

std::vector<OutgoingItem> GossipCore::items_about(const PeerId& id) const {
  std::vector<OutgoingItem> items;
  if (id == self_id()) {
    items.push_back(self_signed_);
    return items;
  }
  const Member* m = table_.find(id);
  if (m == nullptr) return items;
  items.push_back(m->record);
  if (m->liveness == Liveness::kSuspect || m->liveness == Liveness::kDead) {
    items.push_back(LivenessItem{m->liveness, id, m->incarnation, self_id()});
  }
  return items;
}

void GossipCore::answer_sync(TimePoint now, StreamId id, const SyncRequest& request) {
  std::vector<OutgoingItem> items;
  std::vector<PeerId> wants;
  std::unordered_map<PeerId, const DigestEntry*> theirs;
  theirs.reserve(request.digest.size());
  for (const DigestEntry& e : request.digest) theirs.emplace(e.id, &e);
  // The requester believes we are suspect or dead: refute before answering,
  // so our answer carries the record that proves otherwise.
  if (auto it = theirs.find(self_id()); it != theirs.end() &&
      (it->second->liveness == Liveness::kSuspect || it->second->liveness == Liveness::kDead) &&
      it->second->liveness_incarnation >= self_.incarnation) {
    refute(now, it->second->liveness_incarnation);
  }

  auto offer = [&](const PeerId& member_id, const PeerRecord& ours, Liveness liveness, std::uint64_t liveness_inc,
                   const RecordPtr& record) {
    auto it = theirs.find(member_id);
    const DigestEntry* e = it == theirs.end() ? nullptr : it->second;
    const bool record_newer = e == nullptr || (ours.incarnation != e->record_incarnation
                                                   ? ours.incarnation > e->record_incarnation
                                                   : ours.seq > e->record_seq);
    if (record_newer) items.push_back(record);
    if ((liveness == Liveness::kSuspect || liveness == Liveness::kDead) &&
        (e == nullptr || liveness_dominates(liveness, liveness_inc, e->liveness, e->liveness_incarnation))) {
      items.push_back(LivenessItem{liveness, member_id, liveness_inc, self_id()});
    }
  };
  offer(self_id(), self_, Liveness::kAlive, self_.incarnation, self_signed_);
  table_.for_each([&](const Member& m) {
    offer(m.id(), m.record->record, m.liveness, m.incarnation, m.record);
  });
  for (const DigestEntry& e : request.digest) {
    if (e.id == self_id()) continue;
    const Member* m = table_.find(e.id);
    if (m == nullptr) {
      wants.push_back(e.id);
      continue;
    }
    const PeerRecord& ours = m->record->record;
    const bool theirs_newer = e.record_incarnation != ours.incarnation ? e.record_incarnation > ours.incarnation
                                                                      : e.record_seq > ours.seq;
    if (theirs_newer || liveness_dominates(e.liveness, e.liveness_incarnation, m->liveness, m->incarnation)) {
      wants.push_back(e.id);
    }
  }
  StreamAction send;
  send.kind = StreamAction::Kind::kSend;
  send.id = id;
  send.frame = sealer_.seal_stream(StreamKind::kSyncResponse, encode_sync_response(items, wants));
  stats_.stream_bytes_out += send.frame.size();
  stream_actions_.push(std::move(send));
  streams_[id].phase = StreamPhase::kAwaitRecords;
  streams_[id].deadline = now + config_.stream_timeout;
}

void GossipCore::handle_stream_accepted(TimePoint now, StreamId id, const std::string& from) {
  note_input(now);
  ++stats_.streams_accepted;
  if (self_.leaving) {
    stream_actions_.push(StreamAction{StreamAction::Kind::kClose, id, {}, {}});
    return;
  }
  streams_[id] = Stream{StreamPhase::kAwaitRequest, now + config_.stream_timeout, from};
}

void GossipCore::handle_stream_frame(TimePoint now, StreamId id, std::span<const std::uint8_t> frame) {
  note_input(now);
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  stats_.stream_bytes_in += frame.size();
  Opened opened;
  PeerId sender;
  StreamBody body;
  if (frame.size() > config_.max_stream_message_bytes ||
      open_sealed(gossip_key_, /*stream=*/true, frame, opened) != OpenError::kNone ||
      !decode_stream(opened.plaintext, sender, body, config_.max_members).is_ok() || sender != opened.sender ||
      sender == self_id()) {
    ++stats_.streams_failed;
    close_stream(id);
    return;
  }
  switch (it->second.phase) {
    case StreamPhase::kAwaitRequest: {
      if (const auto* probe = std::get_if<StreamProbe>(&body); probe != nullptr && !probe->ack) {
        StreamAction send;
        send.kind = StreamAction::Kind::kSend;
        send.id = id;
        send.frame = sealer_.seal_stream(StreamKind::kProbeAck, encode_stream_probe(probe->seq));
        stats_.stream_bytes_out += send.frame.size();
        stream_actions_.push(std::move(send));
        close_stream(id);
        return;
      }
      const auto* request = std::get_if<SyncRequest>(&body);
      if (request == nullptr) break;
      answer_sync(now, id, *request);
      return;
    }
    case StreamPhase::kAwaitProbeAck: {
      const auto* ack = std::get_if<StreamProbe>(&body);
      if (ack == nullptr || !ack->ack || ack->seq != it->second.probe_seq) break;
      if (probe_ && probe_->seq == ack->seq) probe_->acked = true;
      close_stream(id);
      return;
    }
    case StreamPhase::kAwaitResponse: {
      auto* response = std::get_if<SyncResponse>(&body);
      if (response == nullptr) break;
      const std::uint64_t incarnation_before = self_.incarnation;
      process_items(now, response->items, nullptr);
      std::vector<OutgoingItem> items;
      // The responder thought us dead and we refuted: show it the proof.
      if (self_.incarnation != incarnation_before) items.push_back(self_signed_);
      for (const PeerId& want : response->wants) {
        for (auto& item : items_about(want)) items.push_back(std::move(item));
      }
      StreamAction send;
      send.kind = StreamAction::Kind::kSend;
      send.id = id;
      send.frame = sealer_.seal_stream(StreamKind::kSyncRecords, encode_sync_records(items));
      stats_.stream_bytes_out += send.frame.size();
      stream_actions_.push(std::move(send));
      close_stream(id);
      return;
    }
    case StreamPhase::kAwaitRecords: {
      auto* records = std::get_if<SyncRecords>(&body);
      if (records == nullptr) break;
      process_items(now, records->items, nullptr);
      close_stream(id);
      return;
    }
  }
  ++stats_.streams_failed;  // a message out of turn
  close_stream(id);
}

void GossipCore::handle_stream_closed(TimePoint, StreamId id) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  ++stats_.streams_failed;  // closed before the exchange finished
  streams_.erase(it);
}

void GossipCore::close_stream(StreamId id) {
  streams_.erase(id);
  stream_actions_.push(StreamAction{StreamAction::Kind::kClose, id, {}, {}});
}

void GossipCore::check_streams(TimePoint now) {
  std::vector<StreamId> expired;
  for (const auto& [id, stream] : streams_) {
    if (now >= stream.deadline) expired.push_back(id);
  }
  for (StreamId id : expired) {
    ++stats_.streams_failed;
    close_stream(id);
  }
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
  vv.merge(self_.heads);
  table_.for_each([&](const Member& m) {
    if (m.is_live()) vv.merge(m.record->record.heads);
  });
  return vv;
}

}  // namespace tensorhub::gossip
