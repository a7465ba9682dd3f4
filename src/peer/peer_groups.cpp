// PeerCore's side of model-parallel groups: claims in the record, the
// ranks' states over data messages, and what this rank stages.
#include <algorithm>

#include "core/quoted.hpp"
#include "peer/peer_core.hpp"

namespace tensorhub::peer {

void PeerCore::claim_groups() {
  if (!gossip_) return;
  // The claims fit: join_group checked them against the record first.
  (void)gossip_->set_groups(groups_.claims());
  gossip_changed();
}

Status PeerCore::join_group(TimePoint now, const std::string& name, std::uint32_t size, std::uint32_t rank) {
  if (groups_.is_member(name)) {
    return Status::already_exists("this peer is a rank of group " + core::quoted(name) + " already");
  }
  TENSORHUB_RETURN_IF_ERROR(groups_.join(now, name, size, rank));
  if (gossip_) {
    if (Status fits = gossip_->set_groups(groups_.claims()); !fits.is_ok()) {
      groups_.leave(name);
      return fits;
    }
    // Claims that came before this peer joined the group are in the book.
    for (const gossip::MemberView& m : gossip_->members()) {
      if (m.record && m.liveness != gossip::Liveness::kDead && m.liveness != gossip::Liveness::kLeft) {
        groups_.on_record(now, m.record->record.id, m.record->record.groups);
      }
    }
  }
  claim_groups();
  send_group_states(now);
  state_changed();
  return Status::ok();
}

void PeerCore::leave_group(TimePoint now, const std::string& name) {
  if (!groups_.is_member(name)) return;
  groups_.leave(name);
  std::erase_if(staged_, [&](const auto& s) { return std::get<0>(s.first) == name; });
  claim_groups();
  state_changed();
  (void)now;
}

Status PeerCore::stage_for_group(TimePoint now, const std::string& name, const std::string& model,
                                 VersionNumber version, const ManifestId& id,
                                 std::vector<std::shared_ptr<LocalVersion>> versions) {
  if (!groups_.is_member(name)) return Status::not_found("this peer is no rank of group " + core::quoted(name));
  if (!groups_.set_stage(name, StageEntry{model, version.value, id, StageState::kStaging, 0, {}})) {
    return Status::resource_exhausted("group " + core::quoted(name) + " has " + std::to_string(kMaxGroupStages) +
                                      " stages under way or committed last; commit or release one first");
  }
  auto& held = staged_[{name, model, version.value}];
  held.assign(versions.begin(), versions.end());
  refresh_group_stages(now);
  return Status::ok();
}

void PeerCore::unstage_for_group(TimePoint now, const std::string& name, const std::string& model, VersionNumber version) {
  staged_.erase({name, model, version.value});
  groups_.drop_stage(name, model, version.value);
  send_group_states(now);
}

Status PeerCore::commit_group(TimePoint now, const std::string& name, std::uint64_t version) {
  refresh_group_stages(now);
  Status s = groups_.commit(now, name, version);
  send_group_states(now);
  return s;
}

void PeerCore::withdraw_from_commit(TimePoint now, const std::string& name, std::uint64_t version) {
  groups_.withdraw(name, version);
  send_group_states(now);
}

void PeerCore::refresh_group_stages(TimePoint now) {
  for (auto it = staged_.begin(); it != staged_.end();) {
    const auto& [name, model, version] = it->first;
    const std::vector<StageEntry>* own = groups_.own_stages(name);
    const StageEntry* entry = nullptr;
    if (own) {
      for (const StageEntry& e : *own) {
        if (e.model == model && e.version == version) entry = &e;
      }
    }
    if (!entry) {  // dropped from the book (its bound): nothing to say of it
      it = staged_.erase(it);
      continue;
    }
    if (entry->state == StageState::kCommitted || entry->state == StageState::kFailed) {
      ++it;  // final
      continue;
    }
    StageEntry next = *entry;
    std::uint64_t total = 0, verified = 0;
    bool complete = true;
    std::string failure;
    for (const std::weak_ptr<LocalVersion>& weak : it->second) {
      const std::shared_ptr<LocalVersion> v = weak.lock();
      if (!v || v->state == VersionState::kReleased) {
        failure = "its copy was released before the group committed";  // stage_released says so first
        break;
      }
      if (v->state == VersionState::kFailed) {
        failure = v->result.to_string();
        break;
      }
      if (v->state != VersionState::kComplete) complete = false;
      total += v->progress.bytes_total;
      verified += v->state == VersionState::kComplete ? v->progress.bytes_total : v->progress.bytes_verified;
    }
    if (!failure.empty()) {
      next.state = StageState::kFailed;
      next.reason = stage_reason(failure);
    } else if (complete) {
      if (next.state != StageState::kCommitting) next.state = StageState::kStaged;  // committing stays so
      next.permille = 1000;
    } else {
      next.permille = static_cast<std::uint16_t>(total == 0 ? 0 : std::min<std::uint64_t>(999, verified * 1000 / total));
    }
    if (next != *entry) {
      (void)groups_.set_stage(name, std::move(next));  // a replacement: always room
      state_changed();
    }
    ++it;
  }
  send_group_states(now);
}

void PeerCore::stage_released(TimePoint now, const LocalVersion& v) {
  for (auto& [key, versions] : staged_) {
    const bool brings = std::any_of(versions.begin(), versions.end(), [&](const std::weak_ptr<LocalVersion>& w) {
      return w.lock().get() == &v;
    });
    if (!brings) continue;
    const auto& [name, model, version] = key;
    const std::vector<StageEntry>* own = groups_.own_stages(name);
    if (!own) continue;
    for (const StageEntry& e : *own) {
      if (e.model != model || e.version != version || e.state == StageState::kCommitted) continue;
      StageEntry failed = e;
      failed.state = StageState::kFailed;
      failed.reason = "its copy was released before the group committed";
      (void)groups_.set_stage(name, std::move(failed));  // a replacement: always room
      state_changed();
      break;
    }
  }
  send_group_states(now);
}

void PeerCore::send_group_states(TimePoint now) {
  for (GroupBook::Outgoing& out : groups_.due(now)) {
    actions_.push(swarm::SendMessage{out.peer, swarm::SwarmMessage::with_bytes(swarm::MessageType::kGroup, {},
                                                                               std::move(out.bytes))});
  }
}

void PeerCore::on_group_state(TimePoint now, const PeerId& from, const swarm::SwarmMessage& message) {
  auto state = decode_group_state(message.bytes);
  if (!state) {
    report(Report::kWarn, "peer " + from.short_hex() + " sent a bad group state: " + state.status().to_string());
    return;
  }
  if (groups_.on_state(now, from, *state)) state_changed();
}

}  // namespace tensorhub::peer
