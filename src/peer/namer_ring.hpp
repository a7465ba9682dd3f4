// The peers whose records name a signed record this peer wants (a manifest,
// a seal, a part), asked for it one at a time, round robin: the head
// tracker and the part book each keep one per record they want.
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <vector>

#include "core/time.hpp"
#include "tensorhub/ids.hpp"

namespace tensorhub::peer {

struct NamerRing {
  static constexpr std::size_t kNotAsked = static_cast<std::size_t>(-1);

  std::vector<PeerId> namers;           // in the order heard
  std::size_t last_asked = kNotAsked;   // index in namers; the one after it is asked next
  TimePoint asked_at = kTimeNever;      // kTimeNever: no answer awaited

  bool names(const PeerId& peer) const { return std::find(namers.begin(), namers.end(), peer) != namers.end(); }
  // Remembers `peer` when it is new and fewer than `most` are.
  void add(const PeerId& peer, std::size_t most) {
    if (!names(peer) && namers.size() < most) namers.push_back(peer);
  }
  // Forgets `peer`; the namer after the one asked last keeps its turn.
  // False when it named nothing here.
  bool drop(const PeerId& peer) {
    auto pos = std::find(namers.begin(), namers.end(), peer);
    if (pos == namers.end()) return false;
    const auto index = static_cast<std::size_t>(pos - namers.begin());
    namers.erase(pos);
    if (last_asked != kNotAsked && index <= last_asked) last_asked = last_asked == 0 ? kNotAsked : last_asked - 1;
    return true;
  }
  // The namer to ask now, `peer` when it is one (it just spoke, so it is
  // alive), else the next in turn; the answer is awaited from `now`. None
  // (and nothing awaited) when no peer names it.
  std::optional<PeerId> ask(TimePoint now, const std::optional<PeerId>& peer = std::nullopt) {
    if (namers.empty()) {
      asked_at = kTimeNever;  // asked again when a record names it
      return std::nullopt;
    }
    auto pos = peer ? std::find(namers.begin(), namers.end(), *peer) : namers.end();
    last_asked = pos != namers.end() ? static_cast<std::size_t>(pos - namers.begin())
                 : last_asked == kNotAsked ? 0
                                           : (last_asked + 1) % namers.size();
    asked_at = now;
    return namers[last_asked];
  }
  // Whether an answer is awaited and not overdue after `retry`.
  bool awaiting(TimePoint now, Duration retry) const { return asked_at != kTimeNever && now - asked_at < retry; }
};

}  // namespace tensorhub::peer
