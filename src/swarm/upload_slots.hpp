// Which requesters a holder serves right now (BitTorrent's choking, for a
// cooperative swarm): at most `slots` requesters are unchoked at once, the
// rest wait in arrival order, and every `rotation` the requester that has
// held a slot longest gives it up to the next in line. So a publisher's
// uplink feeds many peers in turn, which then serve each other, instead of
// one peer taking all of it.
//
// Sans-I/O: events and time in, choke/unchoke decisions out.
#pragma once

#include <cstddef>
#include <deque>
#include <map>
#include <optional>
#include <variant>

#include "core/action_queue.hpp"
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
  UploadSlots(std::size_t slots, Duration rotation) : slots_(slots), rotation_(rotation) {}

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

  std::size_t slots_;
  Duration rotation_;
  std::map<PeerId, TimePoint> serving_;  // peer -> since when
  std::deque<PeerId> waiting_;           // FIFO, no duplicates
  core::ActionQueue<SlotAction> actions_;
};

}  // namespace tensorhub::swarm
