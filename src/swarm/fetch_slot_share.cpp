// FetchSession's slot share: it holds at most as many holders' upload
// slots as its peer offers, hands back unchokes past that and asks for them
// again as slots end, and probes for free ones.
#include "swarm/fetch_session.hpp"

#include <algorithm>
#include <cassert>

namespace tensorhub::swarm {

void FetchSession::set_slot_share(TimePoint now, std::size_t share) {
  slot_share_ = share;
  keep_slot_share(now);
}

void FetchSession::keep_slot_share(TimePoint now) {
  std::erase_if(slot_probes_, [&](const auto& probe) {
    const Neighbour* n = neighbourhood_.find(probe.first);
    return n == nullptr || (n->connected && !n->choked);
  });
  // Slots beyond the host, and whether we wait for more. A fetch that
  // pulls across the WAN is paced by the WAN, not by slots; and its
  // neighbours in the datacenter decide who carries what across
  // (share_is_mine), which probes coming and going would unsettle.
  std::size_t held = 0;
  bool waiting = false;
  for (const auto& [peer, n] : neighbourhood_.all()) {
    if (n.proximity == Proximity::kSameHost || n.super_seed) continue;
    if (n.connecting || (n.connected && n.choked)) waiting = true;
    if (n.connected && !n.choked) ++held;
  }
  if (done_ || slot_share_ == 0 || pulls_across_wan()) {
    slot_hungry_since_.reset();
    return;
  }
  if (held > slot_share_ && requests_.in_flight_total() != 0) {
    // Past the share: the slot with the fewest requests in flight goes back.
    const PeerId* surplus = nullptr;
    std::size_t fewest = std::numeric_limits<std::size_t>::max();
    for (const auto& [peer, n] : neighbourhood_.all()) {
      if (!n.connected || n.choked || n.super_seed || n.proximity == Proximity::kSameHost) continue;
      if (const std::size_t in_flight = requests_.in_flight(peer); in_flight < fewest) {
        fewest = in_flight;
        surplus = &peer;
      }
    }
    const PeerId handed_back = *surplus;
    release_neighbour(now, handed_back);
    --held;
  }
  if (config_.slot_probes == 0 || unrequested_ == 0 || held >= slot_share_ || !waiting || neighbourhood_.candidates().empty()) {
    slot_hungry_since_.reset();
    return;
  }
  if (!slot_hungry_since_) {
    slot_hungry_since_ = now;
    return;
  }
  if (now < *slot_hungry_since_ + config_.slot_probe_after) return;
  slot_hungry_since_ = now;
  std::vector<PeerId> unanswered;
  for (const auto& [peer, since] : slot_probes_) {
    // One still connecting is kept: given up then, its holder would hear
    // our interest after the release and might grant a slot nobody uses.
    if (now >= since + config_.slot_probe_after && !neighbourhood_.find(peer)->connecting) unanswered.push_back(peer);
  }
  for (const PeerId& peer : unanswered) {
    slot_probes_.erase(peer);
    release_neighbour(now, peer);
  }
  while (slot_probes_.size() < config_.slot_probes && !neighbourhood_.candidates().empty()) {
    // Every other probe is drawn from the whole list, this side of the WAN.
    // The slots free at a moment can be a handful among a thousand peers
    // (each host offers as many as its peers may hold), and probing only
    // the nearest never finds them when they are in other racks.
    PeerId probe = *neighbourhood_.nearest_candidate(/*complete_only=*/false, /*drawn=*/true);
    if (probe_far_) {
      const PeerId far = neighbourhood_.any_candidate();
      if (neighbourhood_.candidates().find(far)->proximity != Proximity::kRemote) probe = far;
    }
    probe_far_ = !probe_far_;
    connect_to(now, probe);
    slot_probes_.emplace(probe, now);
  }
}

bool FetchSession::holds_its_share_of_slots() const {
  return slot_share_ != 0 && slot_sources() + asked_again_.size() >= slot_share_;
}

bool FetchSession::decline_slot(const PeerId& peer) {
  const bool asked = asked_again_.erase(peer) != 0;
  const bool starving = requests_.in_flight_total() == 0;
  // Starved, a fetch that pulls across the WAN takes the slot: handing it
  // back only to ask again at once (ask_declined_again) leaves the holder's
  // slot idle for a round trip, a WAN one when the holder is a trainer
  // rank. Inside a datacenter that round trip is cheap, and taking the slot
  // would spread slots worse.
  const bool takes_it = starving && (asked || pulls_across_wan());
  const Neighbour* n = neighbourhood_.find(peer);
  const bool same_host = n != nullptr && n->proximity == Proximity::kSameHost;
  if (takes_it || same_host || !holds_its_share_of_slots()) return false;
  actions_.push(DeclineSlotAction{peer});
  if (std::find(declined_.begin(), declined_.end(), peer) == declined_.end()) declined_.push_back(peer);
  return true;
}

void FetchSession::ask_declined_again() {
  // Starved, the slots we hold give us nothing to ask for: every holder
  // handed back is asked again, and we wait in all their queues, as we did
  // before declining any. (One at a time, a fetcher could wait on a holder
  // whose slot stays taken for a whole rotation.)
  const bool starved = requests_.in_flight_total() == 0;
  while (!declined_.empty() && !done_ && (starved || !holds_its_share_of_slots())) {
    const PeerId peer = declined_.front();
    declined_.pop_front();
    const Neighbour* n = neighbourhood_.find(peer);
    if (n == nullptr || !n->connected) continue;
    actions_.push(AskSlotAgainAction{peer});
    asked_again_.insert(peer);
  }
}

void FetchSession::slot_ended(const PeerId& peer) {
  std::erase(declined_, peer);
  asked_again_.erase(peer);
  ask_declined_again();
}

}  // namespace tensorhub::swarm
