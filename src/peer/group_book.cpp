#include "peer/group_book.hpp"

#include <algorithm>
#include <cstdio>
#include <tuple>

#include "core/quoted.hpp"

namespace tensorhub::peer {
namespace {

std::string rank_name(std::uint32_t rank) { return "rank " + std::to_string(rank); }

std::string seconds(Duration d) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", std::chrono::duration<double>(d).count());
  return text;
}

const StageEntry* find_stage(const std::vector<StageEntry>& stages, const std::string& model, std::uint64_t version) {
  for (const StageEntry& e : stages) {
    if (e.model == model && e.version == version) return &e;
  }
  return nullptr;
}

}  // namespace

Status GroupBook::join(TimePoint now, const std::string& name, std::uint32_t size, std::uint32_t rank) {
  GroupState probe{name, size, rank, {}};
  TENSORHUB_RETURN_IF_ERROR(validate_group_state(probe));
  if (auto it = groups_.find(name); it != groups_.end()) {
    if (it->second.size == size && it->second.rank == rank) return Status::ok();
    return Status::already_exists("this peer is rank " + std::to_string(it->second.rank) + " of " +
                                  std::to_string(it->second.size) + " in group " + core::quoted(name));
  }
  if (groups_.size() >= kMaxGroups) {
    return Status::resource_exhausted("this peer is a rank of " + std::to_string(kMaxGroups) +
                                      " groups already (the most a gossip record claims)");
  }
  Group& g = groups_[name];
  g.size = size;
  g.rank = rank;
  for (const auto& [peer, claims] : claims_by_peer_) {
    for (const gossip::GroupEntry& c : claims) {
      if (c.name == name) add_claim(now, peer, c);
    }
  }
  return Status::ok();
}

void GroupBook::leave(const std::string& name) { groups_.erase(name); }

std::vector<gossip::GroupEntry> GroupBook::claims() const {
  std::vector<gossip::GroupEntry> out;
  for (const auto& [name, g] : groups_) out.push_back(gossip::GroupEntry{name, g.size, g.rank});
  return out;
}

void GroupBook::changed(Group& g) {
  for (auto& [rank, r] : g.others) r.owes_state = true;
}

bool GroupBook::set_stage(const std::string& name, StageEntry entry) {
  Group& g = groups_.at(name);
  entry.reason = stage_reason(entry.reason);
  auto before = [](const StageEntry& a, const StageEntry& b) {
    return std::tie(a.model, a.version) < std::tie(b.model, b.version);
  };
  auto at = std::lower_bound(g.own.begin(), g.own.end(), entry, before);
  if (at != g.own.end() && at->model == entry.model && at->version == entry.version) {
    if (*at == entry) return true;
    *at = std::move(entry);
    changed(g);
    return true;
  }
  if (g.own.size() >= kMaxGroupStages) {
    // Room goes from a finished stage: a failed one first (the lowest
    // version), then a committed one that is not its model's newest
    // committed. Staging, staged and committing stages (a commit may yet
    // come), and each model's newest committed (what a late rank catches up
    // to), stay.
    auto newest_committed = [&](const StageEntry& e) {
      return std::none_of(g.own.begin(), g.own.end(), [&](const StageEntry& o) {
        return o.model == e.model && o.state == StageState::kCommitted && o.version > e.version;
      });
    };
    auto victim = g.own.end();
    for (int pass = 0; pass < 2 && victim == g.own.end(); ++pass) {
      for (auto it = g.own.begin(); it != g.own.end(); ++it) {
        const bool settled = it->state == StageState::kFailed;
        const bool old_commit = it->state == StageState::kCommitted && !newest_committed(*it);
        if (pass == 0 ? !settled : !old_commit) continue;
        if (victim == g.own.end() || it->version < victim->version) victim = it;
      }
    }
    if (victim == g.own.end()) return false;
    g.own.erase(victim);
    at = std::lower_bound(g.own.begin(), g.own.end(), entry, before);
  }
  g.own.insert(at, std::move(entry));
  changed(g);
  return true;
}

void GroupBook::drop_stage(const std::string& name, const std::string& model, std::uint64_t version) {
  auto it = groups_.find(name);
  if (it == groups_.end()) return;
  auto& own = it->second.own;
  const auto before = own.size();
  std::erase_if(own, [&](const StageEntry& e) { return e.model == model && e.version == version; });
  if (own.size() != before) changed(it->second);
}

const std::vector<StageEntry>* GroupBook::own_stages(const std::string& name) const {
  auto it = groups_.find(name);
  return it == groups_.end() ? nullptr : &it->second.own;
}

void GroupBook::add_claim(TimePoint now, const PeerId& peer, const gossip::GroupEntry& claim) {
  auto it = groups_.find(claim.name);
  if (it == groups_.end()) return;
  Group& g = it->second;
  if (claim.size != g.size) {
    g.other_size_claims[peer] = claim.size;
    return;
  }
  if (claim.rank == g.rank) {
    // Another peer claims this peer's own rank: every other rank sees the
    // conflict and no commit succeeds until it ends.
    g.others[claim.rank].claimants.insert(peer);
    return;
  }
  Rank& r = g.others[claim.rank];
  if (r.claimants.insert(peer).second) {
    r.gone.reset();
    r.claimed_since = now;
    r.last_heard.reset();
    r.silence_noted = false;
    r.stages.clear();
    r.owes_state = true;
  }
}

void GroupBook::remove_claim(const PeerId& peer, const gossip::GroupEntry& claim) {
  auto it = groups_.find(claim.name);
  if (it == groups_.end()) return;
  Group& g = it->second;
  g.other_size_claims.erase(peer);
  auto r = g.others.find(claim.rank);
  if (r == g.others.end() || r->second.claimants.erase(peer) == 0) return;
  if (claim.rank == g.rank) {
    if (r->second.claimants.empty()) g.others.erase(r);
    return;
  }
  if (r->second.claimants.empty()) {
    // The rank's peer left or died: a fault until another peer claims it.
    r->second.gone = peer;
    r->second.stages.clear();
    r->second.last_heard.reset();
  } else if (r->second.claimants.size() == 1) {
    r->second.claimed_since = gone_now_;  // the conflict ended: silence counts from now
    r->second.last_heard.reset();
    r->second.silence_noted = false;
  }
}

void GroupBook::on_record(TimePoint now, const PeerId& peer, const std::vector<gossip::GroupEntry>& claims) {
  gone_now_ = now;
  const std::vector<gossip::GroupEntry> now_claims(claims.begin(), claims.begin() + std::min(claims.size(), kMaxGroups));
  std::vector<gossip::GroupEntry> before;
  if (auto old = claims_by_peer_.find(peer); old != claims_by_peer_.end()) {
    if (old->second == now_claims) return;
    before = std::move(old->second);
    claims_by_peer_.erase(old);
  }
  auto claimed = [](const std::vector<gossip::GroupEntry>& list, const gossip::GroupEntry& c) {
    return std::find(list.begin(), list.end(), c) != list.end();
  };
  for (const gossip::GroupEntry& c : before) {
    if (!claimed(now_claims, c)) remove_claim(peer, c);
  }
  for (const gossip::GroupEntry& c : now_claims) {
    if (!claimed(before, c)) add_claim(now, peer, c);
  }
  if (!now_claims.empty()) claims_by_peer_.emplace(peer, now_claims);
}

bool GroupBook::on_state(TimePoint now, const PeerId& from, const GroupState& state) {
  auto it = groups_.find(state.group);
  if (it == groups_.end()) return false;
  Group& g = it->second;
  if (state.size != g.size || state.rank == g.rank) return false;
  auto r = g.others.find(state.rank);
  if (r == g.others.end() || r->second.claimants.count(from) == 0) return false;
  if (r->second.claimants.size() != 1) return false;  // a conflict: neither is believed
  r->second.last_heard = now;
  r->second.silence_noted = false;
  r->second.stages = state.stages;
  return true;
}

GroupState GroupBook::own_state(const std::string& name, const Group& g) const {
  return GroupState{name, g.size, g.rank, g.own};
}

std::vector<GroupBook::Outgoing> GroupBook::due(TimePoint now) {
  std::vector<Outgoing> out;
  for (auto& [name, g] : groups_) {
    std::vector<std::uint8_t> bytes;
    for (auto& [rank, r] : g.others) {
      if (r.claimants.size() != 1 || rank == g.rank) continue;  // a conflict, or a claim of this peer's own rank
      if (!r.owes_state && now < r.last_sent + kHeartbeat) continue;
      if (bytes.empty()) bytes = encode_group_state(own_state(name, g));
      out.push_back(Outgoing{*r.claimants.begin(), bytes});
      r.owes_state = false;
      r.last_sent = now;
    }
  }
  return out;
}

TimePoint GroupBook::next_timeout() const {
  TimePoint next = kTimeNever;
  for (const auto& [name, g] : groups_) {
    for (const auto& [rank, r] : g.others) {
      if (r.claimants.size() != 1 || rank == g.rank) continue;
      next = std::min(next, r.owes_state ? TimePoint{} : r.last_sent + kHeartbeat);
      if (!r.silence_noted) next = std::min(next, r.last_heard.value_or(r.claimed_since) + kSilence);
    }
  }
  return next;
}

bool GroupBook::handle_timeout(TimePoint now) {
  bool fell_silent = false;
  for (auto& [name, g] : groups_) {
    for (auto& [rank, r] : g.others) {
      if (r.claimants.size() != 1 || r.silence_noted || rank == g.rank) continue;
      if (now >= r.last_heard.value_or(r.claimed_since) + kSilence) {
        r.silence_noted = true;
        fell_silent = true;
      }
    }
  }
  return fell_silent;
}

std::optional<std::string> GroupBook::fault(TimePoint now, std::uint32_t rank, const Rank& r) const {
  if (r.claimants.empty()) {
    return rank_name(rank) + ": its peer " + (r.gone ? r.gone->short_hex() + " " : std::string()) +
           "left or died, and no peer has joined as it since";
  }
  if (r.claimants.size() > 1) {
    std::string who;
    for (const PeerId& p : r.claimants) who += (who.empty() ? "" : ", ") + p.short_hex();
    return rank_name(rank) + ": claimed by " + std::to_string(r.claimants.size()) + " peers (" + who + ")";
  }
  const TimePoint since = r.last_heard.value_or(r.claimed_since);
  if (now - since >= kSilence) {
    return rank_name(rank) + ": not heard from for " + seconds(now - since) + " (peer " +
           r.claimants.begin()->short_hex() + ")";
  }
  return std::nullopt;
}

Status GroupBook::commit(TimePoint now, const std::string& name, std::uint64_t version) {
  auto it = groups_.find(name);
  if (it == groups_.end()) return Status::not_found("this peer is no rank of group " + core::quoted(name));
  Group& g = it->second;
  std::vector<StageEntry*> mine;
  for (StageEntry& e : g.own) {
    if (e.version == version) mine.push_back(&e);
  }
  if (mine.empty()) {
    return Status::invalid_argument(rank_name(g.rank) + " (this one) stages no version " +
                                       std::to_string(version) + " in group " + core::quoted(name) +
                                       ": fetch it through the group first");
  }
  // Once the group decided (this rank committed, or a rank says it
  // committed v under the same id), this rank commits as soon as it holds
  // v itself: nothing another rank does now can undo that decision.
  auto decided = [&](const StageEntry& e) {
    if (e.state == StageState::kCommitted) return true;
    for (const auto& [rank, r] : g.others) {
      if (rank == g.rank || r.claimants.size() != 1) continue;
      const StageEntry* theirs = find_stage(r.stages, e.model, e.version);
      if (theirs && theirs->id == e.id && theirs->state == StageState::kCommitted) return true;
    }
    return false;
  };
  if (std::all_of(mine.begin(), mine.end(), [&](const StageEntry* e) {
        return decided(*e) && e->state != StageState::kStaging && e->state != StageState::kFailed;
      })) {
    bool any = false;
    for (StageEntry* e : mine) {
      if (e->state != StageState::kCommitted) {
        e->state = StageState::kCommitted;
        any = true;
      }
    }
    if (any) changed(g);
    return Status::ok();
  }
  std::vector<std::string> faults, waits;
  for (const auto& [peer, size] : g.other_size_claims) {
    faults.push_back("peer " + peer.short_hex() + " claims a group " + core::quoted(name) + " of " +
                     std::to_string(size) + " ranks, not " + std::to_string(g.size));
  }
  for (const StageEntry* e : mine) {
    if (e->state == StageState::kFailed) faults.push_back(rank_name(g.rank) + " (this one): " + e->reason);
    if (e->state == StageState::kStaging) {
      waits.push_back(rank_name(g.rank) + " (this one): staging (" + std::to_string(e->permille / 10) + "%)");
    }
  }
  for (std::uint32_t rank = 0; rank < g.size; ++rank) {
    if (rank == g.rank) {
      if (auto r = g.others.find(rank); r != g.others.end()) {
        faults.push_back(rank_name(rank) + ": claimed by another peer as well (" + r->second.claimants.begin()->short_hex() +
                         ")");
      }
      continue;
    }
    auto r = g.others.find(rank);
    if (r == g.others.end()) {
      waits.push_back(rank_name(rank) + ": no peer has joined as it");
      continue;
    }
    if (auto why = fault(now, rank, r->second)) {
      faults.push_back(*why);
      continue;
    }
    if (!r->second.last_heard) {
      waits.push_back(rank_name(rank) + ": not heard from yet");
      continue;
    }
    for (const StageEntry& theirs : r->second.stages) {
      // Every rank commits the same models at v: one this rank does not stage is a fault.
      if (theirs.version == version && theirs.state != StageState::kFailed &&
          std::none_of(mine.begin(), mine.end(), [&](const StageEntry* e) { return e->model == theirs.model; })) {
        faults.push_back(rank_name(rank) + ": stages " + core::quoted(theirs.model) + " v" + std::to_string(version) +
                         ", which this rank does not");
      }
    }
    for (const StageEntry* e : mine) {
      const StageEntry* theirs = find_stage(r->second.stages, e->model, e->version);
      const std::string what = core::quoted(e->model) + " v" + std::to_string(e->version);
      if (!theirs) {
        waits.push_back(rank_name(rank) + ": has not begun staging " + what);
      } else if (theirs->state == StageState::kFailed) {
        faults.push_back(rank_name(rank) + ": cannot stage " + what + ": " + theirs->reason);
      } else if (theirs->id != e->id) {
        faults.push_back(rank_name(rank) + ": staged another " + what + " (id " + theirs->id.short_hex() + ", not " +
                         e->id.short_hex() + ")");
      } else if (theirs->state == StageState::kStaging) {
        waits.push_back(rank_name(rank) + ": staging " + what + " (" + std::to_string(theirs->permille / 10) + "%)");
      } else if (theirs->state == StageState::kStaged) {
        waits.push_back(rank_name(rank) + ": staged " + what + ", not committing yet");
      }
    }
  }
  auto joined = [](const std::vector<std::string>& lines) {
    std::string out;
    for (const std::string& l : lines) out += (out.empty() ? "" : "; ") + l;
    return out;
  };
  const std::string what = "group " + core::quoted(name) + " cannot commit version " + std::to_string(version);
  if (!faults.empty()) return Status::aborted(what + ": " + joined(faults));
  // This rank holds it: it enters the barrier (or is past it).
  const StageState next = waits.empty() ? StageState::kCommitted : StageState::kCommitting;
  bool any = false;
  for (StageEntry* e : mine) {
    if (e->state == StageState::kStaging || e->state == StageState::kCommitted || e->state == next) continue;
    e->state = next;
    any = true;
  }
  if (any) changed(g);
  if (!waits.empty()) return Status::unavailable("group " + core::quoted(name) + " waits to commit version " +
                                                 std::to_string(version) + ": " + joined(waits));
  return Status::ok();
}

void GroupBook::withdraw(const std::string& name, std::uint64_t version) {
  auto it = groups_.find(name);
  if (it == groups_.end()) return;
  bool any = false;
  for (StageEntry& e : it->second.own) {
    if (e.version == version && e.state == StageState::kCommitting) {
      e.state = StageState::kStaged;
      any = true;
    }
  }
  if (any) changed(it->second);
}

std::optional<std::uint64_t> GroupBook::committed(const std::string& name, const std::string& model) const {
  auto it = groups_.find(name);
  if (it == groups_.end()) return std::nullopt;
  std::optional<std::uint64_t> best;
  auto consider = [&](const std::vector<StageEntry>& stages) {
    for (const StageEntry& e : stages) {
      if (e.model == model && e.state == StageState::kCommitted && (!best || e.version > *best)) best = e.version;
    }
  };
  consider(it->second.own);
  for (const auto& [rank, r] : it->second.others) consider(r.stages);
  return best;
}

std::vector<GroupBook::RankView> GroupBook::ranks(const std::string& name) const {
  std::vector<RankView> out;
  auto it = groups_.find(name);
  if (it == groups_.end()) return out;
  const Group& g = it->second;
  for (std::uint32_t rank = 0; rank < g.size; ++rank) {
    RankView v;
    v.rank = rank;
    if (rank == g.rank) {
      v.self = true;
      v.stages = g.own;
    }
    if (auto r = g.others.find(rank); r != g.others.end()) {
      v.claimants.assign(r->second.claimants.begin(), r->second.claimants.end());
      if (!v.self) {
        v.heard = r->second.last_heard.has_value();
        v.last_heard = r->second.last_heard.value_or(TimePoint{});
        v.stages = r->second.stages;
      }
    }
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace tensorhub::peer
