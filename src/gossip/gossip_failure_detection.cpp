// GossipCore's failure detection (SWIM with Lifeguard) and its timers:
// probes, indirect probes, suspicion, gossip rounds.
#include "gossip/gossip_core.hpp"

#include <algorithm>
#include <cmath>

namespace tensorhub::gossip {

// --------------------------------------------------------------------------
// Timers

core::TimerTable<GossipTimer> GossipCore::timers() const {
  core::TimerTable<GossipTimer> t;
  t.set(GossipTimer::kGossip, next_gossip_at_);
  t.set(GossipTimer::kPushPull, next_push_pull_at_);
  t.set(GossipTimer::kReconnect, next_reconnect_at_);
  t.set(GossipTimer::kReap, next_reap_at_);
  if (!seeds_.empty() && table_.live_count() == 0 && !self_.leaving) t.set(GossipTimer::kJoin, next_join_at_);
  if (!self_.leaving) t.set(GossipTimer::kProbe, next_probe_at_);
  if (probe_) {
    t.set(GossipTimer::kProbeStage, probe_->indirect_sent || probe_->acked ? probe_->deadline : probe_->indirect_at);
  }
  if (self_dirty_) {
    t.set(GossipTimer::kResign, head_changed_ ? last_input_ : last_signed_ + config_.min_resign_interval);
  }
  if (eager_round_due_) t.set(GossipTimer::kEagerRound, last_input_);  // due now
  for (const auto& [seq, relay] : relays_) t.earliest(GossipTimer::kRelayNack, relay.nack_at);
  for (const auto& [id, stream] : streams_) t.earliest(GossipTimer::kStreamDeadline, stream.deadline);
  for (const PeerId& id : table_.suspects()) {
    const Member* m = table_.find(id);
    // Not before the core has caught up after a pause.
    if (m->suspicion) t.earliest(GossipTimer::kSuspicion, std::max(m->suspicion->deadline(), caught_up_at_));
  }
  return t;
}

TimePoint GossipCore::next_timeout() const { return timers().next(); }

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
        send_packet(*m, req);
        probe_->relays.push_back(m->id());
        probe_->awaiting_nacks.push_back(m->id());
        ++probe_->expected_nacks;
      }
      if (config_.tcp_fallback_probe) {
        open_probe_stream(now, target->record->record.gossip_addr, probe_->seq, target_id);
      }
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
  if (now >= next_reconnect_at_) {
    if (!self_.leaving) run_reconnect(now);
    next_reconnect_at_ = now + config_.reconnect_interval;
  }
  check_suspicions(now);
  check_relays(now);
  check_streams(now);
  // After the suspicions: the death of the last member known makes a
  // rejoin through the seeds due now, in this same run.
  if (!seeds_.empty() && table_.live_count() == 0 && !self_.leaving && now >= next_join_at_) {
    for (const std::string& seed : seeds_) open_sync(now, seed);
    join_backoff_ = std::min(join_backoff_ * 2, config_.join_retry_interval * 10);
    next_join_at_ = now + join_backoff_;
  }
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
  p.seq = next_probe_seq();
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
  if (m->liveness == Liveness::kSuspect && m->claim) first.push_back(*m->claim);
  ++stats_.probes;
  probe_ = p;
  send_packet(*m, ping, first);
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
  ++stats_.suspicions;
  process_liveness(now, claim(Liveness::kSuspect, p.target, m->incarnation), nullptr);
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
    send_packet(*m, p);
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
    send_packet(*m, p, std::span<const OutgoingItem>(&item, 1), /*piggyback=*/false);
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
      if (m->claim) broadcasts_.enqueue(*m->claim);
    }
  }
  for (const PeerId& id : expired) {
    const Member* m = table_.find(id);
    const LivenessItem dead = claim(Liveness::kDead, id, m->incarnation);
    if (!table_.declare_dead(dead, now)) continue;
    ++stats_.deaths_declared;
    emit(MemberEventKind::kDead, id, m->record, dead.incarnation);
    broadcasts_.enqueue(dead);
  }
}

void GossipCore::check_relays(TimePoint now) {
  for (auto it = relays_.begin(); it != relays_.end();) {
    if (now >= it->second.nack_at) {
      Packet nack;
      nack.kind = PacketKind::kNack;
      nack.probe_seq = it->second.requester_seq;
      send_packet(it->second.requester, it->second.requester_addr, nack);
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

}  // namespace tensorhub::gossip
