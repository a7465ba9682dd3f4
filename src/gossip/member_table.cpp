#include "gossip/member_table.hpp"

#include <cassert>

namespace tensorhub::gossip {
namespace {
int rank(Liveness l) {
  switch (l) {
    case Liveness::kAlive: return 0;
    case Liveness::kSuspect: return 1;
    case Liveness::kDead:
    case Liveness::kLeft: return 2;
  }
  return 0;
}
bool is_final(Liveness l) { return l == Liveness::kDead || l == Liveness::kLeft; }
}  // namespace

bool liveness_dominates(Liveness a, std::uint64_t a_inc, Liveness b, std::uint64_t b_inc) {
  return a_inc != b_inc ? a_inc > b_inc : rank(a) > rank(b);
}

Member* MemberTable::find(const PeerId& id) {
  auto it = members_.find(id);
  return it == members_.end() ? nullptr : &it->second;
}

const Member* MemberTable::find(const PeerId& id) const {
  auto it = members_.find(id);
  return it == members_.end() ? nullptr : &it->second;
}

void MemberTable::index(const Member& m) {
  const PeerId& id = m.id();
  if (m.is_live()) live_.insert(id); else live_.erase(id);
  if (m.liveness == Liveness::kDead) dead_.insert(id); else dead_.erase(id);
  if (is_final(m.liveness)) tombstones_.insert(id); else tombstones_.erase(id);
  if (m.liveness == Liveness::kSuspect) suspects_.insert(id); else suspects_.erase(id);
}

void MemberTable::set_liveness(Member& m, Liveness state, std::uint64_t incarnation, TimePoint now) {
  if (m.liveness != state) m.since = now;
  m.liveness = state;
  m.incarnation = incarnation;
  if (state != Liveness::kSuspect) m.suspicion.reset();
  if (state == Liveness::kAlive || state == Liveness::kLeft) m.claim.reset();
  index(m);
}

bool MemberTable::is_news(const RecordVersion& v) const {
  const Member* m = find(v.id);
  if (m == nullptr) return members_.size() < max_members_;
  const PeerRecord& current = m->record->record;
  if (is_final(m->liveness)) return v.incarnation > m->incarnation;  // only a higher life revives
  return v.incarnation != current.incarnation ? v.incarnation > current.incarnation : v.seq > current.seq;
}

RecordOutcome MemberTable::apply_record(const RecordPtr& record, TimePoint now) {
  const PeerRecord& r = record->record;
  Member* m = find(r.id);
  if (m == nullptr) {
    if (members_.size() >= max_members_) return RecordOutcome::kFull;
    Member fresh;
    fresh.record = record;
    fresh.liveness = r.leaving ? Liveness::kLeft : Liveness::kAlive;
    fresh.incarnation = r.incarnation;
    fresh.since = now;
    index(members_.emplace(r.id, std::move(fresh)).first->second);
    return r.leaving ? RecordOutcome::kLeft : RecordOutcome::kJoined;
  }
  if (!is_news(RecordVersion{r.id, r.incarnation, r.seq})) return RecordOutcome::kStale;
  const Liveness before = m->liveness;
  const std::uint64_t before_inc = m->incarnation;
  m->record = record;
  if (r.leaving) {
    set_liveness(*m, Liveness::kLeft, r.incarnation, now);
    return before == Liveness::kLeft ? RecordOutcome::kUpdated : RecordOutcome::kLeft;
  }
  if (r.incarnation > before_inc) {
    set_liveness(*m, Liveness::kAlive, r.incarnation, now);
    return before == Liveness::kAlive ? RecordOutcome::kUpdated : RecordOutcome::kAliveAgain;
  }
  // Same incarnation, newer content: the liveness claim stands (a suspect
  // stays suspect until its owner refutes with a higher incarnation).
  return RecordOutcome::kUpdated;
}

LivenessOutcome MemberTable::apply_liveness(const LivenessItem& item, TimePoint now,
                                            const SuspicionTimeouts& timeouts) {
  Member* m = find(item.target);
  if (m == nullptr || is_final(m->liveness) || item.incarnation < m->incarnation) return LivenessOutcome::kIgnored;
  if (m->liveness == Liveness::kSuspect && item.incarnation == m->incarnation && m->suspicion) {
    return m->suspicion->confirm(item.from) ? LivenessOutcome::kConfirmed : LivenessOutcome::kIgnored;
  }
  set_liveness(*m, Liveness::kSuspect, item.incarnation, now);
  m->suspicion.emplace(now, timeouts.min, timeouts.max, timeouts.expected_confirmations, item.from);
  m->claim = item;
  return LivenessOutcome::kSuspected;
}

bool MemberTable::declare_dead(const LivenessItem& own_claim, TimePoint now) {
  Member* m = find(own_claim.target);
  if (m == nullptr || m->liveness != Liveness::kSuspect) return false;
  set_liveness(*m, Liveness::kDead, m->incarnation, now);
  m->claim = own_claim;
  return true;
}

bool MemberTable::remove(const PeerId& id) {
  if (members_.erase(id) == 0) return false;
  live_.erase(id);
  dead_.erase(id);
  tombstones_.erase(id);
  suspects_.erase(id);
  return true;
}

std::vector<PeerId> MemberTable::expire_tombstones(TimePoint now, Duration ttl) {
  std::vector<PeerId> removed;
  for (const PeerId& id : tombstones_.ids()) {
    if (now - members_.at(id).since >= ttl) removed.push_back(id);
  }
  for (const PeerId& id : removed) {
    dead_.erase(id);
    tombstones_.erase(id);
    members_.erase(id);
  }
  return removed;
}

void MemberTable::for_each(const std::function<void(const Member&)>& fn) const {
  for (const auto& [id, m] : members_) fn(m);
}

std::vector<DigestEntry> MemberTable::digest() const {
  std::vector<DigestEntry> out;
  out.reserve(members_.size());
  for (const auto& [id, m] : members_) {
    out.push_back(DigestEntry{id, m.record->record.incarnation, m.record->record.seq, m.liveness, m.incarnation});
  }
  return out;
}

}  // namespace tensorhub::gossip
