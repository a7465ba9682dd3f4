// Which requesters a holder serves right now (BitTorrent's choking, for a
// cooperative swarm): at most `slots` requesters are unchoked at once, the
// rest wait, and a requester served for `rotation` gives its slot up to one
// that waits. So a publisher's uplink feeds many peers in turn, which then
// serve each other, instead of one peer taking all of it.
//
// Holders must not choke in step. Every holder sees its requesters arrive
// in about the same order at about the same time; when each unchoked the
// first in line and rotated them all at once, every holder would choke the
// same half of the swarm for `rotation` and then the other half, which would
// sit nearly idle half the time. So the next to be served is drawn at random (seeded
// per holder and version), ties for the longest served are broken at random,
// and slots change hands one at a time, one every rotation / slots.
//
// Sans-I/O: events and time in, choke/unchoke decisions out.
#pragma once

#include <cstddef>
#include <deque>
#include <map>
#include <optional>
#include <variant>

#include "core/action_queue.hpp"
#include "core/rng.hpp"
#include "core/time.hpp"
#include "tensorhub/ids.hpp"

namespace tensorhub::swarm {

struct ChokeAction {
  PeerId peer;
};
struct UnchokeAction {
  PeerId peer;
};
using SlotAction = std::variant<ChokeAction, UnchokeAction>;

class UploadSlots {
 public:
  // REQUIRES: slots >= 1.
  UploadSlots(std::size_t slots, Duration rotation, std::uint64_t seed)
      : slots_(slots), rotation_(rotation), rng_(seed) {}

  // The peer wants blocks from us (it sent a request while choked, or said so).
  void on_interested(TimePoint now, const PeerId& peer);
  // It has what it needs from us, or disconnected.
  void on_gone(TimePoint now, const PeerId& peer);
  void handle_timeout(TimePoint now);
  TimePoint next_timeout() const;

  bool unchoked(const PeerId& peer) const { return serving_.count(peer) != 0; }
  std::size_t serving() const { return serving_.size(); }
  std::size_t waiting() const { return waiting_.size(); }
  std::optional<SlotAction> poll();

 private:
  void fill(TimePoint now);
  // When the longest-served requester's turn is over (kTimeNever: none).
  TimePoint turn_over() const;
  // Recomputes oldest_since_. fill() calls it, and every change of
  // serving_ ends with a fill (turn_over runs at every timer the driver
  // arms, so it walks nothing).
  void note_serving_changed();

  std::size_t slots_;
  Duration rotation_;
  core::SplitMix64 rng_;
  std::map<PeerId, TimePoint> serving_;  // peer -> since when
  TimePoint oldest_since_ = kTimeNever;  // the earliest since in serving_
  std::deque<PeerId> waiting_;           // no duplicates
  TimePoint next_handover_{};            // slots change hands no sooner than this
  core::ActionQueue<SlotAction> actions_;
};

}  // namespace tensorhub::swarm
