// FetchSession's policy over its SlotShare: it holds at most as many
// holders' upload slots as its peer offers, hands back unchokes past that
// and asks for them again as slots end, and probes for free ones.
#include "swarm/fetch_session.hpp"

#include <algorithm>
#include <cassert>

namespace tensorhub::swarm {

void FetchSession::set_slot_share(TimePoint now, std::size_t share) {
  slots_.set_share(share);
  keep_slot_share(now);
}

void FetchSession::keep_slot_share(TimePoint now) {
  slots_.end_probes_if([&](const PeerId& probe) {
    const Neighbour* n = neighbourhood_.find(probe);
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
  if (done_ || slots_.share() == 0 || pulls_across_wan()) {
    slots_.set_hungry_since(std::nullopt);
    return;
  }
  if (held > slots_.share() && requests_.in_flight_total() != 0) {
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
  if (config_.slot_probes == 0 || unrequested_ == 0 || held >= slots_.share() || !waiting ||
      neighbourhood_.candidates().empty()) {
    slots_.set_hungry_since(std::nullopt);
    return;
  }
  if (!slots_.hungry_since()) {
    slots_.set_hungry_since(now);
    return;
  }
  if (now < *slots_.hungry_since() + config_.slot_probe_after) return;
  slots_.set_hungry_since(now);
  std::vector<PeerId> unanswered;
  for (const auto& [peer, since] : slots_.probes()) {
    // One still connecting is kept: given up then, its holder would hear
    // our interest after the release and might grant a slot nobody uses.
    if (now >= since + config_.slot_probe_after && !neighbourhood_.find(peer)->connecting) unanswered.push_back(peer);
  }
  for (const PeerId& peer : unanswered) {
    slots_.end_probe(peer);
    release_neighbour(now, peer);
  }
  while (slots_.probes().size() < config_.slot_probes && !neighbourhood_.candidates().empty()) {
    // Every other probe is drawn from the whole list, this side of the WAN.
    // The slots free at a moment can be a handful among a thousand peers
    // (each host offers as many as its peers may hold), and probing only
    // the nearest never finds them when they are in other racks.
    PeerId probe = *neighbourhood_.nearest_candidate(/*complete_only=*/false, /*drawn=*/true);
    if (slots_.next_probe_far()) {
      const PeerId far = neighbourhood_.any_candidate();
      if (neighbourhood_.candidates().find(far)->proximity != Proximity::kRemote) probe = far;
    }
    connect_to(now, probe);
    slots_.add_probe(probe, now);
  }
}

bool FetchSession::decline_slot(const PeerId& peer) {
  const bool asked = slots_.answered(peer);
  const bool starving = requests_.in_flight_total() == 0;
  // Starved, a fetch that pulls across the WAN takes the slot: handing it
  // back only to ask again at once (ask_declined_again) leaves the holder's
  // slot idle for a round trip, a WAN one when the holder is a trainer
  // rank. Inside a datacenter that round trip is cheap, and taking the slot
  // would spread slots worse.
  const bool takes_it = starving && (asked || pulls_across_wan());
  const Neighbour* n = neighbourhood_.find(peer);
  const bool same_host = n != nullptr && n->proximity == Proximity::kSameHost;
  if (takes_it || same_host || !slots_.holds_its_share(slot_sources())) return false;
  actions_.push(DeclineSlotAction{peer});
  slots_.handed_back(peer);
  return true;
}

void FetchSession::ask_declined_again() {
  // Starved, the slots we hold give us nothing to ask for: every holder
  // handed back is asked again, and we wait in all their queues, as we did
  // before declining any. (One at a time, a fetcher could wait on a holder
  // whose slot stays taken for a whole rotation.)
  const bool starved = requests_.in_flight_total() == 0;
  const std::size_t held = slot_sources();
  std::vector<PeerId> asked;
  slots_.ask_again([&] { return !done_ && (starved || !slots_.holds_its_share(held)); },
                   [&](const PeerId& peer) {
                     const Neighbour* n = neighbourhood_.find(peer);
                     return n != nullptr && n->connected;
                   },
                   asked);
  for (const PeerId& peer : asked) actions_.push(AskSlotAgainAction{peer});
}

void FetchSession::slot_ended(const PeerId& peer) {
  slots_.ended(peer);
  ask_declined_again();
}

}  // namespace tensorhub::swarm
