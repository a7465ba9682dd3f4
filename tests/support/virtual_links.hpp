// The data plane that the tests' virtual networks (SwarmNetwork, PeerNetwork)
// share: connections, messages and pieces between peers numbered from 0, in
// virtual time, carrying real bytes.
//
// Messages arrive after a latency. A piece waits for its sender's uplink (one
// piece after another at the uplink's rate); its header arrives with its first
// byte (begin_piece) and its payload with its last (on_piece), and closing the
// connection in between drops it. Connecting takes two latencies, failing ten.
// The network owns the clock: each event goes back to it through `schedule`,
// and comes back to deliver() when its time comes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include "core/time.hpp"
#include "swarm/swarm_messages.hpp"
#include "tensorhub/ids.hpp"

namespace tensorhub::testing {

enum class LinkKind { kMessage, kPieceHeader, kPiece, kConnected, kConnectFailed, kDisconnected };

struct LinkEvent {
  LinkKind kind = LinkKind::kMessage;
  std::size_t to = 0, from = 0;
  swarm::SwarmMessage message;
  std::vector<std::byte> payload;
  std::uint64_t serial = 0;  // a piece's header and payload share it
};

// `Target`: where a core's begin_piece says a payload goes.
template <typename Target>
class VirtualLinks {
 public:
  using Schedule = std::function<void(TimePoint at, LinkEvent event)>;
  VirtualLinks(Duration latency, Schedule schedule) : latency_(latency), schedule_(std::move(schedule)) {}

  // The next peer, with its uplink's rate.
  void add_peer(double uplink_bytes_per_second) { uplinks_.push_back(Uplink{uplink_bytes_per_second, {}, 0}); }
  // The peer takes connections and never delivers a message again.
  void silence(std::size_t peer) { silent_.insert(peer); }

  // A core's actions. `to`: the peer named, if it is one of the network's;
  // `up`: whether it runs. The opener hears how it went, from `to`.
  void open(TimePoint now, std::size_t opener, std::optional<std::size_t> to, bool up) {
    up = up && to.has_value();
    schedule_(now + latency_ * (up ? 2 : 10), LinkEvent{up ? LinkKind::kConnected : LinkKind::kConnectFailed, opener,
                                                        to.value_or(opener), {}, {}, 0});
  }
  // Also how a crash looks to each live peer: `from` closed on it.
  void close(TimePoint now, std::size_t from, std::size_t to) {
    drop_landings(from, to);
    schedule_(now + latency_, LinkEvent{LinkKind::kDisconnected, to, from, {}, {}, 0});
  }
  void send(TimePoint now, std::size_t from, std::size_t to, const swarm::SwarmMessage& message) {
    ++messages_[{from, to, message.type}];
    schedule_(now + latency_, LinkEvent{LinkKind::kMessage, to, from, message, {}, 0});
  }
  void serve(TimePoint now, std::size_t from, std::size_t to, const swarm::SwarmMessage& header,
             std::vector<std::byte> bytes) {
    Uplink& u = uplinks_[from];
    const auto send_time = Duration(static_cast<std::int64_t>(1e6 * static_cast<double>(bytes.size()) / u.rate));
    const TimePoint first_byte = std::max(u.free_at, now);
    u.free_at = first_byte + send_time;
    u.bytes_served += bytes.size();
    const std::uint64_t serial = next_serial_++;
    schedule_(first_byte + latency_, LinkEvent{LinkKind::kPieceHeader, to, from, header, {}, serial});
    schedule_(u.free_at + latency_, LinkEvent{LinkKind::kPiece, to, from, header, std::move(bytes), serial});
  }
  // Delivers `e` to its peer's `core`. `from_alive`: whether its sender
  // still runs (what a dead peer sent is lost; its connections fail).
  // `store(target, payload)` writes a payload where begin_piece said, and
  // returns whether it was kept (false: the destination refused it).
  template <typename Core, typename Store>
  void deliver(Core& core, TimePoint now, const PeerId& from, bool from_alive, LinkEvent& e, Store&& store) {
    const bool carries_data = e.kind == LinkKind::kMessage || e.kind == LinkKind::kPieceHeader || e.kind == LinkKind::kPiece;
    if (carries_data && !from_alive) return;
    switch (e.kind) {
      case LinkKind::kMessage:
        if (!silent_.count(e.to)) core.on_message(now, from, e.message);
        break;
      case LinkKind::kPieceHeader:
        landings_[e.serial] = {e.to, e.from, core.begin_piece(now, from, e.message)};
        break;
      case LinkKind::kPiece: {
        auto landing = landings_.find(e.serial);
        if (landing == landings_.end()) return;  // its connection closed meanwhile
        const std::optional<Target> target = std::get<2>(landing->second);
        landings_.erase(landing);
        const bool stored = target && target->length == e.payload.size();
        if (stored && !store(*target, std::span<const std::byte>(e.payload))) {
          core.on_piece_not_kept(now, from, e.message);
          break;
        }
        core.on_piece(now, from, e.message, stored);
        break;
      }
      case LinkKind::kConnected:
        if (from_alive) {
          core.on_connected(now, from);
        } else {
          core.on_connect_failed(now, from);
        }
        break;
      case LinkKind::kConnectFailed: core.on_connect_failed(now, from); break;
      case LinkKind::kDisconnected:
        drop_landings(e.to, e.from);
        core.on_disconnected(now, from);
        break;
    }
  }

  std::size_t messages(std::size_t from, std::size_t to, swarm::MessageType type) const {
    auto it = messages_.find({from, to, type});
    return it == messages_.end() ? 0 : it->second;
  }
  std::uint64_t bytes_served(std::size_t peer) const { return uplinks_[peer].bytes_served; }

 private:
  struct Uplink {
    double rate = 1e9;  // bytes per second
    TimePoint free_at;  // when its last piece has gone
    std::uint64_t bytes_served = 0;
  };
  // The connection between the two is gone: pieces on it stop landing.
  void drop_landings(std::size_t a, std::size_t b) {
    std::erase_if(landings_, [&](const auto& entry) {
      const auto& [to, from, target] = entry.second;
      return (to == a && from == b) || (to == b && from == a);
    });
  }

  Duration latency_;
  Schedule schedule_;
  std::vector<Uplink> uplinks_;
  std::set<std::size_t> silent_;
  std::map<std::tuple<std::size_t, std::size_t, swarm::MessageType>, std::size_t> messages_;
  // Pieces between their header and their last byte, by serial: to, from, target.
  std::map<std::uint64_t, std::tuple<std::size_t, std::size_t, std::optional<Target>>> landings_;
  std::uint64_t next_serial_ = 1;
};

}  // namespace tensorhub::testing
