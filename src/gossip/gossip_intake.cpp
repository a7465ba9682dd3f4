// GossipCore's intake: datagrams opened (rate limit, AEAD, sender tag, replay
// window), records and liveness claims merged, pings, acks and nacks answered.
#include "gossip/gossip_core.hpp"

#include <algorithm>
#include <cmath>

namespace tensorhub::gossip {
namespace {

constexpr std::size_t kMaxStrangerWindows = 4096;
// Suspicions one accuser may start at once, beyond its one a probe interval.
constexpr int kAccusationBurst = 4;

}  // namespace

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
  switch (open_datagram(gossip_key_, bytes, opened)) {
    case OpenError::kNone: break;
    case OpenError::kMalformed: ++stats_.dropped_malformed; return;
    default: ++stats_.dropped_unauthenticated; return;
  }
  if (opened.sender == self_id()) {
    ++stats_.dropped_misdirected;
    return;
  }
  if (!admits(opened.sender)) {
    ++stats_.not_admitted;
    return;
  }
  // The swarm key proves a member sealed it; the sender tag proves which one
  // (and that it was meant for us). Checked before the replay window moves,
  // so nobody can advance another's window.
  const PairKey* pair_key = pair_keys_.key_for(opened.sender);
  stats_.pair_keys_derived = pair_keys_.derivations();
  if (pair_key == nullptr || !datagram_sender_proved(*pair_key, bytes)) {
    ++stats_.dropped_forged_sender;
    return;
  }
  Packet packet;
  std::vector<IncomingItem> items;
  if (!decode_packet(opened.plaintext, packet, items).is_ok() || packet.sender != opened.sender) {
    ++stats_.dropped_malformed;
    return;
  }
  // Anti-replay per sender, in the boot its newest signed record names;
  // members keep their window in the member table.
  ReplayWindow* window = nullptr;
  Member* member = table_.find(opened.sender);
  if (Member* m = member) {
    window = &m->replay;
    const std::uint64_t boot = m->record->record.boot;
    if (!window->used() || window->boot_id() != boot) window->restart(boot);
  } else {
    if (stranger_windows_.size() >= kMaxStrangerWindows) stranger_windows_.clear();
    window = &stranger_windows_[opened.sender];
  }
  if (!window->accept(opened.boot_id, opened.counter)) {
    // Another boot is the sender's new life when the datagram carries the
    // sender's own record naming it, signed and newer than any we hold; a
    // past life's datagrams carry its older records and stay replays.
    if (opened.boot_id == window->boot_id() || !proves_new_boot(opened, items)) {
      ++stats_.dropped_replayed;
      // A life of this identity that has not heard of its newest record (a
      // restart whose clock went back, or a twin) is told, once a probe
      // interval, so it outbids that record instead of talking unheard.
      if (member != nullptr && opened.boot_id != window->boot_id() &&
          now - member->last_boot_correction >= config_.probe_interval) {
        member->last_boot_correction = now;
        Packet correction;
        correction.kind = PacketKind::kGossip;
        send_packet(opened.sender, from, correction, std::vector<OutgoingItem>{member->record});
      }
      return;
    }
    window->restart(opened.boot_id);
    window->accept(opened.boot_id, opened.counter);
  }
  if (self_.leaving) return;  // a departing peer only talks
  std::vector<OutgoingItem> corrections;
  process_items(now, items, &corrections);
  if (!corrections.empty()) {
    // The sender spread news we know to be stale: send it the newer records
    // at once instead of letting it act on old beliefs (a false death).
    Packet correction;
    correction.kind = PacketKind::kGossip;
    send_packet(opened.sender, from, correction, corrections);
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

bool GossipCore::proves_new_boot(const Opened& opened, const std::vector<IncomingItem>& items) {
  for (const auto& item : items) {
    const auto* bytes = std::get_if<RecordBytes>(&item);
    if (bytes == nullptr) continue;
    const auto version = peek_record_version(bytes->bytes);
    if (version && version->id == opened.sender && version->boot == opened.boot_id && table_.is_news(*version) &&
        decoder_->decode(bytes->bytes).is_ok()) {
      return true;
    }
  }
  return false;
}

void GossipCore::process_items(TimePoint now, std::vector<IncomingItem>& items,
                               std::vector<OutgoingItem>* corrections) {
  // Records first: a claim counts only when its accuser is a known member.
  for (auto& item : items) {
    if (auto* record = std::get_if<RecordBytes>(&item)) process_record(now, *record, corrections);
  }
  for (auto& item : items) {
    if (auto* liveness = std::get_if<LivenessItem>(&item)) process_liveness(now, *liveness, corrections);
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
    // past life whose incarnation ran ahead of our clock: outbid it, once
    // its signature proves it ours (bytes that merely peek as our id, at an
    // incarnation an attacker picks, change nothing).
    const bool newer = version->incarnation != self_.incarnation ? version->incarnation > self_.incarnation
                                                                  : version->seq > self_.seq;
    if (newer && !self_.leaving) {
      if (auto record = decoder_->decode(bytes.bytes)) {
        outbid_other_life(now, *version, *record);
      } else {
        ++stats_.records_rejected;
        add_correction(corrections, self_signed_);
      }
    }
    if (version->incarnation < self_.incarnation) add_correction(corrections, self_signed_);
    return;
  }
  if (!admits(version->id)) {
    ++stats_.not_admitted;
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

void GossipCore::outbid_other_life(TimePoint now, const RecordVersion& version, const RecordPtr& record) {
  refute(now, version.incarnation);
  if (version.boot == self_.boot) return;
  // A past life's records stop at the incarnation it reached, so it is
  // outbid once (or twice, when its newest record comes late). A life that
  // signs above us a third time is running now.
  int& times = outbid_boots_[version.boot];
  if (++times == 3) {
    ++stats_.identity_conflicts;
    emit(MemberEventKind::kIdentityConflict, self_id(), record, version.incarnation);
  }
  if (outbid_boots_.size() > 16) outbid_boots_.erase(outbid_boots_.begin());
}

void GossipCore::set_admitted(std::shared_ptr<const AdmissionList> admitted) {
  admitted_ = std::move(admitted);
  if (admitted_ == nullptr) return;
  if (probe_ && !admits(probe_->target)) probe_.reset();
  std::vector<PeerId> gone;
  table_.for_each([&](const Member& m) {
    if (!admits(m.id())) gone.push_back(m.id());
  });
  for (const PeerId& id : gone) {
    table_.remove(id);
    std::erase(probe_order_, id);
    emit(MemberEventKind::kRemoved, id, nullptr, 0);
  }
  std::erase_if(stranger_windows_, [&](const auto& entry) { return !admits(entry.first); });
}

void GossipCore::preload(TimePoint now, std::span<const RecordPtr> records) {
  for (const RecordPtr& record : records) {
    const PeerRecord& r = record->record;
    if (r.id == self_id() || !admits(r.id) || !table_.is_news(RecordVersion{r.id, r.incarnation, r.seq})) continue;
    if (table_.apply_record(record, now) == RecordOutcome::kJoined) probe_order_.push_back(r.id);
  }
  for (std::size_t i = probe_order_.size(); i > 1; --i) std::swap(probe_order_[i - 1], probe_order_[rng_.below(i)]);
}

bool GossipCore::liveness_is_news(const LivenessItem& item) const {
  const Member* m = table_.find(item.target);
  if (m == nullptr || !m->is_live() || item.incarnation < m->incarnation) return false;
  if (item.incarnation > m->incarnation || m->liveness == Liveness::kAlive || !m->suspicion) return true;
  return !m->suspicion->has_accuser(item.from) && !m->suspicion->at_floor();
}

void GossipCore::process_liveness(TimePoint now, const LivenessItem& item, std::vector<OutgoingItem>* corrections) {
  if (item.target == self_id()) {
    // A claim at our own incarnation is refuted. One above it names an
    // incarnation we never signed (a past life's would come as its signed
    // record): forged, answered with our record.
    if (item.incarnation == self_.incarnation) {
      if (verify_liveness(item)) {
        refute(now, item.incarnation);
      } else {
        ++stats_.liveness_unsigned;
      }
    } else {
      if (item.incarnation > self_.incarnation) ++stats_.liveness_forged;
      add_correction(corrections, self_signed_);
    }
    return;
  }
  const Member* m = table_.find(item.target);
  if (m != nullptr && m->record && item.incarnation > m->record->record.incarnation) {
    // Above every incarnation the target signed: no honest peer can have
    // seen it (a claim never raises an incarnation; only signed records do).
    ++stats_.liveness_forged;
    add_correction(corrections, m->record);
    return;
  }
  if (m != nullptr && m->is_live() && item.incarnation < m->incarnation) {
    add_correction(corrections, m->record);  // the accuser has not seen the refutation
    return;
  }
  if (!liveness_is_news(item)) return;
  // Only a live member (or we) can accuse, once per suspicion, under its own
  // signature: a member cannot add accusers, and cannot speak for others.
  if (item.from != self_id()) {
    Member* accuser = table_.find(item.from);
    if (accuser == nullptr || !accuser->is_live() || !verify_liveness(item)) {
      ++stats_.liveness_unsigned;
      return;
    }
    // A claim that starts a suspicion spends the accuser's allowance: an
    // honest peer probes one member a probe interval, so it can start at
    // most that many; a member accusing faster is ignored (GCRA).
    const Member* target = table_.find(item.target);
    if (target->liveness == Liveness::kAlive || item.incarnation > target->incarnation) {
      const TimePoint tat = std::max(accuser->accusations_tat, now);
      if (tat - now > config_.probe_interval * kAccusationBurst) {
        ++stats_.liveness_rate_limited;
        return;
      }
      accuser->accusations_tat = tat + config_.probe_interval;
    }
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
  send_packet(packet.sender, from, ack);
}

void GossipCore::on_ack(TimePoint, const Packet& packet) {
  // Senders are proved (pair keys): an ack counts only from the target
  // itself or from a relay we asked, never from a member speaking for a
  // crashed peer.
  if (probe_ && probe_->seq == packet.probe_seq) {
    if (packet.sender == probe_->target ||
        std::find(probe_->relays.begin(), probe_->relays.end(), packet.sender) != probe_->relays.end()) {
      probe_->acked = true;
    } else {
      ++stats_.acks_unasked;
    }
    return;
  }
  auto relay = relays_.find(packet.probe_seq);
  if (relay == relays_.end()) return;
  if (packet.sender != relay->second.target) {
    ++stats_.acks_unasked;
    return;
  }
  Packet forward;
  forward.kind = PacketKind::kAck;
  forward.probe_seq = relay->second.requester_seq;
  send_packet(relay->second.requester, relay->second.requester_addr, forward);
  relays_.erase(relay);
}

void GossipCore::on_ping_req(TimePoint now, const std::string& from, const Packet& packet) {
  if (!packet.target || packet.target_addr.empty() || *packet.target == self_id()) return;
  const std::uint32_t seq = next_probe_seq();
  relays_[seq] = Relay{packet.sender, from, packet.probe_seq, *packet.target, now + scaled(config_.probe_timeout)};
  Packet ping;
  ping.kind = PacketKind::kPing;
  ping.probe_seq = seq;
  ping.target = packet.target;
  // To the address the target signed, when we know it: the asker cannot
  // point our ping elsewhere.
  const Member* target = table_.find(*packet.target);
  send_packet(*packet.target, target && target->record ? target->record->record.gossip_addr : packet.target_addr,
              ping);
}

void GossipCore::on_nack(const Packet& packet) {
  if (!probe_ || probe_->seq != packet.probe_seq) return;
  auto& waiting = probe_->awaiting_nacks;
  auto it = std::find(waiting.begin(), waiting.end(), packet.sender);
  if (it == waiting.end()) {
    ++stats_.acks_unasked;
    return;
  }
  waiting.erase(it);
  ++probe_->nacks;
}

}  // namespace tensorhub::gossip
