// FetchSession's slot share: it holds at most as many holders' upload
// slots as its peer offers, and probes for free ones.
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
    auto n = neighbours_.find(probe.first);
    return n == neighbours_.end() || (n->second.connected && !n->second.choked);
  });
  // Slots beyond the host, and whether we wait for more. A fetch that
  // pulls across the WAN is paced by the WAN, not by slots; and its
  // neighbours in the datacenter decide who carries what across
  // (share_is_mine), which probes coming and going would unsettle.
  std::size_t held = 0;
  bool waiting = false;
  for (const auto& [peer, n] : neighbours_) {
    if (n.proximity == Proximity::kSameHost || n.super_seed) continue;
    if (n.connecting || (n.connected && n.choked)) waiting = true;
    if (n.connected && !n.choked) ++held;
  }
  if (done_ || slot_share_ == 0 || pulls_across_wan()) {
    slot_hungry_since_.reset();
    return;
  }
  if (held > slot_share_ && in_flight_total_ != 0) {
    // Past the share: the slot with the fewest requests in flight goes back.
    const PeerId* surplus = nullptr;
    std::size_t fewest = std::numeric_limits<std::size_t>::max();
    for (const auto& [peer, n] : neighbours_) {
      if (!n.connected || n.choked || n.super_seed || n.proximity == Proximity::kSameHost) continue;
      if (n.in_flight < fewest) {
        fewest = n.in_flight;
        surplus = &peer;
      }
    }
    const PeerId handed_back = *surplus;
    release_neighbour(now, handed_back);
    --held;
  }
  if (config_.slot_probes == 0 || unrequested_ == 0 || held >= slot_share_ || !waiting || candidates_.empty()) {
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
    if (now >= since + config_.slot_probe_after && !neighbours_.at(peer).connecting) unanswered.push_back(peer);
  }
  for (const PeerId& peer : unanswered) {
    slot_probes_.erase(peer);
    release_neighbour(now, peer);
  }
  while (slot_probes_.size() < config_.slot_probes && !candidates_.empty()) {
    // Every other probe is drawn from the whole list, this side of the WAN.
    // The slots free at a moment can be a handful among a thousand peers
    // (each host offers as many as its peers may hold), and probing only
    // the nearest never finds them when they are in other racks.
    PeerId probe = *candidates_.nearest(/*complete_only=*/false, &rng_);
    if (probe_far_) {
      const PeerId far = candidates_.any(rng_);
      if (candidates_.find(far)->proximity != Proximity::kRemote) probe = far;
    }
    probe_far_ = !probe_far_;
    connect_to(now, probe);
    slot_probes_.emplace(probe, now);
  }
}

}  // namespace tensorhub::swarm
