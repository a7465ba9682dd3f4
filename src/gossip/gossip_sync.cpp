// GossipCore's anti-entropy: joins, push-pull over streams with
// Scuttlebutt digests, reconnects with the dead.
#include "gossip/gossip_core.hpp"

#include <algorithm>
#include <cmath>

namespace tensorhub::gossip {

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
  streams_[id] = Stream{StreamPhase::kAwaitResponse, now + config_.stream_timeout, to, 0, {}};
  StreamAction open;
  open.kind = StreamAction::Kind::kOpen;
  open.id = id;
  open.to = to;
  open.frame = sealer_.seal_stream(StreamKind::kSyncRequest, encode_sync_request(full_digest()));
  stats_.stream_bytes_out += open.frame.size();
  ++stats_.streams_opened;
  stream_actions_.push(std::move(open));
}

void GossipCore::open_probe_stream(TimePoint now, const std::string& to, std::uint32_t seq, const PeerId& target) {
  const StreamId id = next_stream_id_++;
  // Answered within the probe, or it does not count.
  streams_[id] = Stream{StreamPhase::kAwaitProbeAck, now + scaled(config_.probe_interval), to, seq, target};
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
  if (m->liveness == Liveness::kSuspect || m->liveness == Liveness::kDead) items.push_back(claim_to_relay(*m));
  return items;
}

LivenessItem GossipCore::claim_to_relay(const Member& m) const {
  // The claim as signed, while its accuser is someone a receiver believes;
  // else this peer's own word (receivers count only live accusers).
  if (m.claim && m.claim->incarnation == m.incarnation && m.claim->state == m.liveness) {
    const Member* accuser = table_.find(m.claim->from);
    if (m.claim->from == self_id() || (accuser != nullptr && accuser->is_live())) return *m.claim;
  }
  return claim(m.liveness, m.id(), m.incarnation);
}

void GossipCore::answer_sync(TimePoint now, StreamId id, const SyncRequest& request) {
  std::vector<OutgoingItem> items;
  std::vector<PeerId> wants;
  std::unordered_map<PeerId, const DigestEntry*> theirs;
  theirs.reserve(request.digest.size());
  for (const DigestEntry& e : request.digest) theirs.emplace(e.id, &e);
  // The requester believes we are suspect or dead at our incarnation:
  // refute before answering, so our answer carries the record that proves
  // otherwise. (A claim above our incarnation names one we never signed;
  // the answer's record corrects it.)
  if (auto it = theirs.find(self_id()); it != theirs.end() &&
      (it->second->liveness == Liveness::kSuspect || it->second->liveness == Liveness::kDead) &&
      it->second->liveness_incarnation == self_.incarnation) {
    refute(now, it->second->liveness_incarnation);
  }

  auto offer = [&](const PeerId& member_id, const PeerRecord& ours, Liveness liveness, std::uint64_t liveness_inc,
                   const RecordPtr& record, const Member* m) {
    auto it = theirs.find(member_id);
    const DigestEntry* e = it == theirs.end() ? nullptr : it->second;
    const bool record_newer = e == nullptr || (ours.incarnation != e->record_incarnation
                                                   ? ours.incarnation > e->record_incarnation
                                                   : ours.seq > e->record_seq);
    if (record_newer) items.push_back(record);
    if ((liveness == Liveness::kSuspect || liveness == Liveness::kDead) &&
        (e == nullptr || liveness_dominates(liveness, liveness_inc, e->liveness, e->liveness_incarnation))) {
      items.push_back(claim_to_relay(*m));
    }
  };
  offer(self_id(), self_, Liveness::kAlive, self_.incarnation, self_signed_, nullptr);
  table_.for_each([&](const Member& m) {
    offer(m.id(), m.record->record, m.liveness, m.incarnation, m.record, &m);
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
  streams_[id] = Stream{StreamPhase::kAwaitRequest, now + config_.stream_timeout, from, 0, {}};
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
  if (!admits(sender)) {
    ++stats_.not_admitted;
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
      if (!sync_limiter_.allow(it->second.peer, now)) {
        ++stats_.syncs_refused;
        close_stream(id);
        return;
      }
      answer_sync(now, id, *request);
      return;
    }
    case StreamPhase::kAwaitProbeAck: {
      const auto* ack = std::get_if<StreamProbe>(&body);
      if (ack == nullptr || !ack->ack || ack->seq != it->second.probe_seq || sender != it->second.probe_target) break;
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

}  // namespace tensorhub::gossip
