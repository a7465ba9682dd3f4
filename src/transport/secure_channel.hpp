// The data-plane handshake and its sealed control frames (no I/O here; the
// caller passes the wall-clock time).
//
// Three messages over a fresh connection; both sides prove their peer key,
// and both prove they hold the swarm key:
//   1. initiator -> responder: "THd" lane | eph_i (32) | id_i (32) | time (8) | mac_i (16)
//   2. responder -> initiator: eph_r (32) | id_r (32) | sig_r (64) | mac_r (16)
//   3. initiator -> responder: sig_i (64)
// mac_x is BLAKE2b keyed with the swarm's data key: only members can produce
// it, and a responder answers nobody else. mac_i covers the responder's id
// too, and `time` (the initiator's wall clock, microseconds since the epoch,
// big-endian): a hello is good for one responder, within 30 s of its clock,
// once (HelloReplayCache), as WireGuard's first message is. So a hello seen
// on the wire cannot be replayed to other members, or to the same one later,
// to make it do public-key work; a replay costs a responder one BLAKE2b.
// sig_x is the peer's Ed25519 signature over the transcript hash, which binds
// both ephemeral keys: a recorded message 1 cannot be completed by anyone
// else. The initiator refuses a responder that is not the peer it meant.
// The lane byte is '1' + the lane's number: a neighbour's first connection
// is lane 0 ("THd1"); further lanes carry requests and pieces alongside it
// when one TCP connection cannot fill a link (peer/data_link.hpp). It is
// inside mac_i and the signed transcript, so it cannot be altered.
// Session keys come from X25519 over the ephemeral keys (libsodium crypto_kx),
// mixed with the swarm key and the transcript.
//
// After the handshake, control frames (requests, HAVEs, bitfields, piece
// headers) are sealed with XChaCha20-Poly1305 under the direction's key, with
// the frame counter as nonce, so a frame cannot be altered, dropped, replayed
// or reordered unnoticed. Block payloads follow their sealed piece header
// unsealed: they go from the holder's registered memory straight to the
// fetcher's destination, and their integrity is the shard hash's job (see
// the manifest's hash modes). The data plane does not hide weights from
// someone who can read the wire.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <optional>
#include <set>
#include <utility>
#include <span>
#include <vector>

#include "core/aead.hpp"
#include "tensorhub/identity.hpp"
#include "tensorhub/ids.hpp"
#include "tensorhub/status.hpp"
#include "tensorhub/swarm_key.hpp"

namespace tensorhub::transport {

inline constexpr std::size_t kHelloBytes = 4 + 32 + 32 + 8 + 16;
// How far a hello's time may be from the responder's clock, either way.
inline constexpr std::uint64_t kHelloFreshnessMicros = 30'000'000;
inline constexpr std::size_t kWelcomeBytes = 32 + 32 + 64 + 16;
inline constexpr std::size_t kFinishBytes = 64;
inline constexpr std::uint8_t kMaxLanes = 8;  // lanes 0 .. kMaxLanes - 1 per neighbour

struct ChannelKeys {
  core::AeadKey send;
  core::AeadKey receive;
  PeerId remote;
  std::uint8_t lane = 0;
};

using HelloMac = std::array<std::uint8_t, 16>;

// The hellos a responder accepted lately, by their MAC, so that none is
// accepted twice. Remembered for twice the freshness window (older ones are
// stale anyway); at most `capacity`, the oldest forgotten first (only
// members can make new hellos, at the cost of their own handshakes).
class HelloReplayCache {
 public:
  explicit HelloReplayCache(std::size_t capacity = 65536) : capacity_(capacity) {}
  // True (and remembered) when `mac` was not accepted before.
  bool admit(const HelloMac& mac, std::uint64_t now_unix_micros);
  std::size_t size() const { return seen_.size(); }

 private:
  std::size_t capacity_;
  std::deque<std::pair<std::uint64_t, HelloMac>> order_;  // (when accepted, mac), oldest first
  std::set<HelloMac> seen_;
};

// The initiator's side. Use once.
class HandshakeInitiator {
 public:
  // `responder`: the peer this connection is meant for; any other that
  // answers is refused. REQUIRES: lane < kMaxLanes.
  HandshakeInitiator(const Identity& identity, const SwarmKey& swarm_key, const PeerId& responder,
                     std::uint8_t lane = 0);
  ~HandshakeInitiator();
  // Message 1, stamped with the wall-clock time.
  std::vector<std::uint8_t> hello(std::uint64_t now_unix_micros);
  // Checks message 2. On success returns message 3 and sets keys().
  Result<std::vector<std::uint8_t>> on_welcome(std::span<const std::uint8_t> welcome);
  const ChannelKeys& keys() const { return *keys_; }

 private:
  const Identity& identity_;
  std::array<std::uint8_t, 32> data_key_;
  PeerId responder_;
  std::uint8_t lane_;
  std::array<std::uint8_t, 32> eph_public_{}, eph_secret_{};
  std::vector<std::uint8_t> transcript_;
  std::optional<ChannelKeys> keys_;
};

// The responder's side. Use once.
class HandshakeResponder {
 public:
  // `replays`: the hellos this peer accepted lately (one cache per peer,
  // shared by its connections). REQUIRES: it outlives this object.
  HandshakeResponder(const Identity& identity, const SwarmKey& swarm_key, HelloReplayCache& replays);
  ~HandshakeResponder();
  // Checks message 1 and returns message 2. Refused (kVerifyFailed), before
  // any public-key work: a wrong swarm key, a hello meant for another peer,
  // one whose time is more than 30 s from `now_unix_micros`, a replay, or an
  // initiator with this peer's own identity.
  Result<std::vector<std::uint8_t>> on_hello(std::span<const std::uint8_t> hello, std::uint64_t now_unix_micros);
  // Checks message 3; on success keys() names the authenticated initiator.
  Status on_finish(std::span<const std::uint8_t> finish);
  const ChannelKeys& keys() const { return *keys_; }

 private:
  const Identity& identity_;
  std::array<std::uint8_t, 32> data_key_;
  HelloReplayCache& replays_;
  std::array<std::uint8_t, 32> eph_public_{}, eph_secret_{};
  std::vector<std::uint8_t> transcript_;
  PeerId initiator_;
  std::optional<ChannelKeys> pending_;
  std::optional<ChannelKeys> keys_;
};

// Seals and opens control frames of one direction, in order.
class FrameSealer {
 public:
  explicit FrameSealer(const core::AeadKey& key) : key_(key) {}
  std::vector<std::uint8_t> seal(std::span<const std::uint8_t> plaintext);
  // Appends the sealed frame to `out` (whose capacity a caller may reuse).
  void seal(std::span<const std::uint8_t> plaintext, std::vector<std::uint8_t>& out);

 private:
  core::AeadKey key_;
  std::uint64_t counter_ = 0;
};

class FrameOpener {
 public:
  explicit FrameOpener(const core::AeadKey& key) : key_(key) {}
  // False for anything not sealed by the peer as the next frame.
  bool open(std::span<const std::uint8_t> sealed, std::vector<std::uint8_t>& plaintext);

 private:
  core::AeadKey key_;
  std::uint64_t counter_ = 0;
};

inline constexpr std::size_t kFrameOverhead = core::kAeadTagBytes;

}  // namespace tensorhub::transport
