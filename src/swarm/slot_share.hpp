// The upload slots of other holders that one fetch holds (docs/swarm-policy.md,
// the slot share).
//
// A fetcher holds at most its share of other holders' upload slots, the
// share its own host offers (SwarmCore sets it). It remembers the holders
// whose unchoke it handed back, in that order, and which of them it asked
// again and has had no answer from (those count as slots held); and, short
// of its share while it waits in holders' queues, the candidates it probes
// for a free slot and since when it has been short. The FetchSession that
// holds it decides when to hand back, ask again or probe, and sends the
// messages; this object keeps the facts consistent.
#pragma once

#include <cstddef>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "core/time.hpp"
#include "tensorhub/ids.hpp"

namespace tensorhub::swarm {

class SlotShare {
 public:
  // 0: no limit.
  void set_share(std::size_t share) { share_ = share; }
  std::size_t share() const { return share_; }
  // Slots held (`slot_sources`, unchoked by holders beyond the host) and
  // asked for again reach the share.
  bool holds_its_share(std::size_t slot_sources) const {
    return share_ != 0 && slot_sources + asked_again_.size() >= share_;
  }

  // --- Handed back and asked again ---
  // `peer` unchoked us: it has answered an ask-again, if there was one.
  // Returns whether it was one.
  bool answered(const PeerId& peer) { return asked_again_.erase(peer) != 0; }
  // Its unchoke is handed back: it waits to be asked again (once).
  void handed_back(const PeerId& peer);
  bool any_handed_back() const { return !declined_.empty(); }
  // Takes the holders handed back, oldest first, while `more()` says to;
  // each that `may_ask(peer)` is asked again (and counts as a slot held
  // until it answers) and appended to `out`; the others are let go.
  template <typename More, typename MayAsk>
  void ask_again(More&& more, MayAsk&& may_ask, std::vector<PeerId>& out);
  // `peer` serves us no more (choked, released or gone): neither a slot
  // held nor one handed back.
  void ended(const PeerId& peer);
  // The fetch is over.
  void clear();

  // --- Probes ---
  // Short of the share since (or the last probe); nullopt: not short.
  const std::optional<TimePoint>& hungry_since() const { return hungry_since_; }
  void set_hungry_since(std::optional<TimePoint> since) { hungry_since_ = since; }
  // Probes not yet unchoking us, and since when.
  const std::map<PeerId, TimePoint>& probes() const { return probes_; }
  void add_probe(const PeerId& peer, TimePoint now) { probes_.emplace(peer, now); }
  void end_probe(const PeerId& peer) { probes_.erase(peer); }
  // Ends the probes for which `answered_or_gone(peer)` holds.
  template <typename Pred>
  void end_probes_if(Pred&& answered_or_gone) {
    std::erase_if(probes_, [&](const auto& probe) { return answered_or_gone(probe.first); });
  }
  // Whether the next probe is drawn from the whole candidate list rather
  // than the nearest: every other one is.
  bool next_probe_far() {
    const bool far = probe_far_;
    probe_far_ = !probe_far_;
    return far;
  }

 private:
  std::size_t share_ = 0;
  // Holders whose unchoke we handed back, to be asked again in that order.
  // No duplicates.
  std::deque<PeerId> declined_;
  // Of those, the ones asked again that have not answered (unchoked,
  // choked or gone): they count as slots we hold.
  std::set<PeerId> asked_again_;
  std::optional<TimePoint> hungry_since_;
  std::map<PeerId, TimePoint> probes_;
  bool probe_far_ = false;
};

template <typename More, typename MayAsk>
void SlotShare::ask_again(More&& more, MayAsk&& may_ask, std::vector<PeerId>& out) {
  while (!declined_.empty() && more()) {
    const PeerId peer = declined_.front();
    declined_.pop_front();
    if (!may_ask(peer)) continue;
    asked_again_.insert(peer);
    out.push_back(peer);
  }
}

}  // namespace tensorhub::swarm
