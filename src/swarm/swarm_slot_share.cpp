// SwarmCore's half of the slot share (docs/swarm-policy.md): a fetcher
// holds at most as many holders' upload slots as it offers; unchokes past
// that are handed back and asked for again as slots end.
#include "swarm/swarm_core.hpp"

#include <algorithm>
#include <cassert>

namespace tensorhub::swarm {

void SwarmCore::start_with(TimePoint now, const ManifestId& id, Version& v, const PeerId& peer) {
  v.sources.insert(peer);
  v.fetch->on_connected(now, peer);
  send(peer, interested(id, v));
}

SwarmMessage SwarmCore::interested(const ManifestId& id, const Version& v) const {
  // What we hold already travels along, so a super-seed does not reveal it.
  return SwarmMessage::with_bits(MessageType::kInterested, id, v.layout.shard_count(), v.have.to_bytes());
}

bool SwarmCore::holds_its_share_of_slots(const Version& v) const {
  return v.fetch->slot_sources() + v.asked_again.size() >= upload_slots_here();
}

bool SwarmCore::decline_slot(const ManifestId& id, Version& v, const PeerId& peer) {
  const bool asked = v.asked_again.erase(peer) != 0;
  const bool starving = v.fetch->in_flight_total() == 0;
  // Starved, a fetch that pulls across the WAN takes the slot: handing it
  // back only to ask again at once (ask_declined_again) leaves the holder's
  // slot idle for a round trip, a WAN one when the holder is a trainer
  // rank. Inside a datacenter that round trip is cheap, and taking the slot
  // would spread slots worse.
  const bool takes_it = starving && (asked || v.fetch->pulls_across_wan());
  if (takes_it || proximity_of(peer) == Proximity::kSameHost || !holds_its_share_of_slots(v)) return false;
  send(peer, SwarmMessage::signal(MessageType::kNotInterested, id));
  if (std::find(v.declined.begin(), v.declined.end(), peer) == v.declined.end()) v.declined.push_back(peer);
  return true;
}

void SwarmCore::ask_declined_again(const ManifestId& id, Version& v) {
  // Starved, the slots we hold give us nothing to ask for: every holder
  // handed back is asked again, and we wait in all their queues, as we did
  // before declining any. (One at a time, a fetcher could wait on a holder
  // whose slot stays taken for a whole rotation.)
  const bool starved = v.fetch && v.fetch->in_flight_total() == 0;
  while (!v.declined.empty() && v.fetch && (starved || !holds_its_share_of_slots(v))) {
    const PeerId peer = v.declined.front();
    v.declined.pop_front();
    auto c = connections_.find(peer);
    if (c == connections_.end() || !c->second.open) continue;
    send(peer, interested(id, v));
    v.asked_again.insert(peer);
  }
}

void SwarmCore::slot_ended(const ManifestId& id, Version& v, const PeerId& peer) {
  std::erase(v.declined, peer);
  v.asked_again.erase(peer);
  ask_declined_again(id, v);
}

}  // namespace tensorhub::swarm
